"""An agent's own actions in H-W fail as tool errors, never as a harness error: odd file names, a path
too long for the file system, a workspace over its quota; and no host workspace path reaches the archive
(issue 11)."""

from __future__ import annotations

import asyncio
import json

import pytest

from draligned.executors.base import harness_error
from draligned.harness import HARNESS_DIR, load_contract
from draligned.records import NoticeEvent, SnapshotEvent, ToolCallEvent
from draligned.sandbox import SandboxLimits, bwrap_options, new_workspace, redact_host_paths, run_in_sandbox
from draligned.tools.workspace import MAX_ENTRIES, PathRefused, Workspace
from tests.harness_helpers import needs_bwrap, of_type, returns, run_harness
from tests.scripted import ScriptedModel, call, reply

SUBMIT = [call("write_file", "w", path="deliverable.md", content="report\n"),
          call("submit_file", "s", path="deliverable.md")]


def _run(tmp_path, calls):
    model = ScriptedModel([reply(calls=[c]) for c in [*calls, *SUBMIT]])
    return run_harness(tmp_path, "H-W", model)


def _archive_text(archive) -> str:
    """Every byte the archive holds, as text (blobs and run records)."""
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in archive.root.rglob("*") if p.is_file())


@pytest.mark.parametrize("mark", needs_bwrap)
def test_a_file_name_that_is_not_utf8_is_recorded_escaped_and_the_run_continues(tmp_path, mark):
    rec, archive = _run(tmp_path, [call("shell", "sh", command="touch \"$(printf 'bad\\377name')\"")])
    assert rec.status == "completed", rec.status_reason
    manifest = json.loads(archive.get_text(of_type(rec, SnapshotEvent)[0].manifest_blob))
    assert "bad\\xffname" in manifest["files"]


def test_escaped_names_in_a_manifest(tmp_path):
    (tmp_path / "bad\udcffname").write_bytes(b"x")  # what os.listdir gives for the byte 0xff
    (tmp_path / "link").symlink_to("to\udcfe")
    state = Workspace(tmp_path).manifest(1 << 20)
    assert state.files == {"bad\\xffname": b"x"} and state.symlinks == {"link": "to\\xfe"}


@pytest.mark.parametrize("mark", needs_bwrap)
def test_a_path_too_long_is_a_tool_error_and_no_host_path_is_archived(tmp_path, mark):
    long = "a" * 5000
    rec, archive = _run(tmp_path, [call("view_file", "v1", path=long), call("view_file", "v2", path="b" * 300),
                                   call("write_file", "w1", path="c" * 300, content="x"),
                                   call("shell", "m", command="cat /proc/self/mountinfo")])
    assert rec.status == "completed", rec.status_reason
    events = [e for e in of_type(rec, ToolCallEvent) if e.tool in ("view_file", "write_file") and e.call_id != "w"]
    assert [e.error for e in events] == ["refused"] * 3
    texts = returns(rec, archive)
    assert "longer than 1024 characters" in texts[0] and len(texts[0]) < 300
    assert "has a name longer than 255 bytes" in texts[1] and "has a name longer than 255 bytes" in texts[2]
    assert " /workspace " in returns(rec, archive, "shell")[0]  # the bind mount, shown by its inside path
    assert "draligned-ws-" not in _archive_text(archive)


def test_an_oserror_naming_the_host_workspace_is_redacted_in_the_status_reason():
    root = new_workspace()
    try:
        exc = OSError(36, "File name too long", str(root / ("a" * 300)))
        reason = harness_error(exc).reason
    finally:
        root.rmdir()
    assert reason is not None and str(root) not in reason and str(root.parent) not in reason
    assert "/workspace/aaa" in reason
    assert redact_host_paths(f"x {root.parent} y") == "x <sandbox root> y"


def test_a_write_over_the_quota_is_refused(tmp_path):
    ws = Workspace(tmp_path, quota_bytes=100)
    ws.write_text("a", "x" * 60)
    ws.write_text("a", "x" * 90)  # replacing a file counts its new size only
    with pytest.raises(PathRefused, match=r"'b' would put the workspace over its quota"):
        ws.write_text("b", "x" * 20)
    assert not (tmp_path / "b").exists()
    (tmp_path / "big").write_bytes(b"x" * 200)  # e.g. written by a shell command
    assert "over its quota" in (ws.over_quota() or "")


@pytest.mark.parametrize("mark", needs_bwrap)
def test_a_shell_command_over_the_quota_is_a_tool_error_the_agent_sees(tmp_path, mark, monkeypatch):
    """A contract version may set the quota (here 1 MiB); the code default applies when it does not."""
    contract = json.loads((HARNESS_DIR / "H-W.json").read_text())
    contract["limits"] |= {"workspace_mb": 1, "shell_tmp_mb": 2}
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "H-W.json").write_text(json.dumps(contract))
    monkeypatch.setattr("tests.harness_helpers.load_contract", lambda h: load_contract(h, tmp_path / "contracts"))
    rec, archive = _run(tmp_path, [
        call("shell", "sh", command="head -c 3000000 /dev/zero > big && echo done"),
        call("write_file", "w2", path="more.md", content="x"),
        call("shell", "rm", command="rm big")])
    assert rec.status == "completed", rec.status_reason
    tools = {e.call_id: e for e in of_type(rec, ToolCallEvent)}
    assert tools["sh"].error == "over_quota" and tools["w2"].error == "refused" and tools["rm"].error is None
    text = archive.get_text(tools["sh"].return_blob)
    assert "done" in text and "over its quota of 1 MiB" in text
    notes = [n.detail for n in of_type(rec, NoticeEvent) if n.code == "workspace_limits"]
    assert notes == ["workspace quota 1 MiB; shell /tmp 2 MiB"]


def test_a_snapshot_lists_at_most_max_entries_paths(tmp_path, monkeypatch):
    monkeypatch.setattr("draligned.tools.workspace.MAX_ENTRIES", 5)
    for i in range(12):
        (tmp_path / f"f{i:02d}").write_text("x")
    state = Workspace(tmp_path).manifest(1 << 20)
    assert len(state.files) == 5 and state.omitted == 7
    assert MAX_ENTRIES == 10_000


def test_the_sandbox_tmp_has_a_size(tmp_path):
    opts = bwrap_options(tmp_path, tmp_mb=3)
    assert opts[opts.index("--tmpfs") - 2:opts.index("--tmpfs") + 2] == ["--size", str(3 << 20), "--tmpfs", "/tmp"]


@pytest.mark.parametrize("mark", needs_bwrap)
def test_a_write_past_the_tmpfs_size_fails_inside_the_sandbox(tmp_path, mark):
    ws = new_workspace()
    result = asyncio.run(run_in_sandbox(ws, ["/bin/sh", "-c", "head -c 5000000 /dev/zero > /tmp/x; echo rc=$?"],
                                        SandboxLimits(tmp_mb=2)))
    ws.rmdir()
    assert "No space left on device" in result.stderr and "rc=1" in result.stdout
