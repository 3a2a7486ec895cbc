"""Concurrency and crashes (issue 11): index rebuilds under any mix of commands, the run lock held to the end,
leftovers of killed writes and killed runs cleaned up, SIGTERM handled like Ctrl-C."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import signal
import threading
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import duckdb
import pytest

from draligned import indexing
from draligned.archive import Archive
from draligned.archive.index import rebuild_index
from draligned.archive.tables import ArchiveTables
from draligned.cli import main
from draligned.indexing import DERIVED, verify
from draligned.runner import LOCK_NAME
from draligned.sandbox import workspace_root
from tests.processes import fork_cli, fork_server, run_cli_at_once
from tests.study_helpers import REPO, write_study

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-card H00 study file after its run (its archive beside it), run once for the module: tests copy it."""
    study = write_study(tmp_path_factory.mktemp("finished"), ["travel_budget_en.json"], name="small")
    assert main(["run", str(study)]) == 0
    return study


@pytest.fixture
def small(finished: Path, tmp_path: Path) -> tuple[Path, Archive]:
    """A finished one-card H00 study and its archive: a private copy of the module's."""
    shutil.copytree(finished.parent / "archive", tmp_path / "archive")
    study = tmp_path / finished.name
    study.write_text(finished.read_text())  # its archive is "archive" beside it: the copy
    return study, Archive(tmp_path / "archive")


def _runs_in_index(archive: Archive) -> int:
    with duckdb.connect(str(archive.root / "index.duckdb"), read_only=True) as con:
        row = con.execute("SELECT count(*) FROM runs").fetchone()
    assert row is not None
    return int(row[0])


