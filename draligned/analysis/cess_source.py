"""Adapter for issue 4's per-run CESS estimates (the one place to fix the shape at merge).

Expected: a JSON-lines file (plan ``cess.source``, relative to the archive root) with one
object per run in the shape of ``draligned.cess.estimators.TrajectoryEstimate``:
``trajectory_id`` (= run_id), ``opened_mean``, ``cess`` (null where the support interval
applies) and ``support_interval`` ([low, high] or null). Missing file -> no CESS rows.

2x2 intervention runs (CESS paper App. C), when a study ran them: JSON lines at plan
``cess.interventions`` with ``task_id, replicate, selection (0 uniform/1 agent), stopping
(0 fixed/1 adaptive), opened_mean``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from draligned.analysis.adapters import QueryLog
from draligned.analysis.interventions import InterventionRow
from draligned.analysis.rows import CessRow

CESS_SQL = """
SELECT trajectory_id AS run_id, opened_mean, cess AS estimate,
       support_interval[1] AS interval_low, support_interval[2] AS interval_high
FROM read_json(?, format = 'newline_delimited',
               columns = {'trajectory_id': 'VARCHAR', 'opened_mean': 'DOUBLE', 'cess': 'DOUBLE',
                          'support_interval': 'DOUBLE[]'})
ORDER BY run_id
""".strip()


def load_cess(con: duckdb.DuckDBPyConnection, path: Path, log: QueryLog) -> list[CessRow]:
    """Per-run CESS rows from ``path``; [] when the file does not exist."""
    if not path.exists():
        return []
    return [CessRow(**dict(zip(CessRow.model_fields, row))) for row in log.run(con, CESS_SQL, [str(path)])]


INTERVENTIONS_SQL = """
SELECT task_id, replicate, selection, stopping, opened_mean
FROM read_json(?, format = 'newline_delimited',
               columns = {'task_id': 'VARCHAR', 'replicate': 'INTEGER', 'selection': 'INTEGER',
                          'stopping': 'INTEGER', 'opened_mean': 'DOUBLE'})
ORDER BY task_id, replicate, selection, stopping
""".strip()


def load_interventions(con: duckdb.DuckDBPyConnection, path: Path, log: QueryLog) -> list[InterventionRow]:
    """2x2 intervention rows from ``path``; [] when the file does not exist."""
    if not path.exists():
        return []
    return [InterventionRow(**dict(zip(InterventionRow.model_fields, row)))
            for row in log.run(con, INTERVENTIONS_SQL, [str(path)])]
