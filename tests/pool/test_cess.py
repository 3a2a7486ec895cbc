"""Per-run CESS of archived pool runs: cess_runs, export round trip, rebuild, pairs, 2x2 effects."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from draligned.archive import Archive
from draligned.cess.archive_runs import ARCHIVE_LAMBDA, cess_rows, ended_by, pool_runs
from draligned.cess.metrics import intervention_effects
from draligned.cess.pairs import pairs_report
from draligned.cess.trajectory import load_trajectories
from draligned.cli import main
from draligned.indexing import rebuild
from draligned.records import PoolRoundEvent
from draligned.workflow import load_cess_runs

ESTIMATES = ("opened_mean", "outcome_regression", "ipw_raw", "dr_raw", "cess", "cess_clip_then_shrink",
             "cess_opened_anchor", "ess", "max_weight", "theta_star")


def test_export_round_trips_through_the_schema_and_cess_estimate_matches_cess_runs(
        pool_archive: Archive, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "t.jsonl"
    assert main(["cess", "export", str(pool_archive.root), "--out", str(out)]) == 0
    trajectories = load_trajectories(out)  # full schema + semantic validation
    assert len(trajectories) == 16
    assert all(t.pool.y is not None and len(t.pool.doc_ids) == 20 for t in trajectories)
    capsys.readouterr()
    assert main(["cess", "estimate", "--trajectories", str(out), "--lambda", str(ARCHIVE_LAMBDA), "--json"]) == 0
    estimated = {e["trajectory_id"]: e for e in map(json.loads, capsys.readouterr().out.splitlines())}
    table = {r.run_id: r for r in load_cess_runs(pool_archive)}
    assert estimated.keys() == table.keys()
    for run_id, row in table.items():
        assert row.rounds == estimated[run_id]["rounds"]
        for name in ESTIMATES:
            assert getattr(row, name) == pytest.approx(estimated[run_id][name], abs=1e-12), name
        assert row.support_lower is None and estimated[run_id]["support_interval"] is None


def test_rebuild_index_reproduces_cess_runs_from_the_records(pool_archive: Archive):
    before = load_cess_runs(pool_archive)
    (pool_archive.root / "index.duckdb").unlink()
    rebuild(pool_archive)
    assert load_cess_runs(pool_archive) == before
    assert cess_rows(pool_runs(pool_archive)) == before
    assert {(r.arm, r.selection, r.stopping) for r in before} == {
        (a, s, t) for a in "PQ" for s in ("agent", "uniform") for t in ("fixed", "adaptive")}
    assert all(r.ended_by in ("budget", "sampled_stop") and r.theta_star == pytest.approx(0.05) for r in before)


def test_ended_by_tells_controller_stops_from_agent_stops():
    def ev(round_: int, chosen: str | None) -> PoolRoundEvent:
        return PoolRoundEvent(event_id="e1", round=round_, query="q", pool_blob="p", budget=3, wish_stop=False,
                              stop_prob=0.0, chosen=chosen)

    assert ended_by([ev(1, "a"), ev(2, "b"), ev(3, "c")]) == "budget"
    assert ended_by([ev(1, "a"), ev(2, None)]) == "sampled_stop"
    assert ended_by([ev(1, "a"), ev(2, "b")]) == "agent"


def test_pair_table_and_intervention_effects(pool_archive: Archive, capsys: pytest.CaptureFixture[str]):
    runs = load_cess_runs(pool_archive)
    report = pairs_report(runs, n_resamples=500)
    assert len(report.pairs) == 8  # 2 seeds x 4 cells
    by = {(r.seed, f"{r.selection}/{r.stopping}/{r.ranking}", r.arm): r for r in runs}
    for pair in report.pairs:
        p, q = by[(pair.seed, pair.cell, "P")], by[(pair.seed, pair.cell, "Q")]
        assert pair.opened_diff == p.opened_mean - q.opened_mean and pair.cess_diff == p.cess - q.cess
        if pair.cell.startswith("uniform"):  # same probabilities + common draws = identical searches
            assert pair.opened_diff == 0.0 and pair.cess_diff == 0.0
    cells = {c.cell: c for c in report.cells}
    assert cells["agent/fixed/original"].pairs == 2 and cells["agent/fixed/original"].cards == 1

    effects = {(e.effect, e.estimand): e for e in report.intervention}
    assert len(effects) == 8 and all(e.blocks == 4 for e in effects.values())
    theta = {cell: [by[(s, f"{cell}/original", a)].opened_mean for s in (0, 1) for a in "PQ"]
             for cell in ("uniform/fixed", "agent/fixed", "uniform/adaptive", "agent/adaptive")}
    expected = intervention_effects(*(np.array(v) for v in theta.values()))
    assert effects[("selection", "opened_mean")].value.estimate == pytest.approx(expected.selection.mean())
    assert effects[("interaction", "opened_mean")].value.estimate == pytest.approx(expected.interaction.mean())

    assert main(["cess", "pairs", str(pool_archive.root), "--json", "--resamples", "200"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["pairs"]) == 8 and len(printed["arms"]) == 8 and len(printed["intervention"]) == 8
    assert main(["cess", "pairs", str(pool_archive.root), "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    assert "dOpened = P - Q (effect)" in text and "dCESS = P - Q (same target)" in text and "Theorem 2" in text
    assert "cards (cluster)" in text and "Cluster: the card" in text
