"""The estimates of one checked part of a trajectory file, made where it was checked.

The estimators, the JSON lines and the table's rows are per trajectory (:mod:`draligned.cess.column_estimators`
sums each trajectory's segment alone), so what a file's parts make, in order, is byte for byte what the whole
file makes: a pipeline estimates each part on the core that checked it (the JSON Lines ranges of
:mod:`draligned.cess.jsonl_lines`; the Parquet row groups of :mod:`draligned.cess.parquet_lines`), with a
DuckDB connection per thread for the lines when the extension is not built (:class:`PartConnection`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from draligned.cess import json_lines
from draligned.cess.column_estimators import estimate_columns
from draligned.cess.columns import ColumnBuilder, TrajectoryColumns
from draligned.cess.estimates import Estimates

if TYPE_CHECKING:
    import duckdb


class PartConnection(threading.local):
    """Each thread's DuckDB connection for the lines (one thread each: the caller uses the cores), made on
    its first use (a connection costs 30-50 ms of CPU); none when the compiled writer writes them (then
    DuckDB is not even imported: its import is a fifth of `cess estimate`'s start-up)."""

    con: duckdb.DuckDBPyConnection | None = None

    def get(self) -> duckdb.DuckDBPyConnection | None:
        if self.con is None and json_lines.compiled_writer is None:
            import duckdb

            self.con = duckdb.connect(config={"threads": 1})
        return self.con

    def close(self) -> None:
        """Close this thread's connection, if it made one (a process must not fork holding one: DuckDB's
        copy in the child hangs when it is used or closed)."""
        if self.con is not None:
            self.con.close()
            self.con = None


def part_estimates(parts: Iterable[tuple[list[str], list[str], dict[str, np.ndarray]]],
                   lam: float) -> tuple[TrajectoryColumns, Estimates]:
    """The columns of a checked part, given in pieces (each its trajectories' ids, task ids and column arrays,
    named as :meth:`ColumnBuilder.extend` takes them), and their estimates with ``lam``."""
    builder = ColumnBuilder()
    for ids, tasks, arrays in parts:
        builder.extend(ids, tasks, **arrays)
    cols = builder.build()
    return cols, estimate_columns(cols, lam)
