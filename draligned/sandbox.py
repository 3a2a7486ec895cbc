"""The bubblewrap sandbox the H-W/H-D ``shell`` tool (and ``draligned sandbox run``) runs commands in.

What the command sees: read-only system directories and root, the run's workspace read-write at
``/workspace`` (optionally a read-only subtree on top), a private tmpfs ``/tmp``, a fresh
``/proc`` and ``/dev``, no network (new network namespace), a cleared environment with a
fixed PATH/HOME/LANG, and no capabilities. Two ways bubblewrap itself can leak are closed:
its options go through ``--args FD`` (inside, ``/proc/1/cmdline`` is bubblewrap's own argv,
so it shows only ``bwrap --args N -- sh -c COMMAND``), and workspaces live under an opaque
root (``/tmp/draligned-ws-<uid>/<random>``, or under $DRALIGNED_WORKSPACE_BASE) because
``/proc/self/mountinfo`` shows the host path of every bind mount. Limits: a wall-clock timeout per
command, CPU seconds, address space,
file size, open files and processes (rlimits set before bubblewrap starts, inherited by
everything inside); output beyond a character cap is cut and the cut is reported. When the
orchestrator runs as root, bubblewrap is started as an unprivileged uid (``nobody``), so the
process limit applies and root-owned host files stay unreadable.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import secrets
import shutil
import signal
import stat
import subprocess
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from draligned.records import Record

#: Read-only system paths bound when they exist (the minimum for a POSIX shell and coreutils).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/alternatives",
                "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
NOBODY = 65534
WORKSPACE_BASE_ENV = "DRALIGNED_WORKSPACE_BASE"
"""An environment variable naming another folder for the workspaces' root than /tmp (the test suite puts
them on its RAM disk). Only the operator's environment sets it, never a study."""


def workspace_base() -> Path:
    """Where the opaque root of every workspace is made: /tmp, or the absolute folder
    $DRALIGNED_WORKSPACE_BASE names (read at each call, so that a test can set it after import; the
    processes a command starts inherit it). Raises SandboxUnavailable for a relative folder, whose meaning
    would change with the working directory."""
    base = _configured_base()
    if not base.is_absolute():
        raise SandboxUnavailable(f"${WORKSPACE_BASE_ENV}={base}: the workspaces' folder must be an absolute path")
    return base


def _configured_base() -> Path:
    return Path(os.environ.get(WORKSPACE_BASE_ENV) or "/tmp")


class SandboxUnavailable(Exception):
    """bubblewrap is missing or cannot start a sandbox on this machine (no fallback exists)."""


class SandboxLimits(Record):
    """Per-command limits of the sandboxed shell (from a harness contract's ``limits``)."""

    timeout_s: int = 30
    """Wall-clock seconds before the command (and everything it started) is killed."""
    output_chars: int = 8000
    """Characters of stdout plus stderr returned; the rest is cut and the cut reported."""
    cpu_s: int = 20
    """CPU seconds (RLIMIT_CPU)."""
    memory_mb: int = 1024
    """Address space in MiB (RLIMIT_AS)."""
    file_mb: int = 64
    """Largest file a command may write, in MiB (RLIMIT_FSIZE)."""
    processes: int = 64
    """Processes and threads a command may add to those its uid already runs (RLIMIT_NPROC, which
    the kernel counts per uid across the machine)."""
    open_files: int = 256
    """Open file descriptors (RLIMIT_NOFILE)."""
    tmp_mb: int = 64
    """Size of the private /tmp tmpfs in MiB (bubblewrap ``--size``); a write past it fails with ENOSPC."""

    @classmethod
    def from_contract(cls, limits: BaseModel) -> SandboxLimits:
        """Read the ``shell_*`` fields of a contract's limits (``shell_timeout_s`` -> ``timeout_s``)."""
        return cls(**{k.removeprefix("shell_"): v for k, v in limits.model_dump(exclude_none=True).items()
                      if k.startswith("shell_")})


