"""`cess estimate --json` output: for every row of :func:`~draligned.cess.column_estimators.estimate_rows`,
the bytes :class:`~draligned.cess.estimators.TrajectoryEstimate`'s ``model_dump_json`` writes (the
record's own form: :func:`model_line`) and a newline.

10^6 rows as pydantic models cost several CPU s. When the optional extension is built, :func:`json_lines`
writes them with it (``_kernels.cpp``, without the GIL; about 0.2 µs per row): shortest round-trip floats,
in exponent form below 1e-5 and from 1e16 on, a positive exponent signed (``1e+16``, ``1e-7``), NaN and
infinities ``null``, JSON's short escapes and lower-case ``\\u00XX``, as pydantic-core writes them (orjson
writes the same bytes from 3.11.7 on; before it, ``1e16``). Without the extension, DuckDB's ``to_json``
writes the same rows from Arrow columns in C++ (about 1.5 µs per row), its text the same except for what is
listed in :func:`_rows_it_writes_apart`: the floats in exponent form (DuckDB ``0.000005``,
``10000000000000000.0``) and the hexadecimal case of a control character's escape (``\\u001B``). Those rows
(a few hundred in 10^6) are written by :func:`model_line`, so every byte is the model's;
``tests/cess/test_json_lines.py`` pins both writers against it on random bit patterns of floats and on every
character.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from draligned.cess.column_estimators import POINT_ESTIMATES, estimate_rows
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimates import Estimates

if TYPE_CHECKING:
    import duckdb

try:
    from draligned.cess import _kernels as compiled_writer
except ImportError:  # installed without a C++ compiler (the extension is optional): DuckDB writes the lines
    compiled_writer = None  # type: ignore[assignment]

NUMBERS = ("opened_mean", "outcome_regression", *POINT_ESTIMATES, "ess", "max_weight", "theta_star")
"""The float fields between ``rounds`` and ``support_interval``, in the row's order."""
SLICE = 1 << 18
"""Rows per DuckDB query: its text (about 100 MB) is written out before the next is made."""
PIECE = 1 << 16
"""Rows per call of the compiled writer: its text (about 27 MB; twice that is allocated, then trimmed) is
written out before the next is made. A call costs nothing per piece that a bigger one would save."""


def _floats(values: np.ndarray, hidden: np.ndarray | None = None) -> pa.Array:
    """A float column with NULL where orjson writes ``null``: NaN and infinities (and hidden rows)."""
    null = ~np.isfinite(values) if hidden is None else hidden | ~np.isfinite(values)
    return pa.array(values, mask=null)


def _table(cols: TrajectoryColumns, est: Estimates, tasks: pa.Array) -> pa.Table:
    hidden = est.support.applies
    numbers = {name: _floats(getattr(est, name)) for name in NUMBERS[:2]}
    numbers |= {name: _floats(getattr(est, name), hidden) for name in POINT_ESTIMATES}
    numbers |= {"ess": _floats(est.weights.ess), "max_weight": _floats(est.weights.max_weight),
                "theta_star": _floats(est.theta_star)}
    bounds = np.column_stack([est.support.lower, est.support.upper]).ravel()
    interval = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * len(hidden) + 1, 2, dtype=np.int32)),
                                        _floats(bounds), mask=pa.array(~hidden))
    return pa.table({"trajectory_id": pa.array(cols.trajectory_id, pa.string()), "task_id": tasks,
                     "rounds": pa.array(cols.n_rounds), **numbers, "support_interval": interval})


def _rows_it_writes_apart(table: pa.Table) -> np.ndarray:
    """Rows where DuckDB's text is not orjson's: a nonzero float below 1e-5 or at least 1e16 in magnitude
    (orjson's exponent forms; infinities, which are NULL here, count too), or an id with a control character."""
    odd = np.zeros(table.num_rows, bool)
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_string(column.type):
            odd |= np.asarray(pc.fill_null(pc.match_substring_regex(column, "[\\x00-\\x1f\\x7f]"), False))
            continue
        if pa.types.is_list(column.type):  # the support intervals: two bounds per row that has one
            owner, values = np.repeat(np.flatnonzero(np.asarray(pc.is_valid(column))), 2), column.flatten()
        elif pa.types.is_floating(column.type):
            owner, values = np.arange(len(column)), column
        else:
            continue
        v = np.asarray(values.to_numpy(zero_copy_only=False), float)  # NULL: NaN, written alike
        with np.errstate(invalid="ignore"):
            apart = (v != 0) & ((np.abs(v) < 1e-5) | (np.abs(v) >= 1e16))
        odd[owner[apart]] = True
    return np.flatnonzero(odd)


def json_lines(cols: TrajectoryColumns, est: Estimates,
               con: duckdb.DuckDBPyConnection | None = None) -> Iterator[bytes | memoryview]:
    """The JSON Lines of the estimates, in order, in pieces of bytes (``con``: a DuckDB connection to
    write them with when the compiled writer is not built, e.g. one per thread for many small parts; its
    start costs 30-50 ms)."""
    if compiled_writer is not None:
        return WriterInputs.of(cols, est).lines()
    return _duckdb_lines(cols, est, con)


