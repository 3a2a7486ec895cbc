"""The one interface through which a concept adds its part to an archive's index and to ``verify``.

The archive knows only its own files. Each concept that derives index tables from the files or
owns files under the archive root (run records and events; evaluator reads and states; CESS
rows; review keys) supplies one :class:`ArchiveTables`, and a module above them all
(:mod:`draligned.indexing`) composes the list that ``rebuild_index`` and ``verify_archive`` get.

Rows come and go in batches, so an index of any number of runs is built in bounded memory: a supplier
is given the run records a batch at a time (:func:`record_batches`) and yields its rows a batch at a
time; each batch is inserted and dropped before the next is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from draligned.archive.store import Archive
from draligned.records import RunRecord

Rows = Mapping[str, Sequence[tuple[Any, ...]]]
"""Rows per table name, each in its table's column order and in insert order."""

BATCH = 256
"""Run records per batch (a full record parses to well under 1 MB, so a batch stays in tens of MB)."""


def record_batches(archive: Archive, size: int = BATCH) -> Iterator[list[RunRecord]]:
    """Every run record in run-id order, ``size`` at a time, read one file at a time: the sealed record
    of a run that ended, else its started marker."""
    sealed, started = archive.run_names()
    names = set(sealed) | set(started)
    batch: list[RunRecord] = []
    for run_id in sorted({n.removesuffix(".json").removesuffix(".started") for n in names}):
        name = f"{run_id}.json" if f"{run_id}.json" in names else f"{run_id}.started.json"
        batch.append(archive.load_record(archive.runs_dir / name))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def no_rows(archive: Archive, records: Iterable[Sequence[RunRecord]]) -> Iterable[Rows]:
    """The rows of a concept without tables."""
    return []


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
    rows: Callable[[Archive, Iterable[Sequence[RunRecord]]], Iterable[Rows]] = no_rows
    """Its rows computed from the archive's files, yielded in batches, given every run record in batches
    (:func:`record_batches`: run-id order, sealed records replacing their started markers; read as they are
    iterated, so a supplier that needs no records reads none). A supplier holds at most about one batch of
    records and of rows (plus what it reads from its own files)."""
    verify: Callable[[Archive], list[str]] = no_files
    """One problem line per unreadable file it owns or missing blob such a file references."""
