"""Compiled kernels of the columns path (``_kernels.cpp``): the writer of draligned.cess.json_lines, the
probability sums of draligned.cess.parquet_batch, the page readers and the check of a flat-2 batch of
draligned.cess.parquet_flat, the table of draligned.cess.estimate_table and the id hashes of
draligned.cess.id_repeats."""

from typing import Any

import numpy as np

def write_lines(ids: list[str], tasks: list[str], rounds: np.ndarray, numbers: tuple[np.ndarray, ...],
                hidden: np.ndarray, lower: np.ndarray, upper: np.ndarray, /) -> bytes:
    """The JSON lines of the estimates, as orjson writes each row of ``estimate_rows``."""

def round_min_sum(values: np.ndarray, offsets: np.ndarray, low: np.ndarray, total: np.ndarray, /) -> None:
    """Each segment's minimum and sum (NaN where numpy's would be: a NaN in it, or empty) into ``low``, ``total``."""

def check_flat(budget: np.ndarray, doc_off: np.ndarray, doc_codes: np.ndarray, n_codes: int, empty: int,
               doc_y: np.ndarray, y_off: np.ndarray, y: np.ndarray, y_valid: np.ndarray, y_absent: np.ndarray,
               m_off: np.ndarray, m: np.ndarray, m_absent: np.ndarray, chosen_off: np.ndarray, chosen_idx: np.ndarray,
               chosen_map: np.ndarray, stop_off: np.ndarray, stop: np.ndarray, ry_off: np.ndarray, ry: np.ndarray,
               ry_valid: np.ndarray, ry_any: bool, p_start: np.ndarray, p_end: np.ndarray, p_bytes: Any,
               sum_limit: float, y_tolerance: float, bad: np.ndarray, budget_f: np.ndarray, n_docs: np.ndarray,
               n_rounds: np.ndarray, first_support: np.ndarray, chosen: np.ndarray, score: np.ndarray, p: np.ndarray,
               full: np.ndarray, /) -> None:
    """check_batch's suspect rows and gathered arrays of a flat-2 batch, into the given outputs (``_kernels.cpp``)."""

def plain_spans(chunk: Any, starts: np.ndarray, ends: np.ndarray, /) -> bool:
    """Each value's byte span in a column chunk of uncompressed PLAIN pages of a REQUIRED BYTE_ARRAY column, into
    ``starts`` and ``ends``; False for pages of any other kind (``_kernels.cpp``)."""

def id_hashes(ids: list[str] | list[str | None], out: np.ndarray, /) -> None:
    """A 64-bit hash of each id's UTF-8 (None hashed as 0), into the uint64 array ``out``."""


def plain_doubles(chunk: Any, list_level: int, max_def: int, offsets: np.ndarray, values: np.ndarray,
                  valid: np.ndarray, absent: np.ndarray, /) -> int:
    """A column chunk of a list of float64 in uncompressed PLAIN pages decoded into the given arrays: the number of
    items, or -1 for pages of any other kind (``_kernels.cpp``)."""


def table_widths(ids: list[str], tasks: list[str], rounds: np.ndarray, numbers: tuple[np.ndarray, ...],
                 hidden: np.ndarray, lower: np.ndarray, upper: np.ndarray, widths: np.ndarray, /) -> None:
    """Each column's widest cell of the `cess estimate` table among the rows, into ``widths`` (14 int64)."""

def write_table(ids: list[str], tasks: list[str], rounds: np.ndarray, numbers: tuple[np.ndarray, ...],
                hidden: np.ndarray, lower: np.ndarray, upper: np.ndarray, widths: np.ndarray, /) -> bytes:
    """The rows' lines of the `cess estimate` table, each cell right-aligned to its column's width."""