def deferred(cols: TrajectoryColumns, est: Estimates,
             con: duckdb.DuckDBPyConnection | None = None) -> WriterInputs | MadeLines:
    """The lines of the estimates, to be written later (``lines()``, in any thread or, pickled, in another
    process): with the compiled writer only its inputs are kept, about a quarter of the text's memory (10^6
    rows: 105 MB, not 420), and the text is made then; DuckDB's text is made at once (``con`` as
    :func:`json_lines`)."""
    if compiled_writer is None:
        return MadeLines(b"".join(_duckdb_lines(cols, est, con)))
    return WriterInputs.of(cols, est)


@dataclass(frozen=True)
class MadeLines:
    """Lines made already (by DuckDB, without the extension), kept as :func:`deferred` hands them over."""

    text: bytes

    def lines(self) -> Iterator[bytes]:
        """The lines, in one piece."""
        yield self.text


Piece = tuple[list[str], list[str], np.ndarray, tuple[np.ndarray, ...], np.ndarray, np.ndarray, np.ndarray]
"""A run of rows as the compiled kernels take them: ids, task ids, rounds, numbers, hidden, lower, upper."""


@dataclass(frozen=True)
class WriterInputs:
    """What the compiled writers (the lines; the table, :mod:`draligned.cess.estimate_table`) take for a run of
    rows: ids, task ids, rounds, the :data:`NUMBERS`, whether the support interval applies, and its bounds
    (contiguous arrays, none a view of the estimates)."""

    ids: list[str]
    tasks: list[str]
    rounds: np.ndarray
    numbers: tuple[np.ndarray, ...]
    hidden: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def of(cls, cols: TrajectoryColumns, est: Estimates) -> WriterInputs:
        numbers = [getattr(est, name) for name in NUMBERS[:7]] + [est.weights.ess, est.weights.max_weight,
                                                                  est.theta_star]
        return cls(cols.trajectory_id, cols.task_id, np.ascontiguousarray(cols.n_rounds, np.int64),
                   tuple(np.ascontiguousarray(a, float) for a in numbers),
                   np.ascontiguousarray(est.support.applies, bool), np.ascontiguousarray(est.support.lower, float),
                   np.ascontiguousarray(est.support.upper, float))

    def pieces(self) -> Iterator[Piece]:
        """The inputs in runs of :data:`PIECE` rows, as the compiled kernels take them."""
        for lo in range(0, len(self.ids), PIECE):
            part = slice(lo, lo + PIECE)
            yield (self.ids[part], self.tasks[part], self.rounds[part], tuple(a[part] for a in self.numbers),
                   self.hidden[part], self.lower[part], self.upper[part])

    def lines(self) -> Iterator[bytes]:
        """The lines, :data:`PIECE` rows per call of the writer."""
        for piece in self.pieces():
            yield compiled_writer.write_lines(*piece)


def model_line(row: dict[str, object]) -> bytes:
    """One row's line as the record writes it: ``TrajectoryEstimate.model_dump_json`` and a newline (the
    estimators' models, and so pydantic, are imported at the first call)."""
    from draligned.cess.estimators import TrajectoryEstimate

    return TrajectoryEstimate.model_validate(row).model_dump_json().encode() + b"\n"


def _duckdb_lines(cols: TrajectoryColumns, est: Estimates,
                  con: duckdb.DuckDBPyConnection | None) -> Iterator[bytes | memoryview]:
    import duckdb

    tasks = pa.array(cols.task_id, pa.string())
    table = _table(cols, est, tasks)
    apart = _rows_it_writes_apart(table)
    fixed = dict(zip(apart.tolist(), map(model_line, estimate_rows(cols, est, rows=apart)), strict=True))
    if con is None:
        con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    keys = ", ".join(f"'{name}': \"{name}\"" for name in table.column_names)
    for lo in range(0, table.num_rows, SLICE):
        con.register("part", table.slice(lo, SLICE))
        text = con.sql(f"SELECT to_json({{{keys}}}) || chr(10) AS line FROM part").to_arrow_table().column(0)
        row = lo
        for chunk in text.chunks:
            yield from _spliced(chunk, row, fixed)
            row += len(chunk)
        if row != lo + min(SLICE, table.num_rows - lo):
            raise AssertionError(f"DuckDB wrote {row - lo} lines for {min(SLICE, table.num_rows - lo)} rows")
    con.unregister("part")  # a caller's connection would keep the last slice alive


def _spliced(chunk: pa.Array, first: int, fixed: dict[int, bytes]) -> Iterator[bytes | memoryview]:
    """The bytes of a chunk of lines (row ``first`` on), with orjson's line in place of each row in ``fixed``."""
    kind = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    offsets = np.frombuffer(chunk.buffers()[1], kind)[chunk.offset:chunk.offset + len(chunk) + 1]
    data = memoryview(chunk.buffers()[2])
    at = int(offsets[0])
    for row in (r for r in fixed if first <= r < first + len(chunk)):
        yield data[at:int(offsets[row - first])]
        yield fixed[row]
        at = int(offsets[row - first + 1])
    yield data[at:int(offsets[-1])]
