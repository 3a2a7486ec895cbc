"""The `cess estimate` table (the command without ``--json``): one row per trajectory, every cell right-aligned
to its column, floats with four decimals, ``-`` for an estimate not given.

At 10^6 trajectories, formatting the table in Python held a str per cell (3.4 GB) and took longer than the
load. The optional extension writes it in two passes over the estimates (``_kernels.table_widths``, then
``_kernels.write_table``), in pieces: the same text as the CLI's table over
:func:`~draligned.cess.column_estimators.estimate_rows` (``tests/cess/test_estimate_table.py``), which the
CLI writes without the extension.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimates import Estimates
from draligned.cess.json_lines import WriterInputs, compiled_writer

HEADERS = ("trajectory", "task", "T", "opened", "OR", "IPW", "DR", "CESS", "CESS13", "CESS12", "ESS", "max_w",
           "theta*", "support interval")
"""The table's columns: a row of :func:`~draligned.cess.column_estimators.estimate_rows` in its field order."""


def table_text(cols: TrajectoryColumns, est: Estimates) -> Iterator[bytes] | None:
    """The table's header, rule and rows as UTF-8, in pieces (each ends with a newline); None without the
    extension."""
    if compiled_writer is None:
        return None
    inputs = WriterInputs.of(cols, est)
    widths = np.array([len(h) for h in HEADERS], np.int64)
    for piece in inputs.pieces():
        compiled_writer.table_widths(*piece, widths)
    return _pieces(inputs, widths)


def _pieces(inputs: WriterInputs, widths: np.ndarray) -> Iterator[bytes]:
    columns = widths.tolist()
    yield ("  ".join(h.rjust(w) for h, w in zip(HEADERS, columns, strict=True)) + "\n"
           + "  ".join("-" * w for w in columns) + "\n").encode()
    for piece in inputs.pieces():
        yield compiled_writer.write_table(*piece, widths)
