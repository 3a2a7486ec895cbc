"""`cess estimate F.parquet --json` as one pipeline over the row groups, on every core.

Loading every column first (:func:`draligned.cess.parquet.load_parquet`), then estimating, then writing
the 10^6 lines runs the last two steps on one core and touches 0.8 GB of fresh memory for the columns.
The estimators and the JSON lines are per trajectory, so each row group is decoded, checked and
estimated in one task (one thread per core; pyarrow, numpy and DuckDB release the GIL), and only what its
lines are made from is kept: the text, four times as much fresh memory to touch, is made when the lines
are taken, again one thread per core (with DuckDB as the writer, in the task). Nothing is printed before
the whole file is checked: the suspect rows and repeated ids of every group go to the same full validator
as :func:`load_parquet`, in row order, so an invalid file fails with the same error and no output. A batch
with a suspect row that the validator then accepts (a sum just within tolerance) is estimated after the
check. The lines are byte for byte those of :func:`~draligned.cess.json_lines.json_lines` over the whole
file (the estimators compute each trajectory's sums alone, ``tests/cess/test_parquet_lines.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar

import pyarrow.parquet as pq

from draligned.cess.columns import ColumnCount, TrajectoryColumns
from draligned.cess.estimate_table import TablePart, table_text
from draligned.cess.estimates import Estimates
from draligned.cess.in_order import in_order, made_in_order
from draligned.cess.json_lines import MadeLines, WriterInputs, deferred
from draligned.cess.parquet import RowChecks, checked_group, counted, metadata_counts, open_checked
from draligned.cess.parquet_batch import Checked
from draligned.cess.part_lines import PartConnection, part_estimates

P = TypeVar("P")
Prepare = Callable[[TrajectoryColumns, Estimates, PartConnection], P]
"""What a pipeline keeps of a checked batch's columns and estimates until the whole file is checked."""


def _lines(cols: TrajectoryColumns, est: Estimates, connection: PartConnection) -> WriterInputs | MadeLines:
    return deferred(cols, est, connection.get())


def _table(cols: TrajectoryColumns, est: Estimates, connection: PartConnection) -> TablePart:
    return TablePart.of(cols, est)


def _part(part: Checked, lam: float, connection: PartConnection, prepare: Prepare[P]) -> P:
    _, arrays, ids, tasks = part
    return prepare(*part_estimates([(ids, tasks, arrays)], lam), connection)


def _group(path: Path, group: int, flat: bool, meta: pq.FileMetaData, lam: float, connection: PartConnection,
           prepare: Prepare[P]) -> list[tuple[Checked, P | None]]:
    """One row group checked batch by batch, each clean batch estimated and prepared (None for a batch with
    a suspect row: it waits for the validator)."""
    return [(part, None if part[0].any() else _part(part, lam, connection, prepare))
            for part in checked_group(path, group, flat, meta)]


def _checked(path: Path, lam: float, workers: int, prepare: Prepare[P]) -> list[P]:
    """Every batch of the file, in order, read, checked, estimated and prepared in ``workers`` threads; raises
    :class:`TrajectoryError` as :func:`~draligned.cess.parquet.load_parquet` does. A batch with a suspect row
    that the validator accepts is prepared after the check, here."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    meta, flat, read = open_checked(path)
    done: list[Checked | P] = []  # a batch prepared, or the batch itself until the validator decides
    checks, count, connection = RowChecks(), ColumnCount(*metadata_counts(meta, flat)), PartConnection()
    group = partial(_group, path, flat=flat, meta=meta, lam=lam, connection=connection, prepare=prepare)
    for part, prepared in in_order(meta.num_row_groups, workers, group):
        checks.add(part[0], part[2])
        with counted():  # refused as load_parquet refuses it
            count.take(part[1])
        done.append(part if prepared is None else prepared)
    checks.finish(read)
    return [_part(item, lam, connection, prepare) if isinstance(item, tuple) else item for item in done]


def parquet_lines(path: str | Path, lam: float, workers: int | None = None) -> Iterator[bytes]:
    """The ``cess estimate --json`` lines of a Parquet trajectory file (either layout), in pieces of bytes.

    The whole file is read, checked and estimated by the call; the lines are made as they are taken, in
    ``workers`` threads (the estimates they are made from: about 105 MB for 10^6 trajectories, against 420 MB
    of text and 0.8 GB of columns)."""
    workers = workers or os.cpu_count() or 1
    return made_in_order(_checked(Path(path), lam, workers, _lines), workers, lambda part: list(part.lines()))


def parquet_table(path: str | Path, lam: float, workers: int | None = None) -> Iterator[bytes]:
    """The ``cess estimate`` table of a Parquet trajectory file, in pieces of UTF-8, as :func:`parquet_lines`
    makes the lines (the file read and checked by the call): each batch's columns measured where it was
    estimated, its rows written when taken."""
    workers = workers or os.cpu_count() or 1
    return table_text(_checked(Path(path), lam, workers, _table), workers)
