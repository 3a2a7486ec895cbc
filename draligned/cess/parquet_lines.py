"""`cess estimate F.parquet --json` as one pipeline over the row groups, on every core.

Loading every column first (:func:`draligned.cess.parquet.load_parquet`), then estimating, then writing
the 10^6 lines runs the last two steps on one core and touches 0.8 GB of fresh memory for the columns.
The estimators and the JSON lines are per trajectory, so each row group is decoded, checked,
estimated and written as text in one task (one thread per core; pyarrow, numpy and DuckDB release the
GIL), and only its lines are kept. Nothing is printed before the whole file is checked: the suspect
rows and repeated ids of every group go to the same full validator as :func:`load_parquet`, in row
order, so an invalid file fails with the same error and no output. A batch with a suspect row that
the validator then accepts (a sum just within tolerance) is estimated after the check. The lines are
byte for byte those of :func:`~draligned.cess.json_lines.json_lines` over the whole file (the
estimators compute each trajectory's sums alone, ``tests/cess/test_parquet_lines.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq

from draligned.cess.columns import ColumnCount
from draligned.cess.parquet import RowChecks, checked_group, counted, in_groups, metadata_counts, open_checked
from draligned.cess.parquet_batch import Checked
from draligned.cess.part_lines import Lines, PartConnection, part_lines


def _part(part: Checked, lam: float, connection: PartConnection) -> Lines:
    _, arrays, ids, tasks = part
    return part_lines([(ids, tasks, arrays)], lam, connection)


def _group(path: Path, group: int, flat: bool, meta: pq.FileMetaData, lam: float,
           connection: PartConnection) -> list[tuple[Checked, Lines | None]]:
    """One row group checked batch by batch, each clean batch's lines written (None for a batch with a
    suspect row: it waits for the validator)."""
    return [(part, None if part[0].any() else _part(part, lam, connection))
            for part in checked_group(path, group, flat, meta)]


def parquet_lines(path: str | Path, lam: float, workers: int | None = None) -> Iterator[bytes | memoryview]:
    """The ``cess estimate --json`` lines of a Parquet trajectory file (either layout), in pieces of bytes.

    The whole file is read and checked by the call, which raises :class:`TrajectoryError` as
    :func:`~draligned.cess.parquet.load_parquet` does; the lines are then in memory (about 420 MB
    for 10^6 trajectories, against 0.8 GB of columns)."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    path = Path(path)
    meta, flat, read = open_checked(path)
    done: list[Checked | Lines] = []  # a batch's lines, or the checked batch itself until the validator decides
    checks, count, connection = RowChecks(), ColumnCount(*metadata_counts(meta, flat)), PartConnection()
    group = partial(_group, path, flat=flat, meta=meta, lam=lam, connection=connection)
    for part, lines in in_groups(meta.num_row_groups, workers or os.cpu_count() or 1, group):
        checks.add(part[0], part[2])
        with counted():  # refused as load_parquet refuses it
            count.take(part[1])
        done.append(part if lines is None else lines)
    checks.finish(read)
    return _emit(done, lam)


def _emit(done: list[Checked | Lines], lam: float) -> Iterator[bytes | memoryview]:
    connection = PartConnection()
    for item in done:
        yield from _part(item, lam, connection) if isinstance(item, tuple) else item
