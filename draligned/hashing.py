"""Hashing and canonical JSON: every identity in draligned is a sha256 of exact bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of a text encoded as UTF-8."""
    return sha256_bytes(text.encode("utf-8"))


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys, no spaces, UTF-8) so equal data hashes equally."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_json(obj: Any) -> str:
    """Hex sha256 of the canonical JSON of ``obj``."""
    return sha256_bytes(canonical_json(obj))


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    return sha256_bytes(Path(path).read_bytes())
