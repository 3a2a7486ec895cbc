"""Adapter for issue 5's directional states (the one place to fix column names at merge).

Expected: the ``states`` table that issue 5 adds to the archive's ``index.duckdb``
(``draligned/evaluator/index.py`` on branch issue-5, as of this writing): one row per evaluator,
run, phase, document and axis, with columns ``evaluator_id, run_id, phase, document, axis_id,
state, reason`` (plus card_id, arm, seed, assigned, label, which the report takes from ``runs``). When the
table does not exist the report says "no evaluator reads in this archive" instead of inventing states.
"""

from __future__ import annotations

import duckdb

from draligned.analysis.adapters import QueryLog
from draligned.analysis.rows import StateRow

STATES_SQL = """
SELECT run_id, evaluator_id, phase, document, axis_id AS axis, state, reason
FROM states WHERE evaluator_id = ? ORDER BY run_id, phase, document, axis_id
""".strip()


def has_states(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the index holds a states table at all."""
    row = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'states'").fetchone()
    return bool(row and row[0])


def load_states(con: duckdb.DuckDBPyConnection, evaluator_id: str, log: QueryLog) -> list[StateRow]:
    """States of one evaluator; [] when the archive has no states table."""
    if not has_states(con):
        return []
    return [StateRow(**dict(zip(StateRow.model_fields, row, strict=True)))
            for row in log.run(con, STATES_SQL, [evaluator_id])]
