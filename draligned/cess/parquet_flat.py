"""The flat Parquet layouts of trajectories: every column a string, an integer, a list of primitives or bytes.

One row per trajectory, as in the nested layout (:mod:`draligned.cess.parquet`), but the rounds are
not a list of structs: each round field is its own list with one entry per round (``chosen``,
``stop_prob``, ``round_y``), and ``probs`` holds all T × N probabilities of the trajectory, round by
round. Pool fields are ``doc_ids``, ``doc_y``, ``doc_m``. The file's key-value metadata names the
layout (:data:`LAYOUT_KEY`), so a reader tells the layouts apart by the file, not its name.
Decoding flat lists of doubles is cheaper than a list of structs of lists (measured in
benchmarks/README.md), and the per-round ``probs`` offsets follow from T and N. ``cess export`` writes
:data:`FLAT_BINARY` (``flat-2``): ``probs`` is one binary value per row, the T × N little-endian float64
bytes, read as a numpy view of the page (Parquet's repetition levels for 1.8 × 10^8 list items cost twice
its decode); :data:`FLAT` (``flat-1``, ``probs`` a list of doubles) still reads.

The checks are those of the nested layout: :func:`check_flat_batch` checks the lengths the layout
adds (each round list has T entries, ``probs`` T × N), rebuilds the nested arrays as views and runs
:func:`~draligned.cess.parquet_batch.check_batch`; :func:`flat_record` turns a suspect row back into
the JSON record for the full validator, so errors name the row and the record's field (or the flat
column, for a length only this layout has). With the optional extension, a ``flat-2`` batch is checked in one
compiled pass over its rows (``_kernels.check_flat``: the same rules and the same suspect rows; the same
arrays too where no row is badly shaped, and where one is the load fails on it) instead of numpy's thirty-odd
passes over its arrays.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from draligned.cess.parquet_batch import (
    Checked,
    check_batch,
    check_strings,
    codes,
    encoded_ids,
    nulls,
    per_document,
    unlist,
)
from draligned.cess.trajectory_rules import PROB_SUM_MARGIN, PROB_SUM_TOLERANCE, Y_TOLERANCE, TrajectoryError

try:
    from draligned.cess import _kernels as compiled_checks
except ImportError:  # installed without a C++ compiler (the extension is optional): numpy checks every batch
    compiled_checks = None  # type: ignore[assignment]

LAYOUT_KEY = b"draligned.cess.layout"
"""Parquet key-value metadata key naming the layout; absent in the nested files written before."""
FLAT = b"flat-1"
"""The value of :data:`LAYOUT_KEY` for the layout with ``probs`` as a list of doubles."""
FLAT_BINARY = b"flat-2"
"""The value of :data:`LAYOUT_KEY` for the layout with ``probs`` as binary (:data:`FLAT_BINARY_SCHEMA`)."""


def _list(kind: pa.DataType, items_null: bool = False) -> pa.DataType:
    return pa.list_(pa.field("item", kind, nullable=items_null))


FLAT_SCHEMA = pa.schema([
    ("trajectory_id", pa.string()), ("task_id", pa.string()), ("ranking", pa.string()), ("budget", pa.int64()),
    pa.field("doc_ids", _list(pa.string()), nullable=False), ("doc_y", _list(pa.float64(), items_null=True)),
    ("doc_m", _list(pa.float64())), pa.field("chosen", _list(pa.string()), nullable=False),
    pa.field("stop_prob", _list(pa.float64()), nullable=False), pa.field("round_y", _list(pa.float64(), True),
                                                                           nullable=False),
    pa.field("probs", _list(pa.float64()), nullable=False),
], metadata={LAYOUT_KEY: FLAT})
"""The columns of the flat layout as written (NULL: an absent optional field, as in the nested layout).
Lists and numbers that are never absent are written non-nullable (fewer levels to decode: the
probabilities decode in about 60% of the time); a reader takes either."""
FLAT_BINARY_SCHEMA = FLAT_SCHEMA.set(FLAT_SCHEMA.get_field_index("probs"),
                                     pa.field("probs", pa.large_binary(), nullable=False)).with_metadata(
    {LAYOUT_KEY: FLAT_BINARY})
"""The columns of ``flat-2``: those of :data:`FLAT_SCHEMA`, ``probs`` as the T × N float64 (little-endian)
bytes of a row (64-bit offsets: a batch's probabilities may pass 2 GB)."""
SCHEMAS = {FLAT: FLAT_SCHEMA, FLAT_BINARY: FLAT_BINARY_SCHEMA}
"""Each flat layout's columns, by its :data:`LAYOUT_KEY` value."""
FLOAT = np.dtype("<f8")
"""A ``flat-2`` probability's bytes."""
ROUND_LISTS = ("stop_prob", "round_y")
"""Round fields besides ``chosen``: one entry per round each."""


def flatten_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A nested-layout batch (the JSON record's shape) in the ``flat-2`` layout; views where Arrow allows.

    The batch holds validated trajectories: NULL rounds or probability lists are refused."""
    rounds = batch.column("rounds")
    steps = pc.list_flatten(rounds)
    probs, chosen, stop, round_y = steps.flatten()
    if rounds.null_count or steps.null_count or probs.null_count:
        raise ValueError("flat layout: NULL rounds or probabilities (the trajectories are not validated)")
    round_off = unlist(rounds)[0]
    r_off = pa.array(round_off.astype(np.int32))
    p_off = np.asarray(probs.offsets, np.int64)[round_off]
    values = np.ascontiguousarray(unlist(probs)[1].to_numpy(), FLOAT)
    flat_probs = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(round_off) - 1, [
        None, pa.py_buffer((p_off - p_off[0]) * FLOAT.itemsize), pa.py_buffer(values)])
    doc_ids, doc_y, doc_m = batch.column("pool").flatten()
    columns = [batch.column(name) for name in ("trajectory_id", "task_id", "ranking")]
    columns += [pc.cast(batch.column("budget"), pa.int64()), doc_ids, doc_y, doc_m]
    columns += [pa.ListArray.from_arrays(r_off, values) for values in (chosen, stop, round_y)] + [flat_probs]
    return pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(columns, FLAT_BINARY_SCHEMA, strict=True)],
                                      schema=FLAT_BINARY_SCHEMA)


def _binary(arr: pa.Array) -> bool:
    return pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)


def _offsets(arr: pa.Array) -> np.ndarray:
    """A list or binary array's offsets (len + 1; items or bytes), from its buffer."""
    kind = np.int64 if pa.types.is_large_binary(arr.type) or pa.types.is_large_list(arr.type) else np.int32
    return np.frombuffer(arr.buffers()[1], kind)[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _probs_length(arr: pa.Array) -> np.ndarray:
    """Per row, how many probabilities its ``probs`` holds (a binary value's bytes / 8; -1 where they are
    not a whole number of float64s; a NULL row is flagged apart)."""
    size = np.diff(_offsets(arr))
    if not _binary(arr):
        return size
    return np.where(size % FLOAT.itemsize == 0, size // FLOAT.itemsize, -1)


def _probs_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary ``probs`` column's byte offsets (from 0) and its bytes (a view of the column's buffer)."""
    byte_off, data = _offsets(arr), arr.buffers()[2]
    raw = np.frombuffer(data, np.uint8)[byte_off[0]:byte_off[-1]] if data is not None else np.zeros(0, np.uint8)
    return byte_off - byte_off[0], raw


def _probs_values(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """:func:`~draligned.cess.parquet_batch.unlist` of ``probs``: offsets in probabilities (from 0) and the
    float64 values (a view of a binary column's bytes, whose rows are well shaped)."""
    if not _binary(arr):
        return unlist(arr)
    byte_off, raw = _probs_bytes(arr)
    values = np.require(raw.view(FLOAT), requirements="A")  # a copy only after a value of odd length in the chunk
    return byte_off // FLOAT.itemsize, pa.array(values)


def _shape_faults(batch: pa.RecordBatch) -> np.ndarray:
    """Per row, whether a list the layout adds is NULL or of the wrong length (T entries, T × N probs)."""
    col = batch.column  # lengths from the offsets (a NULL row's are whatever they are: it is flagged apart)
    t, n = np.diff(_offsets(col("chosen"))), np.diff(_offsets(col("doc_ids")))
    bad = _probs_length(col("probs")) != t * n
    for name in ROUND_LISTS:
        bad |= np.diff(_offsets(col(name))) != t
    for name in ("chosen", "doc_ids", "probs", *ROUND_LISTS):
        bad |= nulls(col(name))
    return bad


def nested_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A flat-layout batch of well-shaped rows (see :func:`_shape_faults`) as the nested layout's arrays
    (views: only the per-round ``probs`` offsets are computed)."""
    col = batch.column
    (r_off, chosen), n = unlist(col("chosen")), np.diff(unlist(col("doc_ids"))[0])
    t = np.diff(r_off)
    owner = np.repeat(np.arange(batch.num_rows), t)
    step = np.arange(len(owner)) - r_off[:-1][owner]
    p_off, p_values = _probs_values(col("probs"))
    round_off = np.append(p_off[:-1][owner] + step * n[owner], p_off[-1]).astype(np.int32)
    probs = pa.ListArray.from_arrays(pa.array(round_off), p_values)
    steps = pa.StructArray.from_arrays([probs, chosen] + [unlist(col(name))[1] for name in ROUND_LISTS],
                                       names=["probs", "chosen", "stop_prob", "y"])
    pool = pa.StructArray.from_arrays([col("doc_ids"), col("doc_y"), col("doc_m")], names=["doc_ids", "y", "m"])
    rounds = pa.ListArray.from_arrays(pa.array(r_off.astype(np.int32)), steps)
    return pa.RecordBatch.from_arrays([col("trajectory_id"), col("task_id"), col("ranking"), col("budget"), pool,
                                       rounds], names=["trajectory_id", "task_id", "ranking", "budget", "pool",
                                                       "rounds"])


def _values(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Float values (NaN for NULL) and which are there: none (empty) when all are, as the compiled pass takes them."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), FLOAT), ~nulls(arr) if arr.null_count else _NONE


_NONE = np.zeros(0, bool)
DOUBLE_LISTS = ("doc_y", "doc_m", *ROUND_LISTS)
"""The columns that are lists of float64."""
DoubleList = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""A list-of-float64 column as the compiled pass takes it: offsets (from 0), the values (NaN for NULL), which are
there (none, empty, when all are) and which rows' lists are NULL."""


def double_list(arr: pa.Array) -> DoubleList:
    """:data:`DoubleList` of a column pyarrow decoded."""
    off, values = unlist(arr)
    return (off, *_values(values), nulls(arr))


Probs = tuple[Any, np.ndarray, np.ndarray]
"""A ``flat-2`` batch's probabilities: a buffer of bytes, and the start and end of each row's bytes in it."""


def _probs_spans(arr: pa.Array) -> Probs:
    """:data:`Probs` of a binary ``probs`` column (its rows' bytes follow each other)."""
    byte_off, raw = _probs_bytes(arr)
    return raw, byte_off[:-1], byte_off[1:]


def _mapped(path: Path, chunk: pq.ColumnChunkMetaData) -> np.ndarray | None:
    """A column chunk's bytes, from its first data page, as a view of a read-only memory map of the file (the map
    lives as long as the view); None for a chunk that is compressed, has a dictionary page or lies outside the file."""
    if chunk.compression != "UNCOMPRESSED" or chunk.has_dictionary_page:
        return None
    first, size = chunk.data_page_offset, chunk.total_compressed_size
    start = first - first % mmap.ALLOCATIONGRANULARITY
    with path.open("rb") as file:
        if first < 0 or size <= 0 or first + size > os.fstat(file.fileno()).st_size:
            return None
        mapped = mmap.mmap(file.fileno(), first + size - start, prot=mmap.PROT_READ, offset=start)
    return np.frombuffer(mapped, np.uint8)[first - start:]


def page_probs(path: Path, chunk: pq.ColumnChunkMetaData, column: pq.ColumnSchema, rows: int) -> Probs | None:
    """A row group's ``probs`` (``rows`` values) read from the file's pages without decoding them: each row's
    bytes where they lie in the column chunk (``_kernels.plain_spans``, over a read-only memory map of the
    chunk), for a REQUIRED byte-array column of uncompressed PLAIN pages, as ``cess export`` writes it. None
    for any other column chunk (pyarrow decodes it then, and reports what it finds wrong). pyarrow's decode
    copied a row group's 26 MB of probabilities into fresh memory that the check then read once."""
    if (compiled_checks is None or column.physical_type != "BYTE_ARRAY" or column.max_definition_level
            or column.max_repetition_level or (pages := _mapped(path, chunk)) is None):
        return None
    starts, ends = np.empty(rows, np.int64), np.empty(rows, np.int64)
    return (pages, starts, ends) if compiled_checks.plain_spans(pages, starts, ends) else None


def page_doubles(path: Path, chunk: pq.ColumnChunkMetaData, column: pq.ColumnSchema, list_nullable: bool,
                 rows: int) -> DoubleList | None:
    """A row group's list-of-float64 column (``rows`` lists; ``list_nullable``: whether the list itself may be NULL)
    decoded from its uncompressed PLAIN pages by ``_kernels.plain_doubles``, over a read-only memory map of the
    chunk; None for any other column chunk (pyarrow decodes it then). Its levels took pyarrow about twice as long."""
    list_level = int(list_nullable)
    if (compiled_checks is None or column.physical_type != "DOUBLE" or column.max_repetition_level != 1
            or column.max_definition_level not in (list_level + 1, list_level + 2)
            or (pages := _mapped(path, chunk)) is None):
        return None
    off, values, valid, absent = (np.empty(rows + 1, np.int64), np.empty(chunk.num_values, FLOAT),
                                  np.empty(chunk.num_values, bool), np.empty(rows, bool))
    items = compiled_checks.plain_doubles(pages, list_level, column.max_definition_level, off, values, valid, absent)
    return None if items < 0 else (off, values[:items], valid[:items], absent)


def compiled_check(batch: pa.RecordBatch, probs: Probs | None = None,
                   lists: dict[str, DoubleList] | None = None) -> Checked | None:
    """:func:`check_flat_batch` in one compiled pass (``_kernels.check_flat``), or None where the pass does not
    apply: without the extension, for ``flat-1``, where a list it needs is NULL (round lists, document or
    chosen ids, probabilities: another writer's file) or a budget is, and where the ids were not read as
    dictionaries (``cess export`` writes them so; a reader that does not ask for them gets plain strings).
    ``probs``, ``lists``: the probabilities and the float lists (:data:`DOUBLE_LISTS`) that were read from the
    file's pages (:func:`page_probs`, :func:`page_doubles`) instead of the batch.
    Its arrays hold every row (a suspect row's entries are never used)."""
    col, lists = batch.column, lists or {}
    doc_ids, chosen = col("doc_ids"), col("chosen")
    if (compiled_checks is None or col("budget").null_count
            or (probs is None and (not _binary(col("probs")) or col("probs").null_count))
            or any(col(name).null_count for name in ("doc_ids", "chosen"))
            or not all(pa.types.is_dictionary(ids.type.value_type) for ids in (doc_ids, chosen))):
        return None
    (y_off, yv, y_valid, y_absent), (m_off, mv, _, m_absent), (s_off, sv, _, s_absent), (ry_off, rv, ry_valid,
                                                                                         ry_absent) = (
        lists[name] if name in lists else double_list(col(name)) for name in DOUBLE_LISTS)
    if s_absent.any() or ry_absent.any():
        return None
    (doc_off, docs), (ch_off, ch_values) = unlist(doc_ids), unlist(chosen)
    encoded = encoded_ids(docs)
    chosen_map = pc.fill_null(pc.index_in(ch_values.dictionary, value_set=encoded.dictionary), -1)
    ry_any = bool(len(rv)) and (not len(ry_valid) or bool(ry_valid.any()))
    p_bytes, p_start, p_end = probs or _probs_spans(col("probs"))
    b, d, r = batch.num_rows, int(doc_off[-1]), int(ch_off[-1])
    bad, full = np.empty(b, bool), np.empty(r, bool)
    doc_y = per_document(yv, y_off, y_absent, doc_off, np.nan)
    arrays = {"budget": np.empty(b), "n_docs": np.empty(b, np.int64), "n_rounds": np.empty(b, np.int64),
              "first_support": np.zeros(d, np.int64), "chosen": np.empty(r, np.int64), "y": np.empty(r),
              "p": np.empty(r), "full_support": full, "doc_y": doc_y,
              "doc_m": per_document(mv, m_off, m_absent, doc_off, 0.0),
              "stop": sv if np.array_equal(s_off, ch_off) else np.full(r, np.nan)}  # else a suspect row
    compiled_checks.check_flat(
        np.asarray(col("budget").to_numpy(), np.int64), doc_off,
        codes(encoded), len(encoded.dictionary), pc.index(encoded.dictionary, "").as_py(), doc_y, y_off, yv, y_valid,
        y_absent, m_off, mv, m_absent, ch_off, codes(ch_values), np.asarray(chosen_map.to_numpy(), np.int32), s_off,
        sv, ry_off, rv, ry_valid, ry_any, p_start, p_end, p_bytes, PROB_SUM_TOLERANCE - PROB_SUM_MARGIN, Y_TOLERANCE,
        bad, arrays["budget"], arrays["n_docs"], arrays["n_rounds"], arrays["first_support"], arrays["chosen"],
        arrays["y"], arrays["p"], full)
    strings, ids, tasks = check_strings(batch)
    return bad | strings, arrays, ids, tasks


def check_flat_batch(batch: pa.RecordBatch) -> Checked:
    """:func:`~draligned.cess.parquet_batch.check_batch` for a flat batch: a row with a badly shaped list
    is suspect, and the rest are checked as nested arrays (numpy's arrays are then of those rows only: the
    load fails on the suspect row, so they are never used). One compiled pass where it applies
    (:func:`compiled_check`)."""
    if (checked := compiled_check(batch)) is not None:
        return checked
    faults = _shape_faults(batch)
    if not faults.any():
        return check_batch(nested_batch(batch))
    bad, arrays, _, tasks = check_batch(nested_batch(batch.filter(pa.array(~faults))))
    every = faults.copy()
    every[np.nonzero(~faults)[0][bad]] = True
    return every, arrays, batch.column("trajectory_id").to_pylist(), tasks


def flat_record(row: dict[str, Any], line: int, where: str) -> dict[str, Any]:
    """The JSON record of one flat row (for the full validator); raises for a list only this layout has
    that is NULL or has the wrong length, naming the column."""
    def fault(field: str, message: str) -> TrajectoryError:
        return TrajectoryError(line, field, message, where)

    docs, chosen, probs = row["doc_ids"], row["chosen"], row["probs"]
    for name in ("doc_ids", "chosen", "probs", *ROUND_LISTS):
        if row[name] is None:
            raise fault(name, "is NULL (a list is required: use [] or a list of NULLs for absent values)")
    t, n = len(chosen), len(docs)
    if isinstance(probs, bytes):  # flat-2
        if len(probs) % FLOAT.itemsize:
            raise fault("probs", f"has {len(probs)} bytes, not a whole number of float64 values (8 bytes each)")
        probs = np.frombuffer(probs, FLOAT).tolist()
    for name in ROUND_LISTS:
        if len(row[name]) != t:
            raise fault(name, f"has {len(row[name])} entries, expected {t} (one per round, as in chosen)")
    if len(probs) != t * n:
        raise fault("probs", f"has {len(probs)} values, expected {t} rounds × {n} documents = {t * n}")
    rounds = [{"probs": probs[k * n:(k + 1) * n], "chosen": chosen[k], "stop_prob": row["stop_prob"][k],
               "y": row["round_y"][k]} for k in range(t)]
    return {"trajectory_id": row["trajectory_id"], "task_id": row["task_id"], "ranking": row["ranking"],
            "budget": row["budget"], "pool": {"doc_ids": docs, "y": row["doc_y"], "m": row["doc_m"]},
            "rounds": rounds}
