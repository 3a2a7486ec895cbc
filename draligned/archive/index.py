"""The DuckDB index: a derived, rebuildable view of the archive's files for queries.

It is never the source of truth. ``rebuild_index`` writes a fresh database from the
files in a deterministic order, so rebuilding twice gives identical table contents. Which
tables it holds is given from above: one :class:`~draligned.archive.tables.ArchiveTables` per
concept (``draligned.indexing`` composes them).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import orjson

from draligned.archive.fingerprint import INDEX
from draligned.archive.store import Archive, ArchiveError, remove_stale_temp_files
from draligned.archive.tables import ArchiveTables, record_batches


def bulk_insert(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[tuple[Any, ...]], scratch: Path,
                columns: Sequence[tuple[str, str]]) -> None:
    """Insert many rows at once through a newline-delimited JSON file in the folder ``scratch`` (executemany
    is slow); ``columns`` are the table's names and types in order."""
    if not rows:
        return
    path = scratch / f"{table}.jsonl"
    names = [c for c, _ in columns]
    with path.open("wb") as fh:
        for row in rows:
            fh.write(_json_line(dict(zip(names, row, strict=True))))
    spec = "{" + ", ".join(f"'{c}': '{t}'" for c, t in columns) + "}"
    con.execute(f"INSERT INTO {table} SELECT * FROM read_json(?, format='newline_delimited', "
                f"columns={spec})", [str(path)])


_AS_JSON_DOES = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
"""orjson refuses what json refuses (dates, dataclasses: it would write them as text); the row then goes to json,
which raises as before."""


def _json_line(row: dict[str, Any]) -> bytes:
    """One row as a line of JSON: orjson's (several times faster than json's), unless a value is a float NaN or
    infinity, which orjson would write as null but json writes as a token read_json keeps, or a value orjson
    refuses (an int beyond 64 bits)."""
    if all(map(_plain, row.values())):
        try:
            return orjson.dumps(row, option=_AS_JSON_DOES) + b"\n"
        except TypeError:
            pass
    return (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")


def _plain(value: Any) -> bool:
    """Whether ``value`` holds no non-finite float, at any depth."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is list or kind is tuple:
        return all(map(_plain, value))
    if kind is dict:
        return all(map(_plain, value.values()))
    return True


def table_columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    """Each table's column names and types in order (one catalog query: asking per insert cost more than
    the insert)."""
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in con.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                                           "WHERE database_name = current_database() "
                                           "ORDER BY table_name, column_index").fetchall():
        columns.setdefault(table, []).append((column, kind))
    return columns


def require_archive(archive: Archive) -> None:
    """ArchiveError unless the archive root is a directory (a mistyped path is not an empty archive)."""
    if not archive.root.is_dir():
        raise ArchiveError(f"{archive.root}: no archive here (not a directory)")


def index_path(archive: Archive) -> Path:
    """Where the index of an archive lives."""
    return archive.root / INDEX


INDEX_LOCK = ".index.lock"
"""Held while an index is rebuilt, so that rebuilds (by run, read, reindex, report) follow one another."""


@contextmanager
def _index_lock(archive: Archive) -> Iterator[None]:
    """An exclusive lock on rebuilding the archive's index (released when the fd closes or the process dies)."""
    fd = os.open(archive.root / INDEX_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def rebuild_index(archive: Archive, tables: Sequence[ArchiveTables]) -> Path:
    """Rebuild ``index.duckdb`` with every supplier's tables, from the run records (started markers
    included, a sealed record replacing its marker) and the files the suppliers read, a batch at a time:
    memory stays bounded whatever the number of runs.

    The new index is built under a unique temporary name and moved into place atomically, under the
    index lock: readers see the old index or the new one, never half of one, and rebuilds at the same
    time follow one another. Leftovers of killed rebuilds and killed ``write_once`` calls are removed.
    """
    require_archive(archive)
    target = index_path(archive)
    with _index_lock(archive):
        for stale in archive.root.glob(".index*.tmp*"):  # killed rebuilds (we hold the lock: none is live)
            stale.unlink(missing_ok=True)
        remove_stale_temp_files(archive)
        fd, name = tempfile.mkstemp(dir=archive.root, prefix=".index-", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        tmp.unlink()  # DuckDB creates the database file itself
        try:
            con = duckdb.connect(str(tmp))
            try:
                for supplier in tables:
                    if supplier.ddl:
                        con.execute(supplier.ddl)
                columns = table_columns(con)
                with tempfile.TemporaryDirectory(prefix="draligned-index-") as scratch:
                    for supplier in tables:
                        for batch in supplier.rows(archive, record_batches(archive)):
                            for table, rows in batch.items():
                                bulk_insert(con, table, rows, Path(scratch), columns[table])
            finally:
                con.close()
            os.replace(tmp, target)
        finally:
            for left in (tmp, Path(f"{tmp}.wal")):
                left.unlink(missing_ok=True)
    return target


def connect(archive: Archive) -> duckdb.DuckDBPyConnection:
    """Open the existing index read-only (``draligned.indexing.connect`` builds it first if missing)."""
    require_archive(archive)
    path = index_path(archive)
    if not path.exists():
        raise ArchiveError(f"{path}: no index; run 'draligned archive reindex {archive.root}'")
    return duckdb.connect(str(path), read_only=True)
