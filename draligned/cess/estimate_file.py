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


def estimate_lines(path: Path, fmt: Format, lam: float) -> Iterator[bytes]:
    """The ``--json`` lines of the file's estimates, in pieces of bytes (see :func:`_through_pipeline`)."""
    return _through_pipeline(path, fmt, lam, table=False)


def estimate_table(path: Path, fmt: Format, lam: float) -> Iterator[bytes] | None:
    """The `cess estimate` table of the file's estimates, in pieces of UTF-8, written by the extension (each
    row group or range measured where it was estimated; see :func:`_through_pipeline`). None without the
    extension (the CLI writes the table then)."""
    from draligned.cess.json_lines import compiled_writer

    return None if compiled_writer is None else _through_pipeline(path, fmt, lam, table=True)


def _through_pipeline(path: Path, fmt: Format, lam: float, table: bool) -> Iterator[bytes]:
    """The lines or the table of the file, through the format's pipeline over its parts on every core
    (:mod:`draligned.cess.parquet_lines` over row groups, :mod:`draligned.cess.jsonl_lines` over ranges), which
    keeps only what the output is made from. The file is read and checked by the call (it raises as
    :func:`load_file` does); the output is made as it is taken."""
    if fmt == "parquet":
        _reading_parquet()
        from draligned.cess import parquet_lines
        return (parquet_lines.parquet_table if table else parquet_lines.parquet_lines)(path, lam)
    from draligned.cess import jsonl_lines
    return (jsonl_lines.jsonl_table if table else jsonl_lines.jsonl_lines)(path, lam)


def _reading_parquet() -> None:
    """This process only reads Parquet and estimates: it reuses the reader's freed temporaries (called before
    pyarrow is imported, for its allocator). (A JSON
    Lines load sets this in its worker processes only, fastload._Workers: its parent's peak was measured
    without, just under 2 GB.)"""
    from draligned.cess.heap import keep_freed_memory
    keep_freed_memory()
