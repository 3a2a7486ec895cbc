"""Compiled kernels of the columns path (``_kernels.cpp``): the writer of draligned.cess.json_lines and the
probability sums of draligned.cess.parquet_batch."""

import numpy as np

def write_lines(ids: list[str], tasks: list[str], rounds: np.ndarray, numbers: tuple[np.ndarray, ...],
                hidden: np.ndarray, lower: np.ndarray, upper: np.ndarray, /) -> bytes:
    """The JSON lines of the estimates, as orjson writes each row of ``estimate_rows``."""

def round_min_sum(values: np.ndarray, offsets: np.ndarray, low: np.ndarray, total: np.ndarray, /) -> None:
    """Each segment's minimum and sum (NaN where numpy's would be: a NaN in it, or empty) into ``low``, ``total``."""
