"""Keep a written report whose inputs have not changed, instead of building it again.

A report is a pure function of its inputs: the archive's files (their fingerprint, which covers the reads
and therefore the states), the resolved plan, the evaluator, whether the archive was verified, and the code.
``OUT/.report-inputs.json`` records the sha256 of those inputs and the fingerprint (path, size, inode, mtime,
ctime: :func:`~draligned.archive.fingerprint.tree_fingerprint`) of every file the report wrote. A report asked
again with the same inputs is kept only when none of its files was written, replaced, added or removed since;
anything else (other inputs, an edited or missing output file, no record) builds it again, so a kept report never
shows results the inputs would not give.
"""

from __future__ import annotations

import json
from pathlib import Path

from draligned.archive.fingerprint import tree_fingerprint

INPUTS = ".report-inputs.json"
"""The record of a written report's inputs, output files and queries, in its output directory."""


def _outputs(out: Path) -> str:
    """The fingerprint of every file under ``out`` but the record itself (any write to one changes it)."""
    return tree_fingerprint(out, lambda e: e.name != INPUTS)


def kept_queries(out: Path, inputs: str) -> list[str] | None:
    """The queries of the report under ``out`` if it was written from ``inputs`` and its files are unchanged
    since; None when it must be built."""
    try:
        record = json.loads((out / INPUTS).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("inputs") != inputs:
        return None
    if record.get("files") != _outputs(out):
        return None
    queries = record.get("queries")
    return queries if isinstance(queries, list) else None


def record_inputs(out: Path, inputs: str, queries: list[str]) -> None:
    """Record that the report just written under ``out`` came from ``inputs`` and ran ``queries``."""
    record = {"inputs": inputs, "files": _outputs(out), "queries": queries}
    (out / INPUTS).write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