def test_a_rebuild_builds_under_a_unique_name_while_readers_keep_the_whole_old_index(small):
    """Mid-rebuild (inside a supplier): the old index still opens with all its runs, the new one is built
    under a name of its own (a fixed name let two rebuilds crash each other), and the lock is held."""
    _, archive = small
    (archive.root / ".index.duckdb.tmp").write_bytes(b"left by a killed rebuild")
    seen: dict[str, object] = {}

    def probe(arch: Archive, records: object) -> dict:
        seen["temps"] = sorted(p.name for p in arch.root.glob(".index*.tmp*") if p.suffix != ".wal")
        seen["runs"] = _runs_in_index(arch)
        fd = os.open(arch.root / ".index.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen["locked"] = False
        except BlockingIOError:
            seen["locked"] = True
        finally:
            os.close(fd)
        return {}

    rebuild_index(archive, (*DERIVED, ArchiveTables(name="probe", rows=probe)))
    temps = seen["temps"]
    assert isinstance(temps, list) and len(temps) == 1 and temps[0] != ".index.duckdb.tmp"
    assert seen["runs"] == 2 and seen["locked"] is True
    assert not list(archive.root.glob(".index*.tmp*")) and _runs_in_index(archive) == 2


@pytest.mark.slow
def test_rebuilds_by_reindex_read_report_and_stats_at_once_all_succeed(small, tmp_path):
    """4 reindexes, 2 reads, a report and stats on one archive at the same time, three times over."""
    _, archive = small
    a = str(archive.root)
    commands = [["archive", "reindex", a]] * 4 + [["read", a, "--evaluator", str(REPO / "evaluators/sim.toml")]] * 2
    commands += [["report", a, "--out", str(tmp_path / "report")], ["archive", "stats", a, "--json"]]
    for n in range(3):
        done = run_cli_at_once(commands, tmp_path / f"round-{n}")
        assert [(c, code, said) for c, (code, said) in zip(commands, done, strict=True) if code] == []
    assert _runs_in_index(archive) == 2 and verify(archive) == []


def test_run_holds_its_lock_through_reindexing_and_also_when_nothing_is_left_to_do(small, monkeypatch, capsys):
    study, archive = small
    held: list[bool] = []
    real = indexing.refresh  # the runner imports it when its study ends (workers never load the index)

    def refresh_checking_the_lock(arch: Archive):
        fd = os.open(arch.root / LOCK_NAME, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        finally:
            os.close(fd)
        return real(arch)

    monkeypatch.setattr(indexing, "refresh", refresh_checking_the_lock)
    assert main(["run", str(study)]) == 0  # nothing left to do
    assert held == [True]
    fd = os.open(archive.root / LOCK_NAME, os.O_RDWR)  # another run holds the archive
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["run", str(study)]) == 2
    finally:
        os.close(fd)
    assert "another 'draligned run' is writing to this archive" in capsys.readouterr().err


def _leftovers(archive: Archive, age_s: float) -> list[Path]:
    """``.tmp-*`` files as a killed ``write_once`` leaves them, ``age_s`` seconds old."""
    blob_dir = next(p for p in (archive.root / "blobs").iterdir() if p.is_dir())
    made = [blob_dir / ".tmp-k1ll3d", archive.runs_dir / ".tmp-s1gk1ll"]
    for path in made:
        path.write_bytes(b"half a write")
        old = path.stat().st_mtime - age_s
        os.utime(path, (old, old))
    return made


def test_leftovers_of_killed_writes_are_named_by_verify_and_removed_by_reindex(small, capsys):
    _, archive = small
    fresh = _leftovers(archive, 0)  # a write in progress in another process: not named, not removed
    assert verify(archive) == []
    stale = [p.rename(p.with_name(p.name + "-old")) for p in fresh]
    for path in stale:
        os.utime(path, (1, 1))
    assert main(["archive", "verify", str(archive.root)]) == 1
    err = capsys.readouterr().err
    assert all(f"{p}: leftover of an interrupted write" in err for p in stale), err
    assert main(["archive", "reindex", str(archive.root)]) == 0
    assert not any(p.exists() for p in stale) and verify(archive) == []


def test_run_removes_leftovers_of_killed_writes(small):
    study, archive = small
    stale = _leftovers(archive, 3600)
    assert main(["run", str(study)]) == 0
    assert not any(p.exists() for p in stale) and verify(archive) == []


def test_sigterm_interrupts_a_study_like_ctrl_c_with_exit_143_and_the_resume_hint(tmp_path, capsys, monkeypatch):
    async def terminated(study, progress=None, verify=True, execute=None, part=None):
        Archive(study.archive_root).root.mkdir(parents=True)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.Event().wait()  # cancelled by the signal, as Ctrl-C cancels it

    monkeypatch.setattr("draligned.workflow.run_study", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["run", str(write_study(tmp_path, ["travel_budget_en.json"]))]) == 143
    err = capsys.readouterr().err
    assert "interrupted (SIGTERM): finished runs are kept" in err and "run the same command again" in err
    assert (tmp_path / "archive" / "index.duckdb").exists() and signal.getsignal(signal.SIGTERM) is before


def tell_workspace(said: Connection, hold: bool) -> None:
    """In a ``draligned run`` child: send the path of its first H-W workspace on ``said`` once it made it;
    with ``hold``, then stand still (event loop blocked) until killed. Only the first: the study's other runs
    make theirs after the test has closed its end, and a send then broke the run with a BrokenPipeError."""
    import draligned.executors.hw as hw

    made = hw.new_workspace

    def new_workspace() -> Path:
        path = made()
        if not said.closed:
            said.send(str(path))
            said.close()
        if hold:
            threading.Event().wait()
        return path

    hw.new_workspace = new_workspace


def _start_hw_run(tmp_path: Path, hold: bool) -> tuple[BaseProcess, Path]:
    """Start an H-W study in a child process; returns it and the workspace it made (once it made it)."""
    study = write_study(tmp_path, ["travel_budget_en.json"], extra='harnesses = ["H-W"]', latency_s=60)
    heard, said = fork_server().Pipe(duplex=False)
    proc = fork_cli(["run", str(study)], tmp_path / "run.log", partial(tell_workspace, said, hold))
    said.close()
    try:
        path = heard.recv() if heard.poll(300) else None  # a guard against a hang, not a timing
    except EOFError:  # the child ended without making one
        path = None
    finally:
        heard.close()
    if path is None:
        proc.kill()
        proc.join()
        pytest.fail((tmp_path / "run.log").read_text())
    return proc, Path(path)


@needs_bwrap
@pytest.mark.slow
def test_a_killed_runs_workspace_is_removed_by_the_next_run(tmp_path):
    proc, workspace = _start_hw_run(tmp_path, hold=True)
    proc.kill()
    proc.join()
    owner = workspace.with_name(workspace.name + ".owner")
    assert workspace.is_dir() and json.loads(owner.read_text())[0] == str((tmp_path / "archive").resolve())
    other = workspace_root() / "0123456789abcdef"  # another archive's live run: left alone
    other.mkdir()
    other.with_name(other.name + ".owner").write_text(json.dumps(["/elsewhere/archive", "r1"]))
    try:
        study = tmp_path / "t.toml"
        study.write_text(study.read_text().replace("latency_s = 60", "latency_s = 0"))
        assert main(["run", str(study)]) == 0  # (the edited model declaration makes new slots)
        assert not workspace.exists() and not owner.exists() and other.is_dir()
    finally:
        shutil.rmtree(other, ignore_errors=True)
        other.with_name(other.name + ".owner").unlink(missing_ok=True)


@needs_bwrap
@pytest.mark.slow
def test_sigterm_mid_run_exits_143_removes_the_workspace_and_keeps_the_archive_resumable(tmp_path):
    proc, workspace = _start_hw_run(tmp_path, hold=False)
    proc.terminate()  # SIGTERM
    proc.join(timeout=300)
    said = (tmp_path / "run.log").read_text()
    assert proc.exitcode == 143, said
    assert "interrupted (SIGTERM)" in said and "run the same command again" in said
    assert not workspace.exists()
    archive = Archive(tmp_path / "archive")
    assert archive.started_paths() and verify(archive) == []
