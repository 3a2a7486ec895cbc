"""Trajectories as Parquet: one row per trajectory, in one of two layouts.

``cess export`` writes the flat layout (:mod:`draligned.cess.parquet_flat`: lists of primitives and
the probabilities as bytes, named in the file's metadata), which decodes fastest. Files written
before it have the nested layout: ``pool`` and ``rounds`` nested exactly as in the JSON record (a
struct, a list of structs), so a row reads back as the same record; an absent optional field is
NULL. :func:`load_parquet` reads either, chosen by the file's metadata. For the nested layout it checks the column types
(DuckDB), then every rule of the JSON Lines loader with
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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from draligned.cess.columns import ColumnSink, TrajectoryColumns
from draligned.cess.id_repeats import any_repeated, id_hashes
from draligned.cess.in_order import in_order
from draligned.cess.parquet_batch import Checked, check_batch
from draligned.cess.parquet_flat import (
    DOUBLE_LISTS,
    FLAT_BINARY_SCHEMA,
    LAYOUT_KEY,
    SCHEMAS,
    DoubleList,
    Probs,
    check_flat_batch,
    compiled_check,
    flat_record,
    flatten_batch,
    page_doubles,
    page_probs,
)
from draligned.cess.trajectory_rules import TrajectoryError

if TYPE_CHECKING:  # DuckDB reads the nested layout and writes files: imported there
    import duckdb

COLUMNS = {
    "trajectory_id": "VARCHAR",
    "task_id": "VARCHAR",
    "ranking": "VARCHAR",
    "budget": "BIGINT",
    "pool": "STRUCT(doc_ids VARCHAR[], y DOUBLE[], m DOUBLE[])",
    "rounds": "STRUCT(probs DOUBLE[], chosen VARCHAR, stop_prob DOUBLE, y DOUBLE)[]",
}
"""The nested layout's schema: the JSON Lines record's fields, in DuckDB types."""
ROW_GROUP_ROWS = 16_384
"""Rows per row group written: the reader decodes one at a time, so smaller groups bound its memory
(DuckDB's default of 122,880 rows held ~0.6 GB more at 10^6 trajectories); any size reads."""
BESIDE_PROBS = [name for name in FLAT_BINARY_SCHEMA.names if name != "probs"]
"""The ``flat-2`` columns pyarrow decodes when the probabilities are read in place (:func:`group_probs`), but for
the float lists read in place too (:func:`group_doubles`)."""
DICTIONARIES = ["task_id", "ranking", "doc_ids.list.element", "chosen.list.element"]
"""The flat columns written dictionary-encoded and decoded as dictionaries (a few distinct strings: their codes
decode faster than the strings, and the checks look each distinct one up once)."""


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _read_json(jsonl: Path) -> str:
    columns = "{" + ", ".join(f"{name}: '{kind}'" for name, kind in COLUMNS.items()) + "}"
    return f"SELECT * FROM read_json({_literal(jsonl)}, format = 'newline_delimited', columns = {columns})"


def write_parquet(jsonl: Path, out: Path) -> None:
    """Convert a JSON Lines trajectory file (validated already) to Parquet in the flat layout (``flat-2``).

    DuckDB parses the lines into the nested columns, batch by batch; each batch is flattened and
    written uncompressed (random doubles do not compress, and a codec only slows the decode; the
    strings are dictionary-encoded), in row groups of :data:`ROW_GROUP_ROWS` (:func:`full_groups`)."""
    import duckdb

    reader = duckdb.connect().sql(_read_json(jsonl)).to_arrow_reader(ROW_GROUP_ROWS)
    with pq.ParquetWriter(out, FLAT_BINARY_SCHEMA, compression="none", use_dictionary=DICTIONARIES) as writer:
        for table in full_groups(map(flatten_batch, reader), ROW_GROUP_ROWS):
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)


