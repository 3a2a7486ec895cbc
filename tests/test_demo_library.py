"""``run_demo`` as a library call: a typed result, progress through a callback, nothing printed.

The bundled studies are swapped for one-card ones so that this runs in seconds; the full demo runs in
tests/test_demo.py through the CLI.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from draligned import demo
from draligned.archive import Archive
from draligned.demo import DemoResult, DemoStage, run_demo
from draligned.records import ToolCallEvent
from draligned.runner import RunProgress
from tests.pool.helpers import write_pool_study
from tests.study_helpers import write_study

pytestmark = pytest.mark.xdist_group("demo_library")  # one worker runs the module's small demo, once


@dataclass(frozen=True)
class SmallDemo:
    """One ``run_demo`` over the small studies: where it wrote, what it returned, its progress and what it
    printed."""

    out: Path
    result: DemoResult
    events: list[DemoStage | RunProgress]
    printed: tuple[str, str]


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmallDemo]:
    """The demo's studies swapped for one card in H00 and a one-seed pool study (named as the demo's, which
    the demo plan's subset selects), run once for the module (the swap holds for its tests); a test that
    changes its files takes a copy."""
    tmp = tmp_path_factory.mktemp("small-demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(demo, "DEMO_STUDY", write_study(tmp, ["travel_budget_en.json"], name="demo"))
        mp.setattr(demo, "DEMO_POOL_STUDY", write_pool_study(tmp, seeds=1, name="demo-pool"))
        events: list[DemoStage | RunProgress] = []
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            result = run_demo(tmp / "out", events.append)
        yield SmallDemo(out=tmp / "out", result=result, events=events, printed=(stdout.getvalue(), stderr.getvalue()))


def test_run_demo_returns_what_it_did_and_reports_progress(small_demo: SmallDemo) -> None:
    result, out = small_demo.result, small_demo.out
    assert small_demo.printed == ("", "")
    stages = [e.stage if isinstance(e, DemoStage) else (e.study, e.done) for e in small_demo.events]
    assert stages == [("demo", 0), ("demo", 1), ("demo", 2), "read", "pool", *(("demo-pool", n) for n in range(9))]
    assert result.archive.root == out / "archive" and result.study.statuses["completed"] == 2
    assert result.problems == [] and result.damaged is None and result.pool_error is None
    reading = result.reading
    assert reading is not None and reading.evaluator_id == "sim-lexical-v1" and reading.summary.model_errors == []
    assert {c.document for c in reading.cells} >= {"final"} and reading.report.html.is_file()
    assert reading.report.html == out / "report" / "report.html" and reading.report.queries
    pool = result.pool
    assert pool is not None and pool.study.archive.root == out / "pool-archive"
    assert len(pool.runs) == 8 and pool.report.html == out / "pool-report" / "report.html"
    assert {c.cell for c in pool.pairs.cells} == {f"{s}/{t}/original" for s in ("agent", "uniform")
                                                 for t in ("fixed", "adaptive")}


def test_a_damaged_archive_is_not_read_again(small_demo: SmallDemo, tmp_path: Path) -> None:
    """A rerun verifies first: a byte flipped in a tool return is listed, and nothing is read or reported."""
    out = Path(shutil.copytree(small_demo.out, tmp_path / "out", symlinks=True))  # the first run, of our own
    archive = Archive(out / "archive")
    first = small_demo.result
    blob = archive.blob_path(next(e.return_blob for e in archive.find_run(first.study.runs[0].run_id).events
                                  if isinstance(e, ToolCallEvent)))
    blob.write_bytes(bytes([blob.read_bytes()[0] ^ 1]) + blob.read_bytes()[1:])
    again = run_demo(out)
    assert again.study.skipped == 2 and len(again.problems) == 1
    assert again.problems[0].startswith(f"{blob}: altered blob")
    assert again.reading is None and again.pool is None
