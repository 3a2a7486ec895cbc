"""The output unit of a report: a named table with its denominator note and the SQL that fed it."""

from __future__ import annotations

from typing import Any

from draligned.records import Record


class Table(Record):
    """One readout table; written as CSV and Parquet and shown in report.md/html."""

    name: str
    """File stem of the exports (unique within a report)."""
    title: str
    """Heading shown in the report."""
    note: str
    """Definitions and the denominator of this table (each table has its own)."""
    columns: list[str]
    """Column names."""
    rows: list[list[Any]]
    """Rows aligned with ``columns``."""
    sql: list[str] = []
    """Queries whose results fed the pure function that computed the table."""
    computed_by: str = ""
    """Dotted name of the function that computed the rows."""
    empty_reason: str | None = None
    """Shown instead of an empty table, saying why it is empty."""
    view: list[int] | None = None
    """Indices of the rows shown in report.md/html (None: all, up to the display cap); exports hold all."""
    view_note: str = ""
    """Which rows the view shows, when ``view`` is set."""

    def shown_rows(self, cap: int) -> tuple[list[list[Any]], str]:
        """Rows to display and a note on what was left to the CSV (empty when everything is shown)."""
        rows = self.rows if self.view is None else [self.rows[i] for i in self.view]
        notes = [self.view_note] if self.view is not None and len(rows) < len(self.rows) else []
        if len(rows) > cap:
            notes.append(f"first {cap} of these")
            rows = rows[:cap]
        if len(rows) < len(self.rows):
            notes.append(f"{len(rows)} of {len(self.rows)} rows shown; all rows in tables/{self.name}.csv")
        return rows, "; ".join(notes)

    def records(self) -> list[dict[str, Any]]:
        """Rows as dicts."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def share(n: int, d: int) -> float | None:
    """n/d rounded to 4 places, None when the denominator is 0."""
    return round(n / d, 4) if d else None


def fmt(v: Any) -> str:
    """Display form of a cell: – for None, up to 4 decimals for floats."""
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4f}".rstrip("0").rstrip(".") if v != int(v) else f"{v:.1f}"
    return str(v)
