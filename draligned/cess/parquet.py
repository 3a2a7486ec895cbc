"""Trajectories as Parquet: one row per trajectory, the JSON Lines record's fields as columns.

``pool`` and ``rounds`` are nested exactly as in the JSON record (a struct, a list of structs), so
a row reads back as the same record; an absent optional field is NULL. DuckDB writes and reads the
file. :func:`load_parquet` checks the column types, then every rule of the JSON Lines loader with
vectorised SQL over all rows; a row that fails is read back as a record and explained by the same
full validator (:func:`draligned.cess.trajectory.check_record`), so the error names the row, its
trajectory id and the field, with the JSON Lines loader's message. Parquet can hold NaN and
infinities, which JSON cannot: they are refused too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from draligned.cess.columns import NEVER, ColumnBuilder, TrajectoryColumns
from draligned.cess.trajectory import PROB_SUM_TOLERANCE, TrajectoryError, check_record

COLUMNS = {
    "trajectory_id": "VARCHAR",
    "task_id": "VARCHAR",
    "ranking": "VARCHAR",
    "budget": "BIGINT",
    "pool": "STRUCT(doc_ids VARCHAR[], y DOUBLE[], m DOUBLE[])",
    "rounds": "STRUCT(probs DOUBLE[], chosen VARCHAR, stop_prob DOUBLE, y DOUBLE)[]",
}
"""The Parquet schema: the JSON Lines record's fields, in DuckDB types."""
_SUM_MARGIN = 1e-9
"""Sums this close to the tolerance are rechecked exactly (math.fsum) by the full validator."""


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def write_parquet(jsonl: Path, out: Path) -> None:
    """Convert a JSON Lines trajectory file (validated already) to Parquet with :data:`COLUMNS`."""
    columns = "{" + ", ".join(f"{name}: '{kind}'" for name, kind in COLUMNS.items()) + "}"
    duckdb.connect().execute(
        f"COPY (SELECT * FROM read_json({_literal(jsonl)}, format = 'newline_delimited', columns = {columns}))"
        f" TO {_literal(out)} (FORMAT parquet)")


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


_TRAJECTORIES = """
SELECT row, trajectory_id, task_id, budget::DOUBLE AS budget, len(pool.doc_ids) AS n,
  coalesce(trajectory_id = '' OR task_id = '' OR ranking NOT IN ('original', 'pro', 'anti') OR budget < 1
    OR list_count(pool.doc_ids) <> len(pool.doc_ids) OR list_contains(pool.doc_ids, '')
    OR len(list_distinct(pool.doc_ids)) <> len(pool.doc_ids) OR len(pool.doc_ids) = 0
    OR len(pool.y) <> len(pool.doc_ids) OR list_min(pool.y) < -1 OR list_max(pool.y) > 1
    OR len(pool.m) <> len(pool.doc_ids) OR list_count(pool.m) <> len(pool.m)
    OR isnan(list_sum(pool.m)) OR isinf(list_sum(pool.m)), false)
  OR trajectory_id IS NULL OR task_id IS NULL OR budget IS NULL OR pool IS NULL OR pool.doc_ids IS NULL AS bad
FROM t
"""
_ROUNDS = f"""
WITH r AS (SELECT row, pool.doc_ids AS ids, pool.y AS py, unnest(range(len(rounds))) AS k, unnest(rounds) AS r
           FROM t),
j AS (SELECT *, coalesce(list_position(ids, r.chosen), 0) AS j FROM r)
SELECT row, j - 1 AS chosen, coalesce(r.probs[j], 0) AS p, r.stop_prob AS stop,
  coalesce(r.y, py[j], 0) AS y, coalesce(list_min(r.probs) > 0, false) AS full,
  coalesce(len(r.probs) <> len(ids) OR list_count(r.probs) <> len(r.probs) OR list_min(r.probs) < 0
    OR abs(list_sum(r.probs) - 1) > {PROB_SUM_TOLERANCE - _SUM_MARGIN} OR j = 0 OR NOT r.probs[j] > 0
    OR NOT (r.stop_prob >= 0 AND r.stop_prob < 1) OR (k = 0 AND r.stop_prob <> 0), true)
  OR coalesce(r.y < -1 OR r.y > 1 OR abs(r.y - py[j]) > 1e-9, false) OR coalesce(r.y, py[j]) IS NULL AS bad
FROM j
"""
_DOCS = """
SELECT row, unnest(coalesce(pool.y, list_transform(pool.doc_ids, lambda d: NULL::DOUBLE))) AS y,
       unnest(coalesce(pool.m, list_transform(pool.doc_ids, lambda d: 0.0::DOUBLE))) AS m
FROM t
"""
_FIRST_SUPPORT = """
WITH r AS (SELECT row, unnest(range(len(rounds))) AS k, unnest(rounds) AS r FROM t WHERE row IN (SELECT row FROM v)),
e AS (SELECT row, k, unnest(range(len(r.probs))) AS i, unnest(r.probs) AS p FROM r)
SELECT row, i, min(k) AS first FROM e WHERE p > 0 GROUP BY row, i
"""


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
    for tid, row in zip(ids, rows.tolist(), strict=True):
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