def full_groups(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The batches gathered into tables of whole row groups of ``rows`` rows (the last one: the rest).
    DuckDB hands over a big file in batches of a few thousand rows whatever size is asked for, and each
    write is at least one row group: 10^6 trajectories came in 308 groups of about 3,250 rows."""
    pending: list[pa.RecordBatch] = []
    for batch in batches:
        pending.append(batch)
        if sum(b.num_rows for b in pending) >= rows:
            table = pa.Table.from_batches(pending)
            whole = table.num_rows // rows * rows
            yield table.slice(0, whole)
            pending = table.slice(whole).to_batches()
    if sum(b.num_rows for b in pending):
        yield pa.Table.from_batches(pending)


def write_nested_parquet(jsonl: Path, out: Path) -> None:
    """The nested layout that ``cess export`` wrote before the flat one (benchmarks and tests compare the two)."""
    import duckdb

    duckdb.connect().execute(f"COPY ({_read_json(jsonl)}) TO {_literal(out)} "
                             f"(FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP_ROWS})")


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


def _flat_schema_problem(found: pa.Schema, expected: pa.Schema) -> TrajectoryError | None:
    """A flat layout's columns (``expected``), in its order; lists compare by item type (nullability is
    free), binary either offset width, and any integer type holds the budget."""
    def kind(t: pa.DataType) -> str:
        return f"list<{t.value_type}>" if pa.types.is_list(t) else "binary" if pa.types.is_large_binary(t) else str(t)

    for field in expected:
        if field.name not in found.names:
            return TrajectoryError(0, field.name, f"column missing (expected {kind(field.type)})", where="schema")
        got = found.field(field.name).type
        if kind(got) != kind(field.type) and not (field.name == "budget" and pa.types.is_integer(got)):
            return TrajectoryError(0, field.name, f"has type {kind(got)}, expected {kind(field.type)}",
                                   where="schema")
    extra = [name for name in found.names if name not in expected.names]
    if extra:
        return TrajectoryError(0, extra[0], f"unexpected column (the columns are {', '.join(expected.names)})",
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


def _nested_row(con: duckdb.DuckDBPyConnection) -> Callable[[int], dict[str, Any]]:
    def read(row: int) -> dict[str, Any]:
        cursor = con.execute("SELECT * EXCLUDE (row) FROM t WHERE row = ?", [row])
        return dict(zip([d[0] for d in cursor.description], cursor.fetchone() or (), strict=True))
    return read


def _flat_row(path: Path) -> Callable[[int], dict[str, Any]]:
    """Reads row ``row`` (from 1) of a flat file back as its JSON record (see :func:`flat_record`)."""
    file = pq.ParquetFile(path)
    sizes = np.cumsum([file.metadata.row_group(g).num_rows for g in range(file.metadata.num_row_groups)])

    def read(row: int) -> dict[str, Any]:
        group = int(np.searchsorted(sizes, row))
        first = int(sizes[group - 1]) if group else 0
        values = file.read_row_group(group).slice(row - 1 - first, 1).to_pylist()[0]
        return flat_record(values, row, f"row {row} (trajectory_id {values['trajectory_id']!r})")
    return read


def _explain(read: Callable[[int], dict[str, Any]], row: int) -> TrajectoryError | None:
    """The full validator's verdict on one row (None: valid after all, e.g. a sum just within tolerance)."""
    try:
        record = read(row)
    except TrajectoryError as exc:
        return exc
    where = f"row {row} (trajectory_id {record.get('trajectory_id')!r})"
    for field in _nonfinite(record, ""):
        return TrajectoryError(row, field, "is not a finite number (NaN and infinities are not allowed)", where)
    from draligned.cess.trajectory import check_record  # pydantic and jsonschema: only to explain a row

    try:
        check_record(record, row)
    except TrajectoryError as exc:
        return TrajectoryError(row, exc.field, exc.message, where)
    return None


def first_error(read: Callable[[int], dict[str, Any]], suspects: np.ndarray, ids: list[str], rows: np.ndarray,
                repeats: bool) -> None:
    """Raise for the first row that is invalid or repeats an earlier trajectory id (``repeats``: whether an id
    may repeat: the search for the first repeat runs only then)."""
    seen: dict[str, int] = {}
    duplicate = None
    for tid, row in zip(ids, rows.tolist(), strict=True) if repeats else ():
        if tid in seen and tid is not None:
            duplicate = TrajectoryError(row, "trajectory_id", f"duplicate id {tid!r} (first in row {seen[tid]})",
                                        where=f"row {row} (trajectory_id {tid!r})")
            break
        seen[tid] = row
    for row in np.unique(suspects).tolist():
        if duplicate is not None and row > duplicate.line:
            break
        error = _explain(read, row)
        if error is not None:
            raise error
    if duplicate is not None:
        raise duplicate