@dataclass(frozen=True)
class ShellResult:
    """What one sandboxed command did."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    total_chars: int

    def render(self, limits: SandboxLimits) -> str:
        """The text the agent receives: exit code, both streams, and any cut or timeout."""
        parts = [f"exit code: {self.exit_code}", "--- stdout ---", self.stdout, "--- stderr ---", self.stderr]
        if self.truncated:
            parts.append(f"[output truncated: {len(self.stdout) + len(self.stderr)} of {self.total_chars} "
                         f"characters shown (cap {limits.output_chars})]")
        if self.timed_out:
            parts.append(f"[timed out after {limits.timeout_s} s; the command was killed]")
        return "\n".join(parts)


def sandbox_uid() -> int | None:
    """The uid bubblewrap runs as: ``nobody`` when we are root, else our own (None: no change)."""
    return NOBODY if os.geteuid() == 0 else None


def redact_host_paths(text: str) -> str:
    """``text`` with every host workspace path replaced by ``/workspace`` (and the opaque root by
    ``<sandbox root>``): an OSError's text names the host path, which must never reach the archive. Also
    the path from the root of the filesystem it is on, as /proc/self/mountinfo shows the bind mount
    (``/draligned-ws-0/…`` when the base is a tmpfs's root). The root under the configured base is
    replaced first, whole, so a base with a space in it is not left behind."""
    name = f"draligned-ws-{os.getuid()}"
    for root in (re.escape(str(_configured_base() / name)), rf"(?:/[^\s/'\"]+)*/{re.escape(name)}"):
        root += r"(?![0-9])"  # uid 1 is not the start of draligned-ws-10
        text = re.sub(root, "<sandbox root>", re.sub(root + r"/[0-9a-f]+", "/workspace", text))
    return text


def workspace_root() -> Path:
    """The opaque parent of every workspace: traversable, not listable by others. Under /tmp or the
    operator's $DRALIGNED_WORKSPACE_BASE (never $TMPDIR, which could name a study; see workspace_base) and
    per orchestrator uid (so users do not collide). Raises SandboxUnavailable when it cannot be made."""
    root = workspace_base() / f"draligned-ws-{os.getuid()}"
    try:
        root.mkdir(mode=0o711, exist_ok=True)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot make the workspaces' root {root} (${WORKSPACE_BASE_ENV} sets its "
                                 f"folder): {exc.strerror}") from exc
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o711:
        raise SandboxUnavailable(f"{root} exists but is not a directory owned by uid {os.getuid()} with mode "
                                 f"0711 (someone else may have created it); remove it and retry")
    return root


WORKSPACE_OWNER: ContextVar[tuple[Path, str] | None] = ContextVar("draligned_workspace_owner", default=None)
"""(archive root, run id) of the run whose workspaces this context makes; the runner sets it so that the
next run of the archive can remove what a killed run left (see ``remove_stale_workspaces``)."""


def new_workspace() -> Path:
    """A fresh, randomly named workspace directory owned by the sandbox uid. When the context names its
    run (WORKSPACE_OWNER), a host-side ``<name>.owner`` file next to it records archive and run; it is
    outside the workspace, so the sandbox never sees it."""
    root = workspace_root()
    path = root / secrets.token_hex(8)
    path.mkdir(mode=0o700)
    owner = WORKSPACE_OWNER.get()
    if owner is not None:
        (root / f"{path.name}.owner").write_text(json.dumps([str(owner[0].resolve()), owner[1]]))
    uid = sandbox_uid()
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def bwrap_options(workspace: Path, read_only: str | None = None, tmp_mb: int = SandboxLimits().tmp_mb) -> list[str]:
    """Every bubblewrap option (passed via ``--args``); ``read_only`` names a workspace subdir to
    remount read-only (a worker's input snapshot); ``tmp_mb`` sizes the private /tmp."""
    opts = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "sandbox", "--clearenv"]
    for key, value in ENV.items():
        opts += ["--setenv", key, value]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            opts += ["--symlink", os.readlink(path), path]
        else:
            opts += ["--ro-bind-try", path, path]
    opts += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp",
             "--bind", str(workspace), "/workspace"]
    if read_only is not None:
        opts += ["--ro-bind", str(workspace / read_only), f"/workspace/{read_only}"]
    return opts + ["--remount-ro", "/", "--chdir", "/workspace"]


