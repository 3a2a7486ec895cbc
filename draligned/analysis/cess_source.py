"""Adapter for the per-run CESS estimates: the derived ``cess_runs`` table of the archive index.

``cess_runs`` (built by ``rebuild_index`` from the pool-round events; see
``draligned.cess.archive_runs``) has one row per run over a candidate pool. Its 2x2 cells
(selection agent/uniform x stopping adaptive/fixed) give the intervention rows (CESS paper
Eqs. 3-4), paired within blocks of card, arm, model, harness, ranking and seed, and clustered by
card (the question), never by finer labels; like every other table, a slot is represented by its
latest finished attempt (a failed attempt never fills a cell).
"""

from __future__ import annotations

import duckdb

from draligned.analysis.adapters import QueryLog
from draligned.analysis.interventions import InterventionRow
from draligned.analysis.plan import Subset
from draligned.analysis.rows import CessRow

CESS_SQL = """
SELECT run_id, opened_mean, cess AS estimate, support_lower AS interval_low, support_upper AS interval_high
FROM cess_runs
ORDER BY run_id
""".strip()


def load_cess(con: duckdb.DuckDBPyConnection, log: QueryLog) -> list[CessRow]:
    """Per-run CESS rows; [] for an archive without pool runs."""
    return [CessRow(**dict(zip(CessRow.model_fields, row, strict=True))) for row in log.run(con, CESS_SQL, [])]


INTERVENTIONS_SQL = """
SELECT study, card_id AS card, model AS model_name, harness AS harness_id,
       study AS cluster_study, card_id,
       arm || '/' || model || '/' || harness || '/' || ranking AS block,
       seed AS replicate,
       CASE selection WHEN 'agent' THEN 1 ELSE 0 END AS selection,
       CASE stopping WHEN 'adaptive' THEN 1 ELSE 0 END AS stopping,
       opened_mean
FROM cess_runs
WHERE status IN ('completed', 'budget_exhausted')
QUALIFY row_number() OVER (PARTITION BY study, card_id, arm, model, harness, seed, selection, stopping, ranking
                           ORDER BY attempt DESC, run_id) = 1
ORDER BY card_id, block, replicate, selection, stopping
""".strip()


def load_interventions(con: duckdb.DuckDBPyConnection, log: QueryLog,
                       subset: Subset | None = None) -> list[InterventionRow]:
    """2x2 intervention rows from the pool runs' design cells; [] when there are none. With the
    plan's ``subset``, runs of other studies, cards, models or harnesses are left out, as in every
    other table of the report."""
    out = []
    for row in log.run(con, INTERVENTIONS_SQL, []):
        labels, values = row[:4], row[4:]
        if subset is None or all(not allowed or value in allowed for value, allowed in
                                 zip(labels, (subset.studies, subset.cards, subset.models, subset.harnesses),
                                     strict=True)):
            out.append(InterventionRow(**dict(zip(InterventionRow.model_fields, values, strict=True))))
    return out