def _unreadable(file: pq.ParquetFile, group: int, names: list[str], exc: Exception) -> TrajectoryError:
    """The error for a row group pyarrow cannot decode (a damaged page, invalid UTF-8, a code outside its
    dictionary): named by its rows and the first column that fails alone (``<file>`` if none does)."""
    first = sum(file.metadata.row_group(g).num_rows for g in range(group)) + 1
    where = f"row group {group} (rows {first}-{first + file.metadata.row_group(group).num_rows - 1})"
    for name in names:
        try:
            file.read_row_group(group, columns=[name], use_threads=False).column(0).validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as column_exc:
            return TrajectoryError(first, name, f"not readable ({column_exc})", where)
    return TrajectoryError(first, "<file>", f"not readable ({exc})", where)


def checked_group(path: Path, group: int, flat: bool, meta: pq.FileMetaData | None = None) -> list[Checked]:
    """One row group decoded by pyarrow and checked batch by batch (:func:`check_batch`); ``meta``: the
    file's metadata, read once (parsing the footer again costs about 1.2 ms a group). A ``flat-2`` group's
    probabilities are read from the file's pages where they are as ``cess export`` writes them
    (:func:`_checked_in_place`)."""
    names, check = (FLAT_BINARY_SCHEMA.names, check_flat_batch) if flat else (list(COLUMNS), check_batch)
    file = pq.ParquetFile(path, memory_map=True, read_dictionary=DICTIONARIES if flat else None, metadata=meta)
    try:
        if flat and (checked := _checked_in_place(path, file, group)) is not None:
            return [checked]
        table = file.read_row_group(group, columns=names, use_threads=False)
        return [check(batch) for batch in table.to_batches()]
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # pyarrow's IOError is OSError itself
        raise _unreadable(file, group, names, exc) from exc


def group_probs(path: Path, meta: pq.FileMetaData, group: int) -> Probs | None:
    """A ``flat-2`` row group's probabilities read where its pages hold them (:func:`page_probs`), or None
    (another kind of column chunk, a ``flat-1`` file, an empty group)."""
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    rows = meta.row_group(group).num_rows
    if "probs" not in paths or rows == 0:  # flat-1: probs.list.element
        return None
    index = paths.index("probs")
    return page_probs(path, meta.row_group(group).column(index), meta.schema.column(index), rows)


def group_doubles(path: Path, meta: pq.FileMetaData, group: int) -> dict[str, DoubleList]:
    """The float lists (:data:`DOUBLE_LISTS`) of a row group that :func:`page_doubles` reads from its pages."""
    leaves = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]
    arrow, rows, found = meta.schema.to_arrow_schema(), meta.row_group(group).num_rows, {}
    for name in DOUBLE_LISTS:
        if leaves.count(name) == 1:
            index = leaves.index(name)
            lists = page_doubles(path, meta.row_group(group).column(index), meta.schema.column(index),
                                 arrow.field(name).nullable, rows)
            if lists is not None:
                found[name] = lists
    return found


def _checked_in_place(path: Path, file: pq.ParquetFile, group: int) -> Checked | None:
    """A ``flat-2`` row group checked in one compiled pass, its probabilities and float lists read where they lie
    in the file (:func:`group_probs`, :func:`group_doubles`) and its other columns decoded by pyarrow; None
    where the probabilities cannot be read so or the pass does not apply (the caller decodes the whole group then)."""
    if (probs := group_probs(path, file.metadata, group)) is None:
        return None
    lists = group_doubles(path, file.metadata, group)
    table = file.read_row_group(group, columns=[name for name in BESIDE_PROBS if name not in lists],
                                use_threads=False).combine_chunks()
    return compiled_check(table.to_batches()[0], probs, lists)


