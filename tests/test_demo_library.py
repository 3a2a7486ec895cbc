"""``run_demo`` as a library call: a typed result, progress through a callback, nothing printed.

The bundled studies are swapped for one-card ones so that this runs in seconds; the full demo runs in
tests/test_demo.py through the CLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from draligned import demo
from draligned.demo import DemoStage, run_demo
from draligned.records import ToolCallEvent
from draligned.runner import RunProgress
from tests.pool.helpers import write_pool_study
from tests.study_helpers import write_study


@pytest.fixture
def small_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's studies swapped for one card in H00 and a one-seed pool study (named as the demo's, which
    the demo plan's subset selects)."""
    monkeypatch.setattr(demo, "DEMO_STUDY", write_study(tmp_path, ["travel_budget_en.json"], name="demo"))
    monkeypatch.setattr(demo, "DEMO_POOL_STUDY", write_pool_study(tmp_path, seeds=1, name="demo-pool"))
    return tmp_path / "out"


def test_run_demo_returns_what_it_did_and_reports_progress(small_demo: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    events: list[DemoStage | RunProgress] = []
    result = run_demo(small_demo, events.append)
    assert capsys.readouterr() == ("", "")
    stages = [e.stage if isinstance(e, DemoStage) else (e.study, e.done) for e in events]
    assert stages == [("demo", 0), ("demo", 1), ("demo", 2), "read", "pool", *(("demo-pool", n) for n in range(9))]
    assert result.archive.root == small_demo / "archive" and result.study.statuses["completed"] == 2
    assert result.problems == [] and result.damaged is None and result.pool_error is None
    reading = result.reading
    assert reading is not None and reading.evaluator_id == "sim-lexical-v1" and reading.summary.model_errors == []
    assert {c.document for c in reading.cells} >= {"final"} and reading.report.html.is_file()
    assert reading.report.html == small_demo / "report" / "report.html" and reading.report.queries
    pool = result.pool
    assert pool is not None and pool.study.archive.root == small_demo / "pool-archive"
    assert len(pool.runs) == 8 and pool.report.html == small_demo / "pool-report" / "report.html"
    assert {c.cell for c in pool.pairs.cells} == {f"{s}/{t}/original" for s in ("agent", "uniform")
                                                 for t in ("fixed", "adaptive")}


def test_a_damaged_archive_is_not_read_again(small_demo: Path) -> None:
    """A rerun verifies first: a byte flipped in a tool return is listed, and nothing is read or reported."""
    first = run_demo(small_demo)
    blob = first.archive.blob_path(next(e.return_blob for e in first.archive.find_run(first.study.runs[0].run_id).events
                                        if isinstance(e, ToolCallEvent)))
    blob.write_bytes(bytes([blob.read_bytes()[0] ^ 1]) + blob.read_bytes()[1:])
    again = run_demo(small_demo)
    assert again.study.skipped == 2 and len(again.problems) == 1
    assert again.problems[0].startswith(f"{blob}: altered blob")
    assert again.reading is None and again.pool is None
