"""Attach synthetic evaluator states and CESS estimates to a real archive, in the shapes the
report's adapters expect (``states_source`` and ``cess_source``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import duckdb

from draligned.archive import Archive
from draligned.archive.index import connect
from draligned.cards import Card


def add_states(archive: Archive, evaluator: str,
               state_of: Callable[[str, str, str, str], tuple[str, str | None]]) -> int:
    """Write a ``states`` table: ``state_of(arm, document, axis, run_id) -> (state, reason)`` per
    finished run, every factor, documents requests / each draft / final. Returns rows written."""
    con = connect(archive)
    runs = con.execute("SELECT run_id, arm, card_sha256, drafts, card_id, seed FROM runs "
                       "WHERE status = 'completed'").fetchall()
    con.close()
    rows = []
    for run_id, arm, card_sha, drafts, card_id, seed in runs:
        card = Card.model_validate_json(archive.get_text(card_sha))
        docs = [("requests", "requests"), *(("draft", f"draft:{v}") for v in range(1, drafts + 1)),
                ("final", "final")]
        for f in card.factors:
            for phase, doc in docs:
                state, reason = state_of(arm, doc, f.factor_id, run_id)
                assigned = card.endpoint_for(arm, f.factor_id)
                rows.append((evaluator, run_id, card_id, arm, seed, phase, doc, f.factor_id, assigned, state,
                             reason, None))
    con = duckdb.connect(str(archive.root / "index.duckdb"))
    # The columns of issue 5's states table (draligned/evaluator/index.py on branch issue-5).
    con.execute("CREATE TABLE IF NOT EXISTS states (evaluator_id TEXT, run_id TEXT, card_id TEXT, arm TEXT, "
                "seed INTEGER, phase TEXT, document TEXT, axis_id TEXT, assigned TEXT, state TEXT, reason TEXT, "
                "label TEXT)")
    con.executemany("INSERT INTO states VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.close()
    return len(rows)


def add_cess(archive: Archive, value_of: Callable[[str, str], dict]) -> None:
    """Write ``cess/estimates.jsonl`` in the TrajectoryEstimate shape: ``value_of(arm, run_id)`` gives
    opened_mean, cess and support_interval."""
    con = connect(archive)
    runs = con.execute("SELECT run_id, arm FROM runs WHERE status = 'completed' ORDER BY run_id").fetchall()
    con.close()
    (archive.root / "cess").mkdir(exist_ok=True)
    with (archive.root / "cess" / "estimates.jsonl").open("w") as fh:
        for run_id, arm in runs:
            fh.write(json.dumps({"trajectory_id": run_id, "task_id": "t", "rounds": 3, **value_of(arm, run_id)}) + "\n")
