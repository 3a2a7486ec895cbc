"""Trajectories as Parquet: one row per trajectory, the JSON Lines record's fields as columns.

``pool`` and ``rounds`` are nested exactly as in the JSON record (a struct, a list of structs), so
a row reads back as the same record; an absent optional field is NULL. DuckDB writes the file.
:func:`load_parquet` checks the column types (DuckDB), then every rule of the JSON Lines loader with
vectorised numpy over the columns pyarrow decodes (:mod:`draligned.cess.parquet_batch`: DuckDB's
conversion of 1.8 × 10^8 nested doubles to numpy alone takes longer than the 2 s target at 10^6
trajectories, pyarrow hands them over as views); a row that fails is read back as a record and explained by the same
full validator (:func:`draligned.cess.trajectory.check_record`), so the error names the row, its
trajectory id and the field, with the JSON Lines loader's message. Parquet can hold NaN and
infinities, which JSON cannot: they are refused too.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow.parquet as pq

from draligned.cess.columns import ColumnBuilder, TrajectoryColumns
from draligned.cess.parquet_batch import Checked, check_batch
from draligned.cess.trajectory import TrajectoryError, check_record

COLUMNS = {
    "trajectory_id": "VARCHAR",
    "task_id": "VARCHAR",
    "ranking": "VARCHAR",
    "budget": "BIGINT",
    "pool": "STRUCT(doc_ids VARCHAR[], y DOUBLE[], m DOUBLE[])",
    "rounds": "STRUCT(probs DOUBLE[], chosen VARCHAR, stop_prob DOUBLE, y DOUBLE)[]",
}
"""The Parquet schema: the JSON Lines record's fields, in DuckDB types."""
ROW_GROUP_ROWS = 16_384
"""Rows per row group written: the reader decodes one at a time, so smaller groups bound its memory
(DuckDB's default of 122,880 rows held ~0.6 GB more at 10^6 trajectories); any size reads."""


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def write_parquet(jsonl: Path, out: Path) -> None:
    """Convert a JSON Lines trajectory file (validated already) to Parquet with :data:`COLUMNS`."""
    columns = "{" + ", ".join(f"{name}: '{kind}'" for name, kind in COLUMNS.items()) + "}"
    duckdb.connect().execute(
        f"COPY (SELECT * FROM read_json({_literal(jsonl)}, format = 'newline_delimited', columns = {columns}))"
        f" TO {_literal(out)} (FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP_ROWS})")


def _schema_problem(con: duckdb.DuckDBPyConnection) -> TrajectoryError | None:
    found = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM t)").fetchall())
    found.pop("row", None)
    for name, kind in COLUMNS.items():
        if name not in found:
            return TrajectoryError(0, name, f"column missing (expected {kind})", where="schema")
        if found[name] != kind and not (name == "budget" and found[name].endswith("INT")):
            return TrajectoryError(0, name, f"has type {found[name]}, expected {kind}", where="schema")
    extra = sorted(set(found) - set(COLUMNS))
    if extra:
        return TrajectoryError(0, extra[0], f"unexpected column (the columns are {', '.join(COLUMNS)})",
                               where="schema")
    return None


def _nonfinite(value: Any, path: str) -> Iterator[str]:
    """Paths of NaN and infinite numbers in a record (JSON has none; Parquet can)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nonfinite(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _nonfinite(item, f"{path}[{i}]")


def _explain(con: duckdb.DuckDBPyConnection, row: int) -> TrajectoryError | None:
    """The full validator's verdict on one row (None: valid after all, e.g. a sum just within tolerance)."""
    cursor = con.execute("SELECT * EXCLUDE (row) FROM t WHERE row = ?", [row])
    names = [d[0] for d in cursor.description]
    record = dict(zip(names, cursor.fetchone() or (), strict=True))
    where = f"row {row} (trajectory_id {record.get('trajectory_id')!r})"
    for field in _nonfinite(record, ""):
        return TrajectoryError(row, field, "is not a finite number (NaN and infinities are not allowed)", where)
    try:
        check_record(record, row)
    except TrajectoryError as exc:
        return TrajectoryError(row, exc.field, exc.message, where)
    return None


def _first_error(con: duckdb.DuckDBPyConnection, suspects: np.ndarray, ids: list[str], rows: np.ndarray) -> None:
    """Raise for the first row that is invalid or repeats an earlier trajectory id."""
    seen: dict[str, int] = {}
    duplicate = None
    for tid, row in zip(ids, rows.tolist(), strict=True) if len(set(ids)) < len(ids) else ():
        if tid in seen and tid is not None:
            duplicate = TrajectoryError(row, "trajectory_id", f"duplicate id {tid!r} (first in row {seen[tid]})",
                                        where=f"row {row} (trajectory_id {tid!r})")
            break
        seen[tid] = row
    for row in np.unique(suspects).tolist():
        if duplicate is not None and row > duplicate.line:
            break
        error = _explain(con, row)
        if error is not None:
            raise error
    if duplicate is not None:
        raise duplicate


def _checked_group(path: Path, group: int) -> list[Checked]:
    """One row group decoded by pyarrow and checked batch by batch (:func:`check_batch`)."""
    table = pq.ParquetFile(path).read_row_group(group, columns=list(COLUMNS), use_threads=False)
    return [check_batch(batch) for batch in table.to_batches()]


def _checked_groups(path: Path, workers: int) -> Iterator[Checked]:
    """Every batch of the file checked, in file order; row groups are decoded and checked in ``workers``
    threads (pyarrow and numpy release the GIL), at most 2 × ``workers`` groups in memory."""
    groups = pq.ParquetFile(path).metadata.num_row_groups
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[Future[list[Checked]]] = deque()
        for group in range(groups):
            pending.append(pool.submit(_checked_group, path, group))
            if len(pending) >= 2 * workers:
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()


def load_parquet(path: str | Path, workers: int | None = None) -> TrajectoryColumns:
    """Read and validate a Parquet trajectory file (see the module docstring) as columns.

    pyarrow decodes it row group by row group, in ``workers`` threads (default: one per core), into flat
    arrays that numpy checks (:mod:`draligned.cess.parquet_batch`);
    DuckDB checks the schema and reads back a suspect row for the full validator.
    """
    con = duckdb.connect()
    con.execute("CREATE VIEW t AS SELECT file_row_number + 1 AS row, * EXCLUDE (file_row_number) "
                f"FROM read_parquet({_literal(Path(path))}, file_row_number = true)")
    if (problem := _schema_problem(con)) is not None:
        raise problem
    builder, suspects, first_row = ColumnBuilder(), [], 1
    for bad, arrays, ids, tasks in _checked_groups(Path(path), workers or os.cpu_count() or 1):
        suspects.append(np.nonzero(bad)[0] + first_row)
        builder.extend(ids, tasks, **arrays)
        first_row += len(bad)
    if not builder.ids:
        raise TrajectoryError(0, "<file>", "no trajectories (the file has no rows)", where="rows")
    _first_error(con, np.concatenate(suspects), builder.ids, np.arange(1, first_row))
    return builder.build()
