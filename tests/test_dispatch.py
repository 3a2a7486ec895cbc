"""Dispatch.refusal: the one rule for whether a run of a slot may start now, asked for every slot a lane
takes and for every retry of a Ray task (a retry is a new start, so the cost cap and the stop hold for it)."""

from __future__ import annotations

from pathlib import Path

from draligned.archive import Archive
from draligned.runner import Dispatch, RunOutcome, StudyResult, prepare_models
from draligned.study import load_study

REPO = Path(__file__).resolve().parents[1]


def _dispatch(tmp_path: Path) -> Dispatch:
    path = tmp_path / "capped.toml"
    path.write_text(f"""name = "capped"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
harnesses = ["H00"]
seeds = 2
concurrency = 1
archive = "{tmp_path / 'archive'}"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"
max_cost_usd = 0.001

[budget]
max_model_calls = 4

[[models]]
name = "sim-agent"
protocol = "sim"
model = "sim-agent-v1"
price = {{ input = 1.0, output = 2.0 }}
""")
    study = load_study(path)
    todo = study.slots("0" * 64)
    result = StudyResult(archive=Archive(study.archive_root), slots=len(todo), skipped=0)
    return Dispatch(study, todo, {}, result, prepare_models(study, {"sim-agent"}), 0.0, None)


def _end_one(dispatch: Dispatch, cost: float, connection_failed: bool = False) -> None:
    """Take the next slot and end its run as costing ``cost`` (or as failing to connect)."""
    got = dispatch.take()
    assert got is not None
    slot = got[0]
    dispatch.end(RunOutcome(run_id=f"r-{slot.slot_id}", slot_id=slot.slot_id, model=slot.model,
                            status="failed" if connection_failed else "completed",
                            status_reason="connect refused" if connection_failed else None, cost_usd=cost,
                            connection_failed=connection_failed, reached_model=not connection_failed))


def test_a_slot_is_refused_once_the_study_cost_cap_is_spent(tmp_path: Path):
    dispatch = _dispatch(tmp_path)
    left = dispatch.study.slots("0" * 64)[-1]
    _end_one(dispatch, 0.0009)
    assert dispatch.refusal(left) is None
    _end_one(dispatch, 0.0003)
    why = "study cost cap reached: $0.0012 spent of max_cost_usd $0.001"
    assert dispatch.refusal(left) == why
    assert dispatch.take() is None  # every slot left is set aside with the same reason
    assert dispatch.result.not_started and set(dispatch.result.not_started.values()) == {why}


def test_a_slot_is_refused_once_its_model_is_stopped_as_unreachable(tmp_path: Path):
    dispatch = _dispatch(tmp_path)
    stop_after = dispatch.study.spec.models[0].retry.stop_after_connection_failures
    assert len(dispatch.study.slots("0" * 64)) > stop_after  # a slot is left to refuse
    for _ in range(stop_after - 1):
        _end_one(dispatch, 0.0, connection_failed=True)
    left = dispatch.study.slots("0" * 64)[-1]
    assert dispatch.refusal(left) is None
    _end_one(dispatch, 0.0, connection_failed=True)
    assert dispatch.refusal(left) == (f"model 'sim-agent' unreachable: {stop_after} consecutive runs failed to "
                                      "connect (last: connect refused)")
