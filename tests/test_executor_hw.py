"""H-W conformance: path safety, snapshots after every tool call, the deliverable.md draft chain,
the final as the file text at submit_file, and nothing of the archive, run id or arm visible inside."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from draligned.harness import load_contract
from draligned.indexing import connect
from draligned.records import DraftEvent, FinalEvent, NoticeEvent, SnapshotEvent, ToolCallEvent
from draligned.sandbox import SandboxLimits
from draligned.tools.workspace import PathRefused, Workspace
from tests.harness_helpers import needs_bwrap, of_type, returns, run_harness
from tests.scripted import ScriptedModel, call, reply


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "/workspace/../etc/passwd", "/workspacex/a",
                                  "/workspace", "."])
def test_paths_that_leave_the_workspace_are_refused(tmp_path, path):
    with pytest.raises(PathRefused):
        Workspace(tmp_path).resolve(path, write=True)


def test_outward_symlinks_are_refused_and_inward_ones_allowed(tmp_path):
    (tmp_path / "in.md").write_text("inside")
    (tmp_path / "to-etc").symlink_to("/etc")
    (tmp_path / "to-in").symlink_to("in.md")
    ws = Workspace(tmp_path)
    for path in ("to-etc/hostname", "/workspace/to-etc"):
        with pytest.raises(PathRefused, match="points outside /workspace"):
            ws.resolve(path)
    assert ws.read_text("/workspace/to-in") == "inside"
    assert ws.manifest(1 << 20).symlinks == {"to-etc": "/etc", "to-in": "in.md"}  # recorded, never followed


def test_special_files_are_refused_and_snapshots_stop_at_the_cap(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # writing to it would block the orchestrator forever
    (tmp_path / "a").write_text("0123456789")
    (tmp_path / "b").write_text("0123456789")
    ws = Workspace(tmp_path)
    for op in (lambda: ws.write_text("fifo", "x"), lambda: ws.read_text("fifo")):
        with pytest.raises(PathRefused, match="not a regular file|not a file"):
            op()
    state = ws.manifest(15)
    assert state.files == {"a": b"0123456789"} and state.oversize == {"b": 10}



def test_a_file_where_a_directory_is_needed_is_a_tool_error_not_a_failed_run(tmp_path):
    (tmp_path / "notes.md").write_text("x")
    ws = Workspace(tmp_path)
    for path in ("notes.md/a", "notes.md/a/b"):
        with pytest.raises(PathRefused, match=f"'{path}' cannot be written: "):
            ws.write_text(path, "t")
    assert (tmp_path / "notes.md").read_text() == "x"

def test_unreadable_files_and_directories_are_recorded_not_a_crash_or_a_silent_gap(tmp_path, monkeypatch):
    """As a non-root user the agent's `chmod 000` makes files unreadable to the orchestrator too."""
    (tmp_path / "ok").write_text("x")
    (tmp_path / "locked").write_text("secret")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("y")
    real_open, real_scandir = os.open, os.scandir

    def denied(path):
        return PermissionError(13, "Permission denied", str(path))

    def guarded_open(path, flags, *rest):
        if str(path).endswith("locked"):
            raise denied(path)
        return real_open(path, flags, *rest)

    def guarded_scandir(path="."):
        if str(path).endswith("/d"):
            raise denied(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "scandir", guarded_scandir)
    state = Workspace(tmp_path).manifest(1 << 20)
    assert state.files == {"ok": b"x"}
    assert state.unreadable == {"d": "Permission denied", "locked": "Permission denied"}

