"""The demo runs end to end offline, verifies, and a second run makes no model call."""

from __future__ import annotations

import json

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.evaluator.sim import SimEvaluator
from draligned.indexing import verify
from draligned.models.sim import SimAgent
from draligned.records import DelegateEvent, DraftEvent, FinalEvent, SnapshotEvent, ToolCallEvent
from tests.conftest import DemoRun, file_stamps
from tests.harness_helpers import needs_bwrap

pytestmark = needs_bwrap  # the demo covers H-W and H-D, whose shell needs bubblewrap


def _stats(archive: Archive, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["archive", "stats", str(archive.root), "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_demo_end_to_end(demo_run: DemoRun, capsys):
    out = demo_run.out
    assert demo_run.code == 0
    report = out / "report" / "report.html"
    printed = demo_run.stdout
    assert f"Report:  {report}" in printed and report.exists()
    html = report.read_text()
    assert "No evaluator reads in this archive" not in html and "sim-lexical-v1" in html
    final_matrix = (out / "report" / "tables").glob("*pair_matri*.csv")
    assert any("OWN" in p.read_text() for p in final_matrix)
    assert "Pool estimates per arm" in printed and "dOpened = P - Q (effect)" in printed  # part 2: CESS over pools
    pool_archive = Archive(out / "pool-archive")
    assert verify(pool_archive) == [] and len(pool_archive.records()) == 80
    pool_report = out / "pool-report"
    assert f"Pool report:  {pool_report / 'report.html'}" in printed
    by_arm = (pool_report / "tables" / "cess_by_arm.csv").read_text().splitlines()
    assert len(by_arm) == 1 + 16  # 2 cards x 2 arms x 4 search cells, filled from cess_runs
    archive = Archive(out / "archive")
    assert verify(archive) == []
    stats = _stats(archive, capsys)
    # (3 cards x 2 arms + 4 cells) x 2 seeds x 3 harnesses x 2 simulated agents
    assert stats["runs"] == stats["completed_runs"] == 120
    assert stats["model_calls"] > 0 and stats["tool_calls"] > 0 and stats["blobs"] > 0
    records = archive.records()
    assert all(r.final_blob for r in records) and all(r.counters.drafts >= 1 for r in records)
    assert {r.slot.card_id for r in records} == {
        "travel_budget_en", "learning_residence_zh", "career_mobility_en", "car_insurance_2f_en"}
    assert {r.slot.harness for r in records} == {"H00", "H-W", "H-D"}
    for r in records:
        if r.slot.harness == "H00":
            continue
        tools = [e for e in r.events if isinstance(e, ToolCallEvent)]
        snaps = [e for e in r.events if isinstance(e, SnapshotEvent)]
        assert [s.tool_event for s in snaps] == [t.event_id for t in tools]
        (final,) = [e for e in r.events if isinstance(e, FinalEvent)]
        drafts = [e for e in r.events if isinstance(e, DraftEvent)]
        assert final.delivered_by == "submit_file" and final.blob == drafts[-1].blob  # structural identity
        assert {"shell", "write_file", "edit_file"} <= {t.tool for t in tools}
        delegations = [e for e in r.events if isinstance(e, DelegateEvent)]
        assert len(delegations) == (r.slot.harness == "H-D")
        assert all(1 <= len(d.workers) <= 2 and d.workers[0].input_files == ["deliverable.md"]
                   for d in delegations)


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("the rerun did work the marks should have answered")


def test_demo_rerun_is_free(demo_run: DemoRun, monkeypatch, capsys):
    """The demo run again into its own directory (the session's, in place) changes nothing there: no file
    is written, removed or replaced, no model is called, and the marks answer the verify, the read, the
    index and both reports."""
    out = demo_run.out
    before = file_stamps(out)
    for target in (SimAgent, SimEvaluator):
        monkeypatch.setattr(target, "generate", _refuse)
    for name in ("draligned.indexing.verify_archive", "draligned.indexing.rebuild_index",
                 "draligned.analysis.build.build_report"):
        monkeypatch.setattr(name, _refuse)
    assert main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"Report:  {out / 'report' / 'report.html'}" in printed
    assert f"Pool report:  {out / 'pool-report' / 'report.html'}" in printed
    assert file_stamps(out) == before


def test_demo_refuses_a_damaged_archive(demo_run: DemoRun, tmp_path, capsys):
    """The issue's check: a byte flipped in one blob is named by verify, and the demo run again into the
    same directory says the archive is damaged (no traceback, no report) and makes no call."""
    stats = _stats(Archive(demo_run.out / "archive"), capsys)
    out = tmp_path / "demo"
    archive = Archive(demo_run.linked_copy(out / "archive"))
    # A tool return: a blob no evaluator packet reads, so only verifying finds it. The damaged blob is a
    # file of its own (the copy's other files are links to the session's).
    records = archive.records()
    blob = archive.blob_path(next(e.return_blob for e in records[0].events if isinstance(e, ToolCallEvent)))
    data = bytearray(blob.read_bytes())
    data[0] ^= 0x01
    blob.unlink()
    blob.write_bytes(bytes(data))
    assert main(["archive", "verify", str(archive.root)]) == 1
    assert str(blob) in capsys.readouterr().err
    assert main(["demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{blob}: altered blob" in err and "was not (re)written" in err and "Traceback" not in err
    assert _stats(archive, capsys) == stats
    assert not (out / "report").exists() and not (out / "pool-archive").exists()


def test_demo_arms_differ_in_what_the_simulator_searched(demo_run: DemoRun):
    """The demo shows real differences between arms (the sim responds to the user condition)."""
    archive = Archive(demo_run.out / "archive")
    by_card: dict[str, dict[str, set[str]]] = {}
    for r in archive.records():
        queries = {e.request_text for e in r.events if isinstance(e, ToolCallEvent) and e.tool == "search"}
        by_card.setdefault(r.slot.card_id, {}).setdefault(r.slot.arm, set()).update(queries)
    differing = [c for c, arms in by_card.items() if len({frozenset(q) for q in arms.values()}) > 1]
    assert len(differing) >= 3
