"""The `cess estimate` table (the command without ``--json``): one row per trajectory, every cell right-aligned
to its column, floats with four decimals, ``-`` for an estimate not given.

At 10^6 trajectories, formatting the table in Python held a str per cell (3.4 GB) and took longer than the
load. The optional extension writes it in two passes over the estimates (``_kernels.table_widths``, then
``_kernels.write_table``), in pieces, so a pipeline measures each part where it was estimated
(:class:`TablePart`) and writes its rows once every part is measured: the same text as the CLI's table over
:func:`~draligned.cess.column_estimators.estimate_rows` (``tests/cess/test_estimate_table.py``), which the
CLI writes without the extension.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

import numpy as np

from draligned.cess import json_lines
from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimates import Estimates
from draligned.cess.in_order import made_in_order
from draligned.cess.json_lines import WriterInputs

HEADERS = ("trajectory", "task", "T", "opened", "OR", "IPW", "DR", "CESS", "CESS13", "CESS12", "ESS", "max_w",
           "theta*", "support interval")
"""The table's columns: a row of :func:`~draligned.cess.column_estimators.estimate_rows` in its field order."""


@dataclass(frozen=True)
class TablePart:
    """A run of the table's rows: what they are written from, and each column's widest cell among them."""

    inputs: WriterInputs
    widths: np.ndarray

    @classmethod
    def of(cls, cols: TrajectoryColumns, est: Estimates) -> TablePart:
        """The part of these estimates, measured (needs the extension)."""
        inputs, widths = WriterInputs.of(cols, est), np.zeros(len(HEADERS), np.int64)
        for piece in inputs.pieces():
            json_lines.compiled_writer.table_widths(*piece, widths)
        return cls(inputs, widths)

    def rows(self, widths: np.ndarray) -> Iterator[bytes]:
        """The part's lines, each cell right-aligned to ``widths`` (every part's, :func:`column_widths`)."""
        for piece in self.inputs.pieces():
            yield json_lines.compiled_writer.write_table(*piece, widths)


def column_widths(parts: Iterable[np.ndarray]) -> np.ndarray:
    """The table's column widths: the widest header or cell of every part."""
    widths = np.array([len(h) for h in HEADERS], np.int64)
    for part in parts:
        np.maximum(widths, part, out=widths)
    return widths


def header(widths: np.ndarray) -> bytes:
    """The header line and the rule under it."""
    columns = widths.tolist()
    return ("  ".join(h.rjust(w) for h, w in zip(HEADERS, columns, strict=True)) + "\n"
            + "  ".join("-" * w for w in columns) + "\n").encode()


def table_text(parts: list[TablePart], workers: int) -> Iterator[bytes]:
    """The table of measured parts, in order: the header, then each part's rows, made in ``workers`` threads as
    they are taken (``parts`` is emptied, each part let go once written)."""
    widths = column_widths(part.widths for part in parts)
    return chain([header(widths)], made_in_order(parts, workers, lambda part: list(part.rows(widths))))
