"""The compiled writer of draligned.cess.json_lines (``_json_text.cpp``)."""

import numpy as np

def write_lines(ids: list[str], tasks: list[str], rounds: np.ndarray, numbers: tuple[np.ndarray, ...],
                hidden: np.ndarray, lower: np.ndarray, upper: np.ndarray, /) -> bytes:
    """The JSON lines of the estimates, as orjson writes each row of ``estimate_rows``."""
