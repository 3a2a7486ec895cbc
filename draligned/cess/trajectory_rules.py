"""What the trajectory validator (:mod:`draligned.cess.trajectory`) and the fast loaders' checks share: the
tolerances and the error that names a line (or row) and field.

Apart from the validator so that a fast path imports neither pydantic nor jsonschema until a line needs
explaining (their import was most of `cess estimate`'s start-up).
"""

from __future__ import annotations

PROB_SUM_TOLERANCE = 1e-6
"""Probability vectors must sum to 1 within this tolerance."""
PROB_SUM_MARGIN = 1e-9
"""The fast loaders' checks send sums this close to the tolerance to the exact check (math.fsum) here."""
Y_TOLERANCE = 1e-9
"""A round's y must equal its chosen document's pool y within this."""


class TrajectoryError(ValueError):
    """Invalid trajectory input, located by line number (or ``where``, e.g. a Parquet row) and field path."""

    def __init__(self, line: int, field: str, message: str, where: str | None = None) -> None:
        super().__init__(f"{where or f'line {line}'}: {field}: {message}")
        self.line = line
        self.field = field
        self.message = message