def load_parquet(path: str | Path) -> TrajectoryColumns:
    """Read and validate a Parquet trajectory file (see the module docstring) as columns."""
    con = duckdb.connect()
    con.execute("CREATE VIEW t AS SELECT file_row_number + 1 AS row, * EXCLUDE (file_row_number) "
                f"FROM read_parquet({_literal(Path(path))}, file_row_number = true)")
    if (problem := _schema_problem(con)) is not None:
        raise problem
    traj = con.execute(_TRAJECTORIES).fetchnumpy()
    rows = traj["row"].astype(np.int64)
    ids = traj["trajectory_id"].tolist()
    if not len(rows):
        raise TrajectoryError(0, "<file>", "no trajectories (the file has no rows)", where="rows")
    if traj["bad"].any():  # shape errors first: the per-round and per-document arrays need the shape
        _first_error(con, rows[traj["bad"]], ids, rows)
    rnd = con.execute(_ROUNDS).fetchnumpy()
    if np.any(np.diff(rnd["row"]) < 0):  # DuckDB keeps the file's order; should it not, restore it
        order = np.argsort(rnd["row"], kind="stable")
        rnd = {name: values[order] for name, values in rnd.items()}
    n_rounds = np.bincount(np.searchsorted(rows, rnd["row"]), minlength=len(rows))
    no_rounds = (n_rounds == 0) | (n_rounds > traj["budget"])  # null, empty, or more than K
    _first_error(con, np.concatenate([rnd["row"][rnd["bad"]], rows[no_rounds]]), ids, rows)
    docs = con.execute(_DOCS).fetchnumpy()
    if np.any(np.diff(docs["row"]) < 0):
        order = np.argsort(docs["row"], kind="stable")
        docs = {name: values[order] for name, values in docs.items()}
    n_docs = traj["n"].astype(np.int64)
    first_support = np.zeros(int(n_docs.sum()), np.int64)
    full = np.asarray(rnd["full"], bool)
    if not full.all():  # some document had probability 0 in some round
        varying = np.unique(rnd["row"][~full])
        doc_start = np.concatenate([[0], np.cumsum(n_docs)])
        position = np.searchsorted(rows, varying)
        for a, b in zip(doc_start[position].tolist(), doc_start[position + 1].tolist(), strict=True):
            first_support[a:b] = NEVER
        con.register("v", {"row": varying})
        hit = con.execute(_FIRST_SUPPORT).fetchnumpy()
        first_support[doc_start[np.searchsorted(rows, hit["row"])] + hit["i"]] = hit["first"]
    y = np.asarray(docs["y"].filled(np.nan) if np.ma.isMaskedArray(docs["y"]) else docs["y"], float)
    builder = ColumnBuilder()
    builder.extend(ids, traj["task_id"].tolist(), budget=np.asarray(traj["budget"], float), n_docs=n_docs,
                   doc_m=np.asarray(docs["m"], float), doc_y=y, first_support=first_support, n_rounds=n_rounds,
                   chosen=np.asarray(rnd["chosen"], np.int64), y=np.asarray(rnd["y"], float),
                   p=np.asarray(rnd["p"], float), stop=np.asarray(rnd["stop"], float), full_support=full)
    return builder.build()
