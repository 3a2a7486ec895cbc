"""The one interface through which a concept adds its part to an archive's index and to ``verify``.

The archive knows only its own files. Each concept that derives index tables from the files or
owns files under the archive root (run records and events; evaluator reads and states; CESS
rows; review keys) supplies one :class:`ArchiveTables`, and a module above them all
(:mod:`draligned.indexing`) composes the list that ``rebuild_index`` and ``verify_archive`` get.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from draligned.archive.store import Archive
from draligned.records import RunRecord

Rows = Mapping[str, Sequence[tuple[Any, ...]]]
"""Rows per table name, each in its table's column order and in insert order."""


def no_rows(archive: Archive, records: Sequence[RunRecord]) -> Rows:
    """The rows of a concept without tables."""
    return {}


def no_files(archive: Archive) -> list[str]:
    """The problems of a concept that owns no files."""
    return []


@dataclass(frozen=True)
class ArchiveTables:
    """One concept's derived index tables and the files it owns in an archive."""

    name: str
    """What supplies them (for messages and the architecture table)."""
    ddl: str = ""
    """``CREATE TABLE`` statements of its tables (empty: no tables)."""
    rows: Callable[[Archive, Sequence[RunRecord]], Rows] = no_rows
    """Its rows computed from the archive's files, given every run record (sealed records replacing
    their started markers), in run-id order."""
    verify: Callable[[Archive], list[str]] = no_files
    """One problem line per unreadable file it owns or missing blob such a file references."""
