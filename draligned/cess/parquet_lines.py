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
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq

from draligned.cess.columns import ColumnCount
from draligned.cess.json_lines import Later
from draligned.cess.parquet import RowChecks, checked_group, counted, in_groups, metadata_counts, open_checked
from draligned.cess.parquet_batch import Checked
from draligned.cess.part_lines import Lines, PartConnection, later_lines


def _part(part: Checked, lam: float, connection: PartConnection) -> Later:
    _, arrays, ids, tasks = part
    return later_lines([(ids, tasks, arrays)], lam, connection)


def _group(path: Path, group: int, flat: bool, meta: pq.FileMetaData, lam: float,
           connection: PartConnection) -> list[tuple[Checked, Later | None]]:
    """One row group checked batch by batch, each clean batch estimated (None for a batch with a suspect
    row: it waits for the validator)."""
    return [(part, None if part[0].any() else _part(part, lam, connection))
            for part in checked_group(path, group, flat, meta)]


def parquet_lines(path: str | Path, lam: float, workers: int | None = None) -> Iterator[bytes | memoryview]:
    """The ``cess estimate --json`` lines of a Parquet trajectory file (either layout), in pieces of bytes.

    The whole file is read, checked and estimated by the call, which raises :class:`TrajectoryError` as
    :func:`~draligned.cess.parquet.load_parquet` does; the lines are made as they are taken, in ``workers``
    threads (the estimates they are made from: about 105 MB for 10^6 trajectories, against 420 MB of text
    and 0.8 GB of columns)."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    path, workers = Path(path), workers or os.cpu_count() or 1
    meta, flat, read = open_checked(path)
    done: list[Checked | Later | None] = []  # a batch's lines to make, or the batch until the validator decides
    checks, count, connection = RowChecks(), ColumnCount(*metadata_counts(meta, flat)), PartConnection()
    group = partial(_group, path, flat=flat, meta=meta, lam=lam, connection=connection)
    for part, later in in_groups(meta.num_row_groups, workers, group):
        checks.add(part[0], part[2])
        with counted():  # refused as load_parquet refuses it
            count.take(part[1])
        done.append(part if later is None else later)
    checks.finish(read)
    return _emit(done, lam, workers)


def _emit(done: list[Checked | Later | None], lam: float, workers: int) -> Iterator[bytes | memoryview]:
    """Every batch's lines in order, made in ``workers`` threads (each batch's estimates let go once made)."""
    connection = PartConnection()

    def text(i: int) -> Lines:
        item, done[i] = done[i], None
        if item is None:
            raise AssertionError(f"batch {i} taken twice")
        return list((_part(item, lam, connection) if isinstance(item, tuple) else item)())

    yield from in_groups(len(done), workers, text)
