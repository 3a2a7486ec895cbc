"""The audit report over a pool-search archive: CESS tables are filled from ``cess_runs``."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import pytest

from draligned.archive import Archive
from draligned.cli import main


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_report_of_a_pool_archive_without_states_fills_the_cess_tables(pool_archive: Archive, tmp_path: Path):
    """Every pool run counts (2 arms x 2 seeds x 4 search cells): one P/Q pair per seed and search
    cell, per-arm rows per search cell, and the arm's Opened Mean equals the mean over its runs."""
    out = tmp_path / "report"
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "pool"\nversion = 1\n[cess]\nbootstrap = 100\n')
    assert main(["report", str(pool_archive.root), "--plan", str(plan),
                 "--out", str(out)]) == 0
    con = duckdb.connect(str(pool_archive.root / "index.duckdb"), read_only=True)
    truth = {(arm, cell): om for arm, cell, om in con.execute(
        "SELECT arm, selection || '/' || stopping || '/' || ranking, avg(opened_mean) FROM cess_runs "
        "GROUP BY ALL").fetchall()}
    con.close()
    by_arm = _csv(out / "tables" / "cess_by_arm.csv")
    assert len(by_arm) == len(truth) == 8
    for r in by_arm:
        assert (r["runs"], r["with_cess"]) == ("2", "2")
        assert abs(float(r["opened_mean"]) - truth[(r["arm"], r["search_cell"])]) < 1e-4
    by_pair = _csv(out / "tables" / "cess_by_pair.csv")
    assert sorted((r["comparison"], r["om_pairs"]) for r in by_pair) == [("P-Q", "2")] * 4
    assert _csv(out / "tables" / "coverage_pairs.csv")[0]["both_runs"] == "8"
    effects = {r["effect"]: r for r in _csv(out / "tables" / "cess_interventions.csv")}
    assert effects["selection"]["blocks"] == "4"  # (travel, arm) x 2 seeds


def test_a_plan_subset_that_matches_nothing_is_refused_naming_the_studies(pool_archive: Archive, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]):
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "other"\nversion = 1\n[subset]\nstudies = ["not-this-one"]\n')
    out = tmp_path / "report"
    assert main(["report", str(pool_archive.root), "--plan", str(plan), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {plan}: [subset] matches none of the 16 runs" in err and "the archive has studies pool;" in err
    assert not out.exists()


def test_evaluator_pairs_stay_within_the_search_cell(pool_archive: Archive, tmp_path: Path):
    """``states --pairs`` over a read pool archive: one P/Q pair per seed and search cell (the
    four cells of one seed used to overwrite each other, leaving 2 pairs of 8)."""
    import asyncio
    import shutil

    from draligned.evaluator.config import load_evaluator
    from draligned.evaluator.reading import read_archive
    from draligned.evaluator.states import pair_cells, state_rows
    from tests.study_helpers import REPO

    copy = Archive(shutil.copytree(pool_archive.root, tmp_path / "pool"))
    ev = load_evaluator(REPO / "evaluators" / "sim.toml")
    asyncio.run(read_archive(copy, ev, ["final"]))
    runs = {r.run_id: r for r in copy.records()}
    cells = pair_cells(copy, state_rows(copy, ev.evaluator_id))
    finals = [c for c in cells if c.document == "final"]
    assert len(finals) == 8 and len({(c.seed, c.search_cell) for c in finals}) == 8
    assert {(c.model, c.harness) for c in finals} == {(r.slot.model, r.slot.harness) for r in runs.values()}
    assert {c.search_cell for c in finals} == {
        f"{r.slot.search_condition.selection}/{r.slot.search_condition.stopping}/original" for r in runs.values()}


def test_pool_runs_without_a_cess_row_still_pair_within_their_cell(pool_archive: Archive, tmp_path: Path):
    """The search cell comes from the run's slot, not from cess_runs: a run without a CESS row keeps
    its pair (the pair just has no CESS difference)."""
    import shutil

    copy = Archive(shutil.copytree(pool_archive.root, tmp_path / "pool"))
    con = duckdb.connect(str(copy.root / "index.duckdb"))
    con.execute("DELETE FROM cess_runs WHERE arm = 'Q'")
    con.close()
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "pool"\nversion = 1\n[cess]\nbootstrap = 100\n')
    out = tmp_path / "report"
    assert main(["report", str(copy.root), "--plan", str(plan), "--out", str(out)]) == 0
    cov = _csv(out / "tables" / "coverage_pairs.csv")[0]
    assert (cov["pairs"], cov["both_runs"]) == ("8", "8")
    assert _csv(out / "tables" / "cess_by_pair.csv") == []
    assert {r["with_cess"] for r in _csv(out / "tables" / "cess_by_arm.csv") if r["arm"] == "Q"} == {"0"}
