"""Decode a block of JSON Lines trajectories with pyarrow's JSON reader, when it can decide them alone.

pyarrow parses in C++ against the schema's types (:data:`ARROW_SCHEMA`): no Python object per
number, and it refuses repeated keys, unexpected fields and values of another JSON type (a string or
a bool for a number, a float for the integer budget, an array for an object). What its parser
treats differently from the strict per-line validator is kept out before it runs: a block goes this
way only when every line is one bare object (``{`` first, ``}`` last: no blank line, no surrounding
whitespace, no second object on the line, no byte-order mark), holds no backslash (no escapes: every
key and string is its own bytes) and is UTF-8. Then :func:`~draligned.cess.parquet_batch.check_batch`
checks every rule over the columns (NaN and infinities, which pyarrow parses, are refused there).

Anything it cannot decide — a block outside that form, a parse error, rows that are not the lines,
a row that breaks or nears a rule — gives None, and the caller checks that block line by line with
the exact path, which names the line and field. So this path accepts only what the exact path accepts.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from draligned.cess.parquet_batch import check_batch, owned

_LIST_OF_FLOATS = pa.list_(pa.float64())
ARROW_SCHEMA = pa.schema([
    ("trajectory_id", pa.string()),
    ("task_id", pa.string()),
    ("ranking", pa.string()),
    ("budget", pa.int64()),
    ("pool", pa.struct([("doc_ids", pa.list_(pa.string())), ("y", _LIST_OF_FLOATS), ("m", _LIST_OF_FLOATS)])),
    ("rounds", pa.list_(pa.struct([("probs", _LIST_OF_FLOATS), ("chosen", pa.string()),
                                   ("stop_prob", pa.float64()), ("y", pa.float64())]))),
])
"""The trajectory record's fields in Arrow types (those of the Parquet file, :data:`parquet.COLUMNS`)."""
_PARSE = pj.ParseOptions(explicit_schema=ARROW_SCHEMA, unexpected_field_behavior="error")
_POOL = pa.system_memory_pool()
"""malloc, which returns a freed table's memory at once (pyarrow's default, mimalloc, kept ~70 MB more per
2 × 10^5 trajectories resident while the file was read)."""


def plain_lines(raw: bytes) -> int | None:
    """How many lines ``raw`` holds when each is one bare object without escapes (``{…}\\n``), else None."""
    if not raw.startswith(b"{") or not raw.endswith(b"}\n") or b"\\" in raw:
        return None
    lines, start, find = 0, 0, raw.find
    while start < len(raw):  # find is memchr: far faster over 16 MB than counting a pattern
        end = find(b"\n", start)  # never -1: raw ends with a line end
        if raw[start] != 0x7B or raw[end - 1] != 0x7D:  # "{" first, "}" last
            return None
        start, lines = end + 1, lines + 1
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return lines


def decode_block(raw: bytes) -> tuple[dict[str, np.ndarray], list[str], list[str]] | None:
    """The column arrays and the trajectory and task ids of a block whose every line is valid, or None
    when this path cannot decide (see the module docstring): then the exact path must check the block."""
    lines = plain_lines(raw)
    if lines is None:
        return None
    try:
        table = pj.read_json(io.BytesIO(raw), read_options=pj.ReadOptions(use_threads=False, block_size=len(raw)),
                             parse_options=_PARSE, memory_pool=_POOL)
    except (pa.ArrowException, ValueError):  # ArrowInvalid, or a UnicodeDecodeError of its message
        return None
    if table.num_rows != lines or table.schema != ARROW_SCHEMA:
        return None
    batch = table.combine_chunks().to_batches()[0]
    bad, arrays, ids, tasks = check_batch(batch)
    return None if bad.any() else (owned(arrays), ids, tasks)