@pytest.mark.parametrize("harness", ["H-W", "H-D"])
def test_tool_descriptions_state_the_contract_limits(harness):
    contract = load_contract(harness).contract
    tools, limits = {t.name: t.description for t in contract.tools}, contract.workspace_limits()
    assert f"{limits.shell_output_chars:,} characters" in tools["shell"]
    assert f"after {limits.shell_timeout_s} seconds" in tools["shell"]
    assert f"up to {limits.view_chars:,} characters" in tools["view_file"]
    assert [t for t in tools] == ["search", "read", "shell", "view_file", "write_file", "edit_file", "submit_file"] + (
        ["delegate_batch"] if harness == "H-D" else [])
    assert SandboxLimits.from_contract(limits).processes == limits.shell_processes


class TestHW:
    pytestmark = needs_bwrap

    def test_file_tools_refuse_traversal_absolute_paths_and_outward_symlinks(self, tmp_path):
        hostname = Path("/etc/hostname").read_text() if Path("/etc/hostname").exists() else None
        rec, archive = run_harness(tmp_path, "H-W", ScriptedModel([
            reply(calls=[call("write_file", "c1", path="../escape.md", content="x")]),
            reply(calls=[call("view_file", "c2", path="/etc/passwd")]),
            reply(calls=[call("view_file", "c3", path="/workspace/../etc/passwd")]),
            reply(calls=[call("shell", "c4", command="ln -s /etc out; ln -s /etc/hostname h")]),
            reply(calls=[call("view_file", "c5", path="out/passwd")]),
            reply(calls=[call("write_file", "c6", path="h", content="overwritten")]),
            reply(calls=[call("submit_file", "c7", path="/etc/hostname")]),
            reply(text="done"),
        ]))
        texts = returns(rec, archive)
        errors = [e.error for e in of_type(rec, ToolCallEvent)]
        assert errors == ["refused", "refused", "refused", None, "refused", "refused", "refused"]
        assert "contains '..'" in texts[0] and "outside /workspace" in texts[1] and "contains '..'" in texts[2]
        assert "symlink that points outside /workspace" in texts[4] and "symlink" in texts[5]
        assert not (tmp_path / "escape.md").exists()
        if hostname is not None:
            assert Path("/etc/hostname").read_text() == hostname
        assert rec.status == "completed" and of_type(rec, FinalEvent)[0].delivered_by == "text_reply"

    def test_snapshot_after_every_tool_call_drafts_and_final_equals_file_at_submit(self, tmp_path):
        rec, archive = run_harness(tmp_path, "H-W", ScriptedModel([
            reply(calls=[call("write_file", "c1", path="/workspace/deliverable.md", content="v1\n")]),
            reply(calls=[call("shell", "c2", command="echo more >> deliverable.md; mkdir notes; echo n > notes/a")]),
            reply(calls=[call("view_file", "c3", path="deliverable.md", offset=0, length=2)]),
            reply(calls=[call("edit_file", "c4", path="deliverable.md", old_text="v1", new_text="v2")]),
            reply(calls=[call("search", "c5", query="kyoto")]),
            reply(calls=[call("submit_file", "c6", path="deliverable.md")]),
        ]))
        assert rec.status == "completed"
        assert all(archive.blob_path(sha).exists() for sha, kind in rec.blob_refs()
                   if kind not in ("study", "card", "contract"))  # the helper archives no study files
        tools = of_type(rec, ToolCallEvent)
        snaps = of_type(rec, SnapshotEvent)
        assert [s.tool_event for s in snaps] == [t.event_id for t in tools]  # one per tool call
        for t, s in zip(tools, snaps, strict=True):
            assert rec.events.index(s) > rec.events.index(t)
        manifests = [json.loads(archive.get_text(s.manifest_blob)) for s in snaps]
        texts = [archive.get_text(m["files"]["deliverable.md"]) for m in manifests]
        assert texts == ["v1\n", "v1\nmore\n", "v1\nmore\n", "v2\nmore\n", "v2\nmore\n", "v2\nmore\n"]
        assert [list(s.changed) for s in snaps] == [
            ["deliverable.md"], ["deliverable.md", "notes/a"], [], ["deliverable.md"], [], []]  # unchanged: free
        drafts = of_type(rec, DraftEvent)
        assert [archive.get_text(d.blob) for d in drafts] == ["v1\n", "v1\nmore\n", "v2\nmore\n"]
        assert [d.tool_event for d in drafts] == [tools[0].event_id, tools[1].event_id, tools[3].event_id]
        (final,) = of_type(rec, FinalEvent)
        assert final.delivered_by == "submit_file" and archive.get_text(rec.final_blob) == "v2\nmore\n"
        assert returns(rec, archive)[2].startswith("v1\n[characters 0-2 of 8")
        assert [n.code for n in of_type(rec, NoticeEvent)] == ["draft_final_identity_structural", "workspace_limits"]
        kinds = {kind for _, kind in rec.blob_refs()}
        assert {"snapshot_manifest", "workspace_file"} <= kinds
        with connect(archive) as con:
            rows = con.execute("SELECT role, blob FROM events WHERE type = 'snapshot' ORDER BY seq").fetchall()
        assert rows == [("executor", s.manifest_blob) for s in snaps]

    def test_final_is_the_submitted_file_even_when_it_is_not_the_deliverable(self, tmp_path):
        rec, archive = run_harness(tmp_path, "H-W", ScriptedModel([
            reply(calls=[call("write_file", "c1", path="deliverable.md", content="draft")]),
            reply(calls=[call("submit_file", "c2", path="missing.md")]),
            reply(calls=[call("shell", "c3", command="printf 'other report' > other.md")]),
            reply(calls=[call("submit_file", "c4", path="other.md"), call("search", "c5", query="x")]),
        ]))
        assert of_type(rec, ToolCallEvent)[1].error == "refused"
        assert archive.get_text(rec.final_blob) == "other report"
        assert [archive.get_text(d.blob) for d in of_type(rec, DraftEvent)] == ["draft"]
        assert "tool_call_not_executed" in [n.code for n in of_type(rec, NoticeEvent)]

    def test_nothing_inside_names_the_archive_run_id_or_arm(self, tmp_path):
        run_id, study = "rP0451feedface", "labelstudy"
        rec, archive = run_harness(tmp_path, "H-W", ScriptedModel([
            reply(calls=[call("shell", "c1", command="env; pwd; hostname; tr '\\0' ' ' < /proc/1/cmdline")]),
            reply(calls=[call("shell", "c2", command="cat /proc/self/mountinfo")]),
            reply(calls=[call("shell", "c3", command="ls -la / /tmp /etc /workspace; id")]),
            reply(text="done"),
        ]), run_id=run_id, arm="P", study=study, archive_dir=f"archive-{study}-P-{run_id}")
        seen = "\n".join(returns(rec, archive, "shell"))
        assert "output truncated" not in seen and "/workspace" in seen
        for label in (str(archive.root), run_id, study, rec.slot_id, str(tmp_path)):
            assert label not in seen
        assert re.search(r"(?<![A-Za-z0-9])P(?![A-Za-z0-9])", seen) is None  # the arm label


@pytest.mark.sandbox
@pytest.mark.skipif(not __import__("shutil").which("bwrap"), reason="bubblewrap (bwrap) is not installed")
def test_a_run_that_fails_at_submit_carries_no_final(tmp_path, monkeypatch):
    from draligned.executors import hw

    real = hw.Snapshotter.__call__

    def failing(self, ev):
        if ev.tool == "submit_file":
            raise OSError("snapshot failed")
        return real(self, ev)

    monkeypatch.setattr(hw.Snapshotter, "__call__", failing)
    rec, _ = run_harness(tmp_path, "H-W", ScriptedModel([
        reply(calls=[call("write_file", "c1", path="deliverable.md", content="report")]),
        reply(calls=[call("submit_file", "c2", path="deliverable.md")]),
    ]))
    assert rec.status == "failed" and "snapshot failed" in rec.status_reason
    assert rec.final_blob is None and not of_type(rec, FinalEvent)