def _tasks_of(uid: int) -> int:
    """Threads currently run by ``uid`` on this machine (what RLIMIT_NPROC counts: tasks by real uid).

    Only processes whose /proc directory ``uid`` owns (their effective uid; one stat each) have their
    status read, and a process counts only when its real uid is ``uid``. So every task counted is one
    the kernel counts; the ones skipped (real uid ``uid`` but another effective uid, e.g. a setuid
    program, or non-dumpable ones, whose /proc directory root owns) can only make the limit tighter.
    """
    count = 0
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                status = Path(entry.path, "status").read_text()
            except OSError:  # the process ended while we looked
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
    return count


def _limit(limits: SandboxLimits, uid: int | None):
    """preexec_fn: set rlimits and, when root, drop to the sandbox uid before bubblewrap starts."""
    nproc = _tasks_of(os.getuid() if uid is None else uid) + limits.processes

    def apply() -> None:
        mib = 1 << 20
        for res, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_mb * mib),
                           (resource.RLIMIT_FSIZE, limits.file_mb * mib), (resource.RLIMIT_NPROC, nproc),
                           (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (value, value))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    return apply


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    """Read a stream to its end, keeping the first ``cap`` bytes; returns (kept, total bytes)."""
    kept, total = bytearray(), 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept), total


async def run_in_sandbox(workspace: Path, argv: list[str], limits: SandboxLimits,
                         read_only: str | None = None) -> ShellResult:
    """Run ``argv`` inside the sandbox with ``workspace`` at /workspace; never raises for the command."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install the 'bubblewrap' package")
    rfd, wfd = os.pipe()
    os.write(wfd, b"".join(o.encode() + b"\0" for o in bwrap_options(workspace, read_only, limits.tmp_mb)))
    os.close(wfd)
    try:
        proc = await asyncio.create_subprocess_exec(
            "bwrap", "--args", str(rfd), "--", *argv, executable=bwrap, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(rfd,), env={},
            start_new_session=True, preexec_fn=_limit(limits, sandbox_uid()))
    except OSError as exc:
        raise SandboxUnavailable(f"bubblewrap ({bwrap}) could not be started: {exc}") from exc
    finally:
        os.close(rfd)
    cap = limits.output_chars * 4
    assert proc.stdout is not None and proc.stderr is not None  # both are pipes
    reading = asyncio.gather(_read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap), proc.wait())
    timed_out = False
    try:
        (out, n_out), (err, n_err), code = await asyncio.wait_for(asyncio.shield(reading), limits.timeout_s)
    except TimeoutError:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        (out, n_out), (err, n_err), code = await reading
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    total = len(stdout) + len(stderr) + (n_out - len(out)) + (n_err - len(err))
    stdout = stdout[: limits.output_chars]
    stderr = stderr[: max(0, limits.output_chars - len(stdout))]
    truncated = len(stdout) + len(stderr) < total
    return ShellResult(exit_code=code, stdout=stdout, stderr=stderr, timed_out=timed_out,
                       truncated=truncated, total_chars=total)


def remove_stale_workspaces(archive_root: Path) -> int:
    """Remove the workspaces that runs of this archive left when they were killed (their owner files name
    the archive and the run), and the owner files of workspaces already gone; returns how many workspaces
    were removed. Call it only while holding the archive's run lock: then no run of the archive is alive."""
    try:
        root = workspace_root()
    except (OSError, SandboxUnavailable):  # no usable workspace root: nothing of ours can be there
        return 0
    archive = str(archive_root.resolve())
    removed = 0
    for owner_file in root.glob("*.owner"):
        workspace = root / owner_file.stem
        try:
            owner_archive, _run_id = json.loads(owner_file.read_text())
        except (OSError, ValueError, TypeError):
            continue
        if workspace.exists() and owner_archive != archive:
            continue
        if workspace.exists():
            shutil.rmtree(workspace, ignore_errors=True)
            removed += 1
        owner_file.unlink(missing_ok=True)
    return removed


async def require_sandbox() -> None:
    """Start one sandbox and run ``true`` in it; raise SandboxUnavailable saying why it failed."""
    workspace = new_workspace()
    try:
        result = await run_in_sandbox(workspace, ["true"], SandboxLimits(timeout_s=20))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if result.exit_code != 0:
        raise SandboxUnavailable(f"bubblewrap could not start a sandbox (exit {result.exit_code}): "
                                 f"{result.stderr.strip()[:500]}")
