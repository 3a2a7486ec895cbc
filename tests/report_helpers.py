"""Attach synthetic evaluator states and CESS estimates to a real archive, in the shapes the
report's adapters expect (``states_source`` and ``cess_source``)."""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from draligned.archive import Archive
from draligned.cards import Card
from draligned.evaluator.storage import ReadStore
from draligned.indexing import connect


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
    # It has read the archive: the snapshot a read records, for a (non-simulator) model reader.
    ReadStore(archive, evaluator).write_snapshot({
        "evaluator": {"evaluator_id": evaluator, "model": {"name": "reader", "protocol": "openai-chat",
                                                            "model": "reader-1"}},
        "file_sha256": {}})
    return len(rows)


def _insert_cess(archive: Archive, rows: list[dict]) -> None:
    """Append rows to the index's ``cess_runs`` table (unset columns get neutral defaults)."""
    base = {"slot_id": "s", "attempt": 1, "study": "t", "card_id": "c", "arm": "P", "model": "m",
            "harness": "H00", "seed": 0, "selection": "agent", "stopping": "fixed", "ranking": "original",
            "status": "completed", "budget": 3, "rounds": 3, "ended_by": "budget", "lam": 0.5,
            "outcome_regression": 0.0, "ipw_raw": None, "dr_raw": None, "cess": None,
            "cess_clip_then_shrink": None, "cess_opened_anchor": None, "ess": 1.0, "max_weight": 1.0,
            "theta_star": None, "support_lower": None, "support_upper": None}
    con = duckdb.connect(str(archive.root / "index.duckdb"))
    cols = [c for (c,) in con.execute("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = 'cess_runs' ORDER BY ordinal_position").fetchall()]
    con.executemany(f"INSERT INTO cess_runs VALUES ({','.join('?' * len(cols))})",
                    [[{**base, **row}[c] for c in cols] for row in rows])
    con.close()


def add_cess(archive: Archive, value_of: Callable[[str, str], dict]) -> None:
    """Per-run CESS rows for every completed run: ``value_of(arm, run_id)`` gives opened_mean,
    cess and optionally support_lower/support_upper."""
    con = connect(archive)
    runs = con.execute("SELECT run_id, arm, card_id, model, harness, seed FROM runs "
                       "WHERE status = 'completed' ORDER BY run_id").fetchall()
    con.close()
    _insert_cess(archive, [{"run_id": rid, "arm": arm, "card_id": card, "model": model, "harness": h,
                            "seed": seed, **value_of(arm, rid)} for rid, arm, card, model, h, seed in runs])


def add_interventions(archive: Archive, opened_mean: Callable[[int, int, int], float]) -> None:
    """A complete 2x2 (selection x stopping) for two cards x two seeds of pool runs that are not
    in ``runs``: ``opened_mean(selection, stopping, seed)``."""
    _insert_cess(archive, [
        {"run_id": f"iv-{card}-{seed}-{a}{b}", "card_id": card, "seed": seed,
         "selection": "agent" if a else "uniform", "stopping": "adaptive" if b else "fixed",
         "opened_mean": opened_mean(a, b, seed)}
        for card in ("q1", "q2") for seed in (0, 1) for a in (0, 1) for b in (0, 1)])
