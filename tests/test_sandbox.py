"""Sandbox conformance: no credentials, no host paths or labels, no network, no writes outside
/workspace and /tmp, limits, availability (refuse to start) and `draligned sandbox run`."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.runner import run_study
from draligned.sandbox import (
    WORKSPACE_BASE_ENV,
    SandboxLimits,
    SandboxUnavailable,
    new_workspace,
    redact_host_paths,
    run_in_sandbox,
    sandbox_uid,
    workspace_base,
    workspace_root,
)
from draligned.study import StudyError, load_study
from tests.harness_helpers import needs_bwrap
from tests.study_helpers import write_study

SECRET = "sk-draligned-test-secret-0451"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def workspace():
    path = new_workspace()
    yield path
    shutil.rmtree(path, ignore_errors=True)


PF_EXITING = 0x4
"""Task flag (``/proc/PID/stat`` field 9) set when a task enters exit: it never runs user code again."""


def _live_processes_in(namespace: str) -> list[int]:
    """Host pids of the processes in a pid namespace (``pid:[inode]``) that are not on their way out
    (neither zombies nor killed tasks still releasing their resources)."""
    live = []
    for ns in Path("/proc").glob("[0-9]*/ns/pid"):
        proc = ns.parent.parent
        try:
            if os.readlink(ns) != namespace:
                continue
            flags = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[6])
        except FileNotFoundError:  # ended while we looked
            continue
        except PermissionError:  # another user's process; the sandbox's own are always readable to us
            if proc.stat().st_uid == (sandbox_uid() or os.getuid()):
                raise
            continue
        if not flags & PF_EXITING:
            live.append(int(proc.name))
    return live


def sh(workspace: Path, command: str, **limits: int):
    return asyncio.run(run_in_sandbox(workspace, ["/bin/sh", "-c", command], SandboxLimits(**limits)))


def test_workspace_dirs_are_opaque_and_private(workspace, monkeypatch):
    assert re.fullmatch(r"[0-9a-f]{16}", workspace.name)
    assert workspace.parent == workspace_base() / f"draligned-ws-{os.getuid()}"
    monkeypatch.delenv(WORKSPACE_BASE_ENV, raising=False)
    assert workspace_base() == Path("/tmp")  # unless the operator's environment names another folder
    assert stat.S_IMODE(workspace.parent.stat().st_mode) == 0o711  # others cannot list sibling workspaces
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700


def test_a_workspace_root_planted_by_someone_else_is_refused(monkeypatch, tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir()
    monkeypatch.setenv(WORKSPACE_BASE_ENV, str(tmp_path))
    (tmp_path / f"draligned-ws-{os.getuid()}").symlink_to(planted)
    with pytest.raises(SandboxUnavailable, match="not a directory owned by"):
        new_workspace()
    assert list(planted.iterdir()) == []


class TestIsolation:
    pytestmark = needs_bwrap

    def test_no_credentials_and_no_orchestrator_command_line(self, workspace, monkeypatch):
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        r = sh(workspace, "env; echo ===; tr '\\0' '\\n' < /proc/1/environ; echo ===;"
                          " for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
        assert r.exit_code == 0 and not r.truncated
        env, pid1_environ, cmdlines = r.stdout.split("===\n")
        assert SECRET not in r.stdout
        assert {line.split("=")[0] for line in env.splitlines()} == {"PATH", "HOME", "LANG", "PWD"}
        assert pid1_environ.strip() == ""  # bubblewrap itself was started with an empty environment
        pid1 = cmdlines.splitlines()[0]
        assert re.fullmatch(r"bwrap --args \d+ -- /bin/sh -c .*", pid1), pid1
        for visible in (str(workspace), str(REPO), "pytest", "--bind", "--setenv"):
            assert visible not in cmdlines

    def test_no_host_path_in_mounts_cwd_or_files(self, workspace):
        r = sh(workspace, "pwd; hostname; cat /proc/self/mountinfo; ls -la / /tmp /workspace /etc")
        assert r.exit_code == 0 and r.stdout.startswith("/workspace\nsandbox\n")
        mount = next(line for line in r.stdout.splitlines() if " /workspace " in line)
        fs = next(p for p in workspace.parents if os.path.ismount(p))  # the mount's root is within its fs
        assert mount.split()[3] == f"/{workspace.relative_to(fs)}"  # only the opaque random name shows
        assert str(REPO) not in r.stdout and "pytest" not in r.stdout

    def test_no_network_to_host_loopback(self, workspace):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        try:
            r = sh(workspace, f"cat /proc/net/dev; python3 -c \"import socket; "
                              f"socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\"")
            with pytest.raises(BlockingIOError):
                listener.accept()
        finally:
            listener.close()
        assert "CONNECTED" not in r.stdout and r.exit_code != 0
        interfaces = [line.split(":")[0].strip() for line in r.stdout.splitlines() if ":" in line]
        assert interfaces == ["lo"]

    def test_shell_writes_only_workspace_and_tmp_and_sees_no_checkout(self, workspace):
        r = sh(workspace, "for d in / /usr /etc /var /home /root /opt /bin; do "
                          "touch $d/draligned-probe 2>/dev/null && echo WROTE $d; done; "
                          f"ls {REPO} 2>/dev/null && echo SAW-CHECKOUT; "
                          "touch /workspace/ok /tmp/ok && echo OK")
        assert "WROTE" not in r.stdout and "SAW-CHECKOUT" not in r.stdout and "OK" in r.stdout
        assert (workspace / "ok").exists() and not Path("/usr/draligned-probe").exists()

    def test_timeout_output_cap_and_resource_limits(self, workspace):
        r = sh(workspace, "sleep 10", timeout_s=1)
        assert r.timed_out and "timed out after 1 s" in r.render(SandboxLimits(timeout_s=1))
        r = sh(workspace, "yes | head -c 5000", output_chars=100)
        limits = SandboxLimits(output_chars=100)
        assert len(r.stdout) == 100 and r.truncated and r.total_chars == 5000
        assert "[output truncated: 100 of 5000 characters shown (cap 100)]" in r.render(limits)
        r = sh(workspace, "head -c 3000000 /dev/zero > big; wc -c < big", file_mb=1)
        assert (workspace / "big").stat().st_size <= 1 << 20

    def test_process_limit_counts_only_what_a_command_adds(self, workspace):
        uid = sandbox_uid()
        drop = (lambda: os.setuid(uid)) if uid is not None else None
        others = [subprocess.Popen(["sleep", "30"], preexec_fn=drop) for _ in range(24)]  # same uid, elsewhere
        try:
            ok = sh(workspace, "for i in $(seq 5); do sleep 0.2 & done; wait; echo ok", processes=16)
            bomb = sh(workspace, "for i in $(seq 40); do sleep 3 & done; echo spawned", processes=16)
        finally:
            for p in others:
                p.kill()
                p.wait()
        assert ok.stdout == "ok\n"
        assert bomb.exit_code != 0 and "fork" in bomb.stderr.lower()

    def test_no_process_outlives_its_command(self, workspace):
        """A background child dies with its command: once the command returns, nothing alive is left in
        its pid namespace, so snapshots see the workspace at rest."""
        # The child keeps stdout open, so the command returns only once the sandbox has killed it.
        r = sh(workspace, "(sleep 60; touch /workspace/late) & readlink /proc/self/ns/pid; echo $!")
        namespace, child = r.stdout.split()
        assert re.fullmatch(r"pid:\[\d+\]", namespace) and namespace != os.readlink("/proc/self/ns/pid")
        assert int(child) > 1  # the background child was started inside that namespace
        assert _live_processes_in(namespace) == []
        assert not (workspace / "late").exists()

    def test_cli_runs_one_command_in_the_same_sandbox(self, workspace, capsys, monkeypatch):
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        code = main(["sandbox", "run", str(workspace), "--", "sh", "-c", "env; echo err >&2; exit 7"])
        out, err = capsys.readouterr()
        assert code == 7 and "PATH=/usr/local/bin:/usr/bin:/bin" in out and SECRET not in out
        assert err.strip().endswith("err")


def test_sandboxed_studies_refuse_to_start_without_bubblewrap(tmp_path, monkeypatch):
    monkeypatch.setattr("draligned.sandbox.shutil.which", lambda name: None)
    study = load_study(write_study(tmp_path, ["travel_budget_en.json"], extra='harnesses = ["H-W"]'))
    with pytest.raises(StudyError, match="refuse to start without one.*bubblewrap \\(bwrap\\) is not installed"):
        asyncio.run(run_study(study))
    assert Archive(study.archive_root).started() == []


def test_sandboxed_studies_refuse_to_start_when_bubblewrap_fails(tmp_path, monkeypatch):
    bindir = Path(tempfile.mkdtemp())  # executable by the sandbox uid, unlike pytest's private tmp
    bindir.chmod(0o755)
    fake = bindir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    study = load_study(write_study(tmp_path, ["travel_budget_en.json"], extra='harnesses = ["H-D"]'))
    try:
        with pytest.raises(StudyError, match="H-D.*No permissions to create new namespace"):
            asyncio.run(run_study(study))
    finally:
        shutil.rmtree(bindir)
    assert Archive(study.archive_root).started() == []


def test_host_workspace_paths_are_redacted_in_every_form_the_host_shows(monkeypatch, tmp_path):
    """The host path from /, and from the root of the filesystem it is on (mountinfo's form when the base is
    a tmpfs's root): each is /workspace, the root alone <sandbox root>."""
    monkeypatch.setenv(WORKSPACE_BASE_ENV, str(tmp_path))
    root = f"draligned-ws-{os.getuid()}"
    text = (f"open '{tmp_path}/{root}/0123abcd/notes.md' failed; 65 0:27 /{root}/0123abcd /workspace rw; "
            f"in {tmp_path}/{root}")
    assert redact_host_paths(text) == ("open '/workspace/notes.md' failed; 65 0:27 /workspace /workspace rw; "
                                       "in <sandbox root>")


def test_a_configured_base_with_a_space_is_redacted_whole_and_a_longer_uid_is_left_alone(monkeypatch, tmp_path):
    """The configured base is replaced first, whole: the generic pattern alone stops at the space and would
    leave ``…/my study`` in the archive. ``draligned-ws-<uid>0`` is another user's root, not ours."""
    base = tmp_path / "my study"
    monkeypatch.setenv(WORKSPACE_BASE_ENV, str(base))
    root = f"draligned-ws-{os.getuid()}"
    assert redact_host_paths(f"x {base}/{root}/0123abcd/notes.md y") == "x /workspace/notes.md y"
    assert redact_host_paths(f"{base}/{root}") == "<sandbox root>"
    assert redact_host_paths(f"/tmp/{root}0/0123abcd") == f"/tmp/{root}0/0123abcd"


def test_a_relative_or_unusable_workspace_base_refuses_the_sandbox_with_the_variable_named(monkeypatch, tmp_path):
    monkeypatch.setenv(WORKSPACE_BASE_ENV, "studies/ws")
    with pytest.raises(SandboxUnavailable, match=r"\$DRALIGNED_WORKSPACE_BASE=studies/ws: .* absolute path"):
        workspace_root()
    monkeypatch.setenv(WORKSPACE_BASE_ENV, str(tmp_path / "missing" / "folder"))
    with pytest.raises(SandboxUnavailable, match=r"cannot make the workspaces' root .*DRALIGNED_WORKSPACE_BASE"):
        workspace_root()
