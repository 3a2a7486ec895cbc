"""`cess estimate F.jsonl` (``--json`` or the table) as one pipeline over the file's ranges, on every core.

Loading every column first (:func:`draligned.cess.fastload.load_columns`), then estimating, then writing
the lines sends 0.9 GB of columns to one process and runs the last two steps there, on one core. Each
worker process instead checks its range (:func:`draligned.cess.fastload.in_ranges`), estimates it
(:func:`~draligned.cess.part_lines.part_estimates`) and sends back only its JSON lines, or its table part
(:class:`~draligned.cess.estimate_table.TablePart`: what the rows are written from, and the columns' widths),
with the ids and their line numbers. Nothing is printed before the whole file is checked: a range with an
invalid line, or an id repeated in another range, fails with the error of
:func:`~draligned.cess.fastload.load_columns` (the range is checked again here, numbered from its real
first line) and no output. The lines are byte for byte those of the whole file's
(``tests/cess/test_jsonl_lines.py``), and so is the table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import TypeVar

from draligned.cess import fastload, json_lines
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimate_table import TablePart, table_text
from draligned.cess.estimates import Estimates
from draligned.cess.fastload import NO_TRAJECTORIES, checked_range, in_ranges, raise_first_problem, ranges
from draligned.cess.in_order import made_in_order
from draligned.cess.json_lines import MadeLines, WriterInputs, deferred
from draligned.cess.part_lines import PartConnection, part_estimates
from draligned.cess.trajectory import TrajectoryError

_CONNECTION = PartConnection()
"""The DuckDB connection for the lines: a worker's, kept for its next ranges (made on its first), or this
process's while :func:`jsonl_lines` writes every range here (closed when it returns)."""

DUCKDB_CHUNKS_PER_RANGE = 4
"""A worker's range when DuckDB writes the lines (the compiled writer is not built): this many of the
loader's chunks (:data:`~draligned.cess.fastload.CHUNK_BYTES`, each read and checked alone: 64 MB, about
13,000 lines), as each range's lines cost a DuckDB query, whose fixed cost (about 8 ms) is then 0.6 µs a
line, not 2.5 µs as over 16 MB. The compiled writer has no such cost: its ranges are one chunk, so a file of
a few chunks still runs on every core."""


def range_bytes() -> int:
    """About how many bytes of the file each worker's range holds."""
    return fastload.CHUNK_BYTES * (1 if json_lines.compiled_writer is not None else DUCKDB_CHUNKS_PER_RANGE)


P = TypeVar("P")
Written = tuple[int, list[str], list[int], bool, P | None]
"""What a worker sends back for a range: its number of lines, the ids of its valid lines and their line
numbers (from 1 in the range), whether some line is invalid, and what its estimates were prepared as (None
when a line is invalid or the range has none)."""


def _lines(cols: TrajectoryColumns, est: Estimates) -> WriterInputs | MadeLines:
    """A range's ``--json`` lines, to be made in this process (:func:`~draligned.cess.json_lines.deferred`;
    DuckDB's, without the extension, made in the worker with its connection)."""
    return deferred(cols, est, _CONNECTION.get())


def _range(prepare: Callable[[TrajectoryColumns, Estimates], P], lam: float, path: Path, start: int,
           end: int) -> Written[P]:
    """One range checked chunk by chunk (bounded memory), then estimated and prepared (run in a worker)."""
    count, ids, lines, parts = 0, list[str](), list[int](), []
    for first, last in ranges(path, None, start, end):
        chunk, arrays, taken, error = checked_range(path, first, last, count + 1)
        if error is not None:
            return count + taken, ids, lines, True, None
        count += taken
        ids += chunk.ids
        lines += chunk.lines
        if chunk.ids:
            parts.append((chunk.ids, chunk.tasks, arrays))
    return count, ids, lines, False, prepare(*part_estimates(parts, lam)) if parts else None


def _checked(path: Path, lam: float, prepare: Callable[[TrajectoryColumns, Estimates], P],
             workers: int | None) -> list[P]:
    """Every range of the file read, checked, estimated and prepared, in order (in worker processes); raises
    :class:`TrajectoryError` as :func:`~draligned.cess.fastload.load_columns` does."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    done, seen, line = list[P](), set[str](), 1
    try:
        with closing(in_ranges(path, partial(_range, prepare, lam), workers, range_bytes())) as written:
            for start, end, (count, ids, lines, invalid, prepared) in written:
                raise_first_problem(path, line, start, end, ids, lines, invalid, seen)
                if prepared is not None:
                    done.append(prepared)
                line += count
    finally:
        _CONNECTION.close()  # made here when the ranges were written here: a later call may fork
    if not seen:
        raise TrajectoryError(0, "<file>", NO_TRAJECTORIES)
    return done


def jsonl_lines(path: str | Path, lam: float, workers: int | None = None) -> Iterator[bytes]:
    """The ``cess estimate --json`` lines of a JSON Lines trajectory file, in pieces of bytes.

    The whole file is read and checked by the call, which raises :class:`TrajectoryError` as
    :func:`~draligned.cess.fastload.load_columns` does. Each range's worker sends back the compiled writer's
    inputs (a quarter of the text's 420 MB for 10^6 trajectories), and the lines are made from them in this
    process's threads as they are taken; without the extension DuckDB writes the text in the worker."""
    return made_in_order(_checked(Path(path), lam, _lines, workers), os.cpu_count() or 1,
                         lambda part: list(part.lines()))


def jsonl_table(path: str | Path, lam: float, workers: int | None = None) -> Iterator[bytes]:
    """The ``cess estimate`` table of a JSON Lines trajectory file, in pieces of UTF-8 (needs the extension):
    each range's columns measured in its worker, the rows written once every range is measured. The file is
    read and checked by the call, as :func:`jsonl_lines` reads it."""
    return table_text(_checked(Path(path), lam, TablePart.of, workers), os.cpu_count() or 1)
