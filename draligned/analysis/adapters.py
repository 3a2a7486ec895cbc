"""Loaders from the archive's DuckDB index and blobs into typed rows (I/O lives here only).

``runs`` and ``events`` are the tables of ``draligned.archive.index``. States and CESS rows
have their own one-function modules (``states_source``, ``cess_source``) so their column
names can be fixed in one place when the evaluator and CESS work is merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from draligned.analysis.rows import RunRow, RunTexts, ToolReturn
from draligned.archive import Archive
from draligned.cards import Card
from draligned.hashing import sha256_text

RUNS_SQL = """
SELECT r.run_id, r.attempt, r.slot_id, r.study, r.card_id, r.card_sha256, r.arm, r.model, r.harness,
       r.seed, r.status, r.model_calls, r.tool_calls, r.drafts,
       (SELECT count(*) FROM events e WHERE e.run_id = r.run_id AND e.type = 'tool_call'
          AND e.request_text IS NOT NULL) AS requests,
       r.final_blob IS NOT NULL AS has_final, r.record_sha256
FROM runs r ORDER BY r.study, r.card_id, r.model, r.harness, r.seed, r.arm, r.attempt, r.run_id
""".strip()

TEXT_EVENTS_SQL = """
SELECT run_id, seq, type, tool, request_text, blob, version FROM events
WHERE type IN ('tool_call', 'draft', 'final') AND (type <> 'tool_call' OR
      (tool IN ('search', 'read') AND error IS NULL))
ORDER BY run_id, seq
""".strip()


@dataclass
class QueryLog:
    """Every query a report ran, in order (printed by ``--show-sql``)."""

    queries: list[str] = field(default_factory=list)

    def run(self, con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[tuple]:
        self.queries.append(sql)
        return con.execute(sql, params or []).fetchall()


def load_runs(con: duckdb.DuckDBPyConnection, log: QueryLog) -> list[RunRow]:
    """Every run attempt in the index (started markers of interrupted runs included)."""
    # strict=False: RunRow's last field, search_cell, is no column of RUNS_SQL (with_search_cells sets it).
    return [RunRow(**dict(zip(RunRow.model_fields, row, strict=False))) for row in log.run(con, RUNS_SQL)]


def with_search_cells(archive: Archive, runs: list[RunRow]) -> list[RunRow]:
    """The runs with their pool-search cell, read from each run's slot in its record (finished or
    started marker), so a pool run pairs within its cell even when it has no ``cess_runs`` row."""
    cells: dict[str, str] = {}
    for rec in archive.records() + archive.started():
        c = rec.slot.search_condition
        cells.setdefault(rec.run_id, f"{c.selection}/{c.stopping}/{c.ranking}" if c is not None else "")
    return [r.model_copy(update={"search_cell": cells.get(r.run_id, "")}) for r in runs]


def archive_sha256(runs: list[RunRow]) -> str:
    """Identity of the archive content: sha256 over the sorted record hashes of its runs."""
    return sha256_text("\n".join(sorted(r.record_sha256 for r in runs)))


def load_cards(archive: Archive, runs: list[RunRow]) -> dict[str, Card]:
    """The card each run was started from, read back from its archived blob."""
    return {r.card_id: Card.model_validate_json(archive.get_text(r.card_sha256))
            for r in {r.card_id: r for r in runs}.values()}


def load_texts(con: duckdb.DuckDBPyConnection, archive: Archive, run_ids: set[str],
               log: QueryLog) -> dict[str, RunTexts]:
    """Drafts, final and the pre-first-draft acquisition returns of the given runs."""
    by_run: dict[str, list[tuple]] = {}
    for row in log.run(con, TEXT_EVENTS_SQL):
        if row[0] in run_ids:
            by_run.setdefault(row[0], []).append(row)
    out = {}
    for run_id in sorted(run_ids):
        drafts: dict[int, str] = {}
        final = None
        returns: list[ToolReturn] = []
        for _, _, typ, tool, request_text, blob, version in by_run.get(run_id, []):
            if typ == "draft":
                drafts[int(version)] = archive.get_text(blob)
            elif typ == "final":
                final = archive.get_text(blob)
            elif not drafts:
                returns.append(ToolReturn(tool=tool, request_text=request_text, text=archive.get_text(blob)))
        out[run_id] = RunTexts(run_id=run_id, drafts=drafts, final=final, returns_before_first_draft=returns)
    return out
