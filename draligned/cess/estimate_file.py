"""`cess estimate FILE`: a trajectory file (JSON Lines or Parquet) read, checked and estimated.

Each format's reader is imported only when a file of it is read (simdjson for JSON Lines; pyarrow's
Parquet modules for Parquet), so one command loads only what it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from draligned.cess.columns import TrajectoryColumns

Format = Literal["jsonl", "parquet"]


def load_file(path: Path, fmt: Format) -> TrajectoryColumns:
    """Every trajectory of the file as columns; raises TrajectoryError (naming line or row and field),
    OSError or duckdb.Error."""
    if fmt == "parquet":
        _reading_parquet()
        from draligned.cess.parquet import load_parquet
        return load_parquet(path)
    from draligned.cess.fastload import load_columns
    return load_columns(path)


def estimate_lines(path: Path, fmt: Format, lam: float) -> Iterator[bytes | memoryview]:
    """The ``--json`` lines of the file's estimates, in pieces of bytes. The file is read and checked by
    the call (it raises as :func:`load_file` does); either format goes through one pipeline over the
    file's parts on every core (:mod:`draligned.cess.parquet_lines` over row groups,
    :mod:`draligned.cess.jsonl_lines` over ranges), which keeps only the lines."""
    if fmt == "parquet":
        _reading_parquet()
        from draligned.cess.parquet_lines import parquet_lines
        return parquet_lines(path, lam)
    from draligned.cess.jsonl_lines import jsonl_lines
    return jsonl_lines(path, lam)


def estimate_table(path: Path, fmt: Format, lam: float) -> Iterator[bytes] | None:
    """The `cess estimate` table of the file's estimates, in pieces of UTF-8 (read and checked by the call, as
    :func:`load_file` raises), written by the extension through the pipeline of :func:`estimate_lines`: each
    row group or range measured where it was estimated. None without the extension (the CLI writes the table
    then)."""
    from draligned.cess.json_lines import compiled_writer

    if compiled_writer is None:
        return None
    if fmt == "parquet":
        _reading_parquet()
        from draligned.cess.parquet_lines import parquet_table
        return parquet_table(path, lam)
    from draligned.cess.jsonl_lines import jsonl_table
    return jsonl_table(path, lam)


def _reading_parquet() -> None:
    """This process only reads Parquet and estimates: it reuses the reader's freed temporaries (called before
    pyarrow is imported, for its allocator). (A JSON
    Lines load sets this in its worker processes only, fastload._Workers: its parent's peak was measured
    without, just under 2 GB.)"""
    from draligned.cess.heap import keep_freed_memory
    keep_freed_memory()