class RowChecks:
    """The checked batches' suspect rows and ids, in row order (rows from 1), for the full validator once
    the whole file is read: the same errors, in the same order, whoever reads the batches. Each batch's ids
    are hashed as it comes (:mod:`draligned.cess.id_repeats`, without the GIL, which a set of 10^6 str held
    for about 0.1 s while the reading threads waited)."""

    def __init__(self) -> None:
        self.suspects: list[np.ndarray] = []
        self.ids: list[str] = []
        self.hashes: list[np.ndarray] = []
        self.rows = 0

    def add(self, bad: np.ndarray, ids: list[str]) -> None:
        self.suspects.append(np.nonzero(bad)[0] + self.rows + 1)
        self.ids += ids
        self.hashes.append(id_hashes(ids))
        self.rows += len(bad)

    def finish(self, read: Callable[[int], dict[str, Any]]) -> None:
        """Raise the file's first error (no rows; a suspect row the validator refuses; a repeated id)."""
        if not self.ids:
            raise TrajectoryError(0, "<file>", "no trajectories (the file has no rows)", where="rows")
        first_error(read, np.concatenate(self.suspects), self.ids, np.arange(1, self.rows + 1),
                    any_repeated(self.hashes))


def metadata_counts(meta: pq.FileMetaData, flat: bool) -> tuple[int, int, int]:
    """The file's rows, and as many documents and rounds as its metadata counts values of the document
    ids and the chosen ids (an empty or NULL list counts one more: such a row is refused)."""
    paths = [meta.schema.column(i).path.split(".") for i in range(meta.num_columns)]  # writers name list items apart
    leaves = ([p[0] == "doc_ids" for p in paths], [p[0] == "chosen" for p in paths]) if flat else (
        [p[:2] == ["pool", "doc_ids"] for p in paths], [p[0] == "rounds" and p[-1] == "chosen" for p in paths])
    docs, rounds = (sum(meta.row_group(g).column(leaf.index(True)).num_values for g in range(meta.num_row_groups))
                    for leaf in leaves)
    return meta.num_rows, docs, rounds


@contextmanager
def counted() -> Iterator[None]:
    """Around taking a part into columns sized by :func:`metadata_counts`: a part that does not fit is the
    file's error, that it holds more values than its metadata counts."""
    try:
        yield
    except ValueError as exc:
        raise TrajectoryError(0, "<file>", f"holds more values than its metadata counts ({exc})",
                              where="file") from None


def open_checked(path: Path) -> tuple[pq.FileMetaData, bool, Callable[[int], dict[str, Any]]]:
    """The file's metadata, whether it has the flat layout, and a reader of one row as its record; raises
    for an unreadable file, an unknown layout or a wrong schema."""
    try:
        meta = pq.read_metadata(path)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise  # the file itself cannot be opened: the caller names it as any such file
    except (pa.ArrowException, OSError) as exc:  # a footer pyarrow cannot deserialize is an OSError
        raise TrajectoryError(0, "<file>", f"not a readable Parquet file ({str(exc).strip()})",
                              where="file") from exc
    layout = (meta.metadata or {}).get(LAYOUT_KEY)
    if layout is not None and layout not in SCHEMAS:
        raise TrajectoryError(0, LAYOUT_KEY.decode(), f"unknown layout {layout!r} (this version reads "
                              f"{' and '.join(map(repr, SCHEMAS))})", where="metadata")
    if layout is not None:
        if (problem := _flat_schema_problem(meta.schema.to_arrow_schema(), SCHEMAS[layout])) is not None:
            raise problem
        return meta, True, _flat_row(path)
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE VIEW t AS SELECT file_row_number + 1 AS row, * EXCLUDE (file_row_number) "
                f"FROM read_parquet({_literal(path)}, file_row_number = true)")
    if (problem := _schema_problem(con)) is not None:
        raise problem
    return meta, False, _nested_row(con)


def load_parquet(path: str | Path, workers: int | None = None) -> TrajectoryColumns:
    """Read and validate a Parquet trajectory file (see the module docstring) as columns.

    pyarrow decodes it row group by row group, in ``workers`` threads (default: one per core), into flat
    arrays that numpy checks (:mod:`draligned.cess.parquet_batch`). The file's metadata names its layout;
    the schema is checked first (pyarrow for the flat layout, DuckDB for the nested one), and a suspect
    row is read back as its record for the full validator.
    """
    path = Path(path)
    meta, flat, read = open_checked(path)
    sink, checks = ColumnSink(*metadata_counts(meta, flat)), RowChecks()
    for bad, arrays, ids, tasks in in_order(meta.num_row_groups, workers or os.cpu_count() or 1,
                                             partial(checked_group, path, flat=flat, meta=meta)):
        checks.add(bad, ids)
        with counted():
            sink.extend(ids, tasks, **arrays)
    checks.finish(read)
    return sink.build()
