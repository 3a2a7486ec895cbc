"""The archive at scale (issue 14): a verify, a read and a report with nothing new to do are answered from what
was found at the archive's fingerprint, and anything that changed a file makes them do the work again; verify's
worker processes find exactly what one process finds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from draligned import guards, indexing
from draligned.analysis import build
from draligned.archive import Archive, verify
from draligned.archive import fingerprint as fingerprint_module
from draligned.archive.fingerprint import _units, fingerprint, holds
from draligned.cli import main
from draligned.evaluator import reading
from draligned.indexing import DERIVED
from draligned.records import ToolCallEvent
from tests.study_helpers import REPO

SIM_TOML = str(REPO / "evaluators" / "sim.toml")


@pytest.fixture(scope="module")
def small(small_read: tuple[Path, Path]) -> Path:
    """An archive after one run and one read by the SIMULATOR evaluator; tests copy it."""
    return small_read[1]


def _copy(small: Path, tmp_path: Path) -> Archive:
    """A private copy (new files: nothing the original's marks say holds for it)."""
    return Archive(shutil.copytree(small, tmp_path / "archive"))


def _tool_return(archive: Archive) -> Path:
    record = archive.records()[0]
    return archive.blob_path(next(e.return_blob for e in record.events if isinstance(e, ToolCallEvent)))


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("recomputed although nothing changed")


def test_a_blob_altered_after_a_clean_verify_is_caught_even_with_its_times_restored(small, tmp_path, capsys):
    archive = _copy(small, tmp_path)
    assert main(["archive", "verify", str(archive.root)]) == 0
    path = _tool_return(archive)
    st = path.stat()
    raw = path.read_bytes()
    path.write_bytes(bytes([raw[0] ^ 1]) + raw[1:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only the ctime tells
    capsys.readouterr()
    assert main(["read", str(archive.root), "--evaluator", SIM_TOML]) == 2
    assert f"{path}: altered blob" in capsys.readouterr().err


def test_a_read_with_nothing_left_to_read_builds_no_packet_until_a_file_changes(small, tmp_path, capsys,
                                                                                monkeypatch):
    archive = _copy(small, tmp_path)
    argv = ["read", str(archive.root), "--evaluator", SIM_TOML]
    assert main(argv) == 0  # the copy's first read builds every packet: nothing is left, and that is marked
    first = json.loads(capsys.readouterr().out)
    assert first["already_read"] == first["packets"] > 0 and first["read_ok"] == 0
    with monkeypatch.context() as m:
        m.setattr(reading, "collect_packets", _must_not_run)
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out) == first
    lost = next((archive.root / "reads" / "sim-lexical-v1" / "reads").iterdir())
    lost.unlink()  # a read lost: the mark no longer holds and the packet is read again
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["read_ok"] == 1 and again["already_read"] < first["already_read"]
    assert lost.exists()


def test_a_report_with_nothing_new_is_kept_and_built_again_when_an_output_or_input_changed(small, tmp_path,
                                                                                          monkeypatch):
    archive = _copy(small, tmp_path)
    out = tmp_path / "report"
    argv = ["report", str(archive.root), "--out", str(out)]
    assert main(argv) == 0
    tables = {p.name: p.read_bytes() for p in (out / "tables").iterdir()}
    with monkeypatch.context() as m:
        m.setattr(build, "build_report", _must_not_run)
        assert main(argv) == 0
        (out / "report.md").write_text("edited")
        with pytest.raises(AssertionError, match="recomputed"):
            main(argv)
    assert main(argv) == 0
    assert "edited" not in (out / "report.md").read_text()
    assert {p.name: p.read_bytes() for p in (out / "tables").iterdir()} == tables
    with monkeypatch.context() as m:
        m.setattr(build, "build_report", _must_not_run)
        next((archive.root / "reads" / "sim-lexical-v1" / "reads").iterdir()).unlink()  # the states change
        with pytest.raises(AssertionError, match="recomputed"):
            main(argv)


def test_a_verify_that_declines_workers_forks_none_for_its_suppliers(small, tmp_path, monkeypatch):
    archive = _copy(small, tmp_path)
    alone = verify.verify_archive(archive, DERIVED)
    monkeypatch.setattr(verify, "PARALLEL_FROM", 1)  # each supplier's check alone would fork a pool of its own
    monkeypatch.setattr(verify, "_own_pool", _must_not_run)
    assert verify.verify_archive(archive, DERIVED) == alone == []


def test_verify_in_worker_processes_finds_what_one_process_finds(small, tmp_path, monkeypatch):
    archive = _copy(small, tmp_path)
    flipped = _tool_return(archive)
    flipped.write_bytes(b"x" + flipped.read_bytes())
    archive.record_paths()[0].write_text("{}")
    manifest = next((archive.root / "reads" / "sim-lexical-v1" / "packets").rglob("*.json"))
    manifest.write_text("not json")
    alone = verify.verify_archive(archive, DERIVED)
    monkeypatch.setattr(verify, "PARALLEL_FROM", 1)
    monkeypatch.setattr(verify, "BLOBS_PARALLEL_FROM", 1)
    pooled: list[bool] = []
    shared_workers = verify.shared_workers

    @contextmanager
    def noting(wanted: bool = True):
        with shared_workers(wanted):
            pooled.append(bool(verify._POOL))  # the workers really were forked for this verify
            yield
    monkeypatch.setattr(verify, "shared_workers", noting)
    assert verify.verify_archive(archive, DERIVED) == alone
    assert pooled == [(os.cpu_count() or 1) > 1]
    assert any(str(flipped) in p for p in alone) and any(str(manifest) in p for p in alone)
    assert any("unreadable run record" in p for p in alone)


def test_a_fingerprint_taken_in_worker_processes_is_the_one_taken_in_one(small, tmp_path, monkeypatch):
    archive = _copy(small, tmp_path)
    alone = fingerprint(archive)
    monkeypatch.setattr(fingerprint_module, "STAT_PARALLEL_FROM", 1)
    monkeypatch.setattr(verify, "in_chunks", _counted(verify.in_chunks, spawned := []))
    assert fingerprint(archive) == alone and spawned == [True]
    flipped = _tool_return(archive)
    flipped.write_bytes(flipped.read_bytes())  # rewritten with the same bytes: its ctime changes
    assert fingerprint(archive) != alone


def _counted(in_chunks, spawned: list[bool]):
    """``in_chunks`` noting whether each call hands its items to worker processes."""
    def counting(check, items, at_least=verify.PARALLEL_FROM, alone=0):
        spawned.append(len(items) >= at_least)
        return in_chunks(check, items, at_least, alone)
    return counting


def test_the_starter_plan_s_studies_are_remembered_until_a_run_is_added(small, tmp_path, monkeypatch):
    archive = _copy(small, tmp_path)
    studies = guards.archive_studies(archive, fingerprint(archive))
    with monkeypatch.context() as m:
        m.setattr(Archive, "started", _must_not_run)
        assert guards.archive_studies(archive, fingerprint(archive)) == studies
    marker = json.loads(archive.started_paths()[0].read_bytes())
    marker["slot"]["study"] = "another"
    (archive.runs_dir / "r-another.started.json").write_text(json.dumps(marker))
    assert guards.archive_studies(archive, fingerprint(archive)) == sorted([*studies, "another"])


def test_the_fingerprint_verify_takes_while_it_hashes_is_the_one_a_later_command_takes(small, tmp_path):
    archive = _copy(small, tmp_path)
    assert indexing.verify(archive) == []
    assert holds(archive, indexing.VERIFIED, fingerprint(archive)) is not None
    (archive.root / "blobs" / "zz").mkdir()  # a folder that was not there when it was verified
    assert holds(archive, indexing.VERIFIED, fingerprint(archive)) is None


HEAVY = ("duckdb", "numpy", "pyarrow", "matplotlib", "httpx", "draligned.runner", "draligned.indexing",
         "draligned.evaluator.reading", "draligned.analysis.build")
"""What does the work of a read or a report (start-up time): a rerun with nothing new loads none of it."""


def test_a_read_and_a_report_with_nothing_new_load_nothing_that_does_the_work(small, tmp_path):
    archive = _copy(small, tmp_path)
    read = ["read", str(archive.root), "--evaluator", SIM_TOML]
    report = ["report", str(archive.root), "--out", str(tmp_path / "report")]
    assert main(read) == 0 and main(report) == 0  # the copy's first ones mark what they found
    for argv in (read, report):
        probe = (f"import sys\nfrom draligned.cli import main\ncode = main({argv!r})\n"
                 f"print(code, [m for m in {HEAVY!r} if m in sys.modules])")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
        assert done.stdout.splitlines()[-1] == "0 []", (argv[0], done.stdout, done.stderr)


def _doubled(chunk: list[int]) -> list[int]:
    return [2 * x for x in chunk]


def test_items_checked_first_in_workers_come_back_in_their_own_place():
    items = list(range(50))
    assert verify.in_parallel(_doubled, items, at_least=1, first=[40, 3]) == [2 * x for x in items]
    assert verify.in_parallel(_doubled, items, at_least=100, first=[40, 3]) == [2 * x for x in items]  # here


def test_the_fingerprint_does_not_depend_on_which_units_go_first(small, tmp_path, monkeypatch):
    archive = _copy(small, tmp_path)
    taken = fingerprint(archive)  # the evaluator's folder (a folder of folders) first
    monkeypatch.setattr(fingerprint_module, "_units", lambda root, chosen: (*_units(root, chosen)[:2], set()))
    assert fingerprint(archive) == taken
