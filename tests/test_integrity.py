"""Integrity is checked wherever numbers are produced (issue 11): ``run``, ``read``, ``report`` and ``cess pairs``
refuse a damaged archive with exit 2 naming the file; ``--no-verify`` skips the check and a report says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.records import ToolCallEvent
from tests.conftest import SmallReport
from tests.study_helpers import REPO

SIM_TOML = str(REPO / "evaluators" / "sim.toml")


@pytest.fixture(scope="module")
def intact(small_read: tuple[Path, Path]) -> tuple[Path, Path]:
    """(study file, its archive after one run and one read by the SIMULATOR evaluator); tests copy it."""
    return small_read


def _copy(intact: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Archive]:
    """A study file whose archive is a private copy of the intact one."""
    study, archive = intact
    shutil.copytree(archive, tmp_path / "archive")
    text = study.read_text()
    copy = tmp_path / study.name
    copy.write_text(text)
    return copy, Archive(tmp_path / "archive")


def _edit_record(archive: Archive) -> Path:
    """Change one sealed run record's status reason without resealing it (``archive verify``: altered)."""
    path = archive.record_paths()[0]
    data = json.loads(path.read_text())
    data["status_reason"] = "edited by hand"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def _flip_blob(archive: Archive) -> Path:
    """Flip one byte of a tool return blob."""
    record = archive.records()[0]
    path = archive.blob_path(next(e.return_blob for e in record.events if isinstance(e, ToolCallEvent)))
    raw = path.read_bytes()
    path.write_bytes(bytes([raw[0] ^ 1]) + raw[1:])
    return path


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], named: Path) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "damaged archive" in err and str(named) in err, err
    return err


def test_run_refuses_an_archive_with_an_altered_run_record(intact, tmp_path, capsys):
    """The edited record used to count as a finished slot: every slot was skipped with exit 0."""
    study, archive = _copy(intact, tmp_path)
    path = _edit_record(archive)
    assert f"{path}: altered run record" in _refused(capsys, ["run", str(study)], path)
    assert main(["run", str(study), "--no-verify"]) == 0  # the skip is the caller's choice


@pytest.mark.parametrize("damage", [_edit_record, _flip_blob], ids=["record", "blob"])
def test_read_report_and_cess_pairs_refuse_a_damaged_archive(intact, tmp_path, capsys, damage):
    _, archive = _copy(intact, tmp_path)
    path = damage(archive)
    a, out = str(archive.root), tmp_path / "report"
    _refused(capsys, ["report", a, "--out", str(out)], path)
    assert not out.exists()  # no archive sha256 stamped over damaged data
    _refused(capsys, ["read", a, "--evaluator", SIM_TOML], path)
    _refused(capsys, ["cess", "pairs", a, "--json"], path)
    assert main(["cess", "pairs", a, "--json", "--no-verify"]) == 0


def test_report_with_no_verify_records_the_skip_in_its_manifest(intact, small_report: SmallReport, tmp_path, capsys):
    _, archive = _copy(intact, tmp_path)
    _edit_record(archive)  # (a blob the report reads is checked as it is read, --no-verify or not)
    out = tmp_path / "report"
    assert main(["report", str(archive.root), "--out", str(out), "--no-verify"]) == 0
    assert "--no-verify" in capsys.readouterr().err
    manifest = json.loads((out / "tables" / "manifest.json").read_text())
    assert manifest["identity"]["verified"] is False
    assert "built with --no-verify" in (out / "report.md").read_text()
    assert "built with --no-verify" in (out / "report.html").read_text()
    # the same archive's report without --no-verify (the session's, of an intact copy) records the check
    assert json.loads((small_report.out / "tables" / "manifest.json").read_text())["identity"]["verified"] is True
