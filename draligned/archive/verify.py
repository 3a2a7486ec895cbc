"""Recompute every hash in an archive and name each missing or altered file.

The archive checks its own files (blobs and run records); every other concept's files are checked
by the verify of the :class:`~draligned.archive.tables.ArchiveTables` it supplies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import duckdb
from pydantic import ValidationError

from draligned.archive.store import Archive, stale_temp_files
from draligned.archive.tables import ArchiveTables
from draligned.hashing import sha256_bytes, sha256_json
from draligned.records import RunRecord


def verify_archive(archive: Archive, tables: Sequence[ArchiveTables]) -> list[str]:
    """One problem line per missing or altered file, over the files of every supplier (sorted);
    empty when the archive is intact."""
    if not archive.root.exists():
        return [f"{archive.root}: archive does not exist"]
    return sorted({line for supplier in tables for line in supplier.verify(archive)})


def verify_records(archive: Archive) -> list[str]:
    """Altered blobs, unreadable or altered run records, missing blobs they reference, missing run
    record files and leftovers of interrupted writes."""
    problems: list[str] = []
    for sha in archive.blob_shas():
        path = archive.blob_path(sha)
        actual = sha256_bytes(path.read_bytes())
        if actual != sha:
            problems.append(f"{path}: altered blob (content sha256 {actual})")
    problems += record_problems(archive)
    problems += [f"{p}: leftover of an interrupted write (removed by the next 'draligned run' or "
                 f"'draligned archive reindex')" for p in stale_temp_files(archive)]
    return problems


def record_problems(archive: Archive) -> list[str]:
    """The run records' part of verify (no blob is hashed, so it is cheap enough for every ``run``):
    unreadable or altered records, missing blobs they reference, missing record files."""
    problems: list[str] = []
    for path in archive.started_paths() + archive.record_paths():
        record = _check_record(path, problems)
        if record is None:
            continue
        for sha, kind in record.blob_refs() + [(e, "final") for e in [record.final_blob] if e]:
            if not archive.blob_path(sha).exists():
                problems.append(f"{archive.blob_path(sha)}: missing {kind} blob referenced by {path.name}")
    return problems + _missing_records(archive)


def _check_record(path: Path, problems: list[str]) -> RunRecord | None:
    """Parse a record and check its ``record_sha256``; append problems, return it if usable."""
    try:
        data = json.loads(path.read_bytes())
        record = RunRecord.model_validate(data)
    except (ValueError, ValidationError) as exc:
        problems.append(f"{path}: unreadable run record ({str(exc).splitlines()[0]})")
        return None
    body = {k: v for k, v in data.items() if k != "record_sha256"}
    if sha256_json(body) != data.get("record_sha256"):
        problems.append(f"{path}: altered run record (record_sha256 does not match its content)")
    return record


def _missing_records(archive: Archive) -> list[str]:
    """Run record files that must exist but do not. Every run writes its started marker before
    anything else, so a sealed record without one lost a file; and a run the index lists as ended
    whose sealed record is gone would otherwise pass for an interrupted run (and be rerun)."""
    started = {p.name.removesuffix(".started.json") for p in archive.started_paths()}
    sealed = {p.name.removesuffix(".json") for p in archive.record_paths()}
    problems = [f"{archive.runs_dir / (r + '.started.json')}: missing started marker of sealed run {r}"
                for r in sorted(sealed - started)]
    index = archive.root / "index.duckdb"
    if index.exists():
        try:
            with duckdb.connect(str(index), read_only=True) as con:
                ended = con.execute("SELECT run_id, status FROM runs WHERE status <> 'started'").fetchall()
        except duckdb.Error:  # an index from another version or a damaged one: it is derived, skip it
            ended = []
        problems += [f"{archive.runs_dir / (r + '.json')}: missing run record ({status} in index.duckdb)"
                     for r, status in ended if r not in sealed]
    return problems
