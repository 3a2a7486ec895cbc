"""The archive's one error type, shared by the synchronous writes and the group-commit thread."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn


class ArchiveError(Exception):
    """An archive operation that would lose or overwrite data, or found damaged data."""


def refuse_overwrite(path: Path) -> NoReturn:
    """Refuse to replace ``path``, which exists with other bytes (nothing archived is ever overwritten)."""
    raise ArchiveError(f"{path}: exists with different bytes; refusing to overwrite")
