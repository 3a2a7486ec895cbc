"""One rule across the CLI (issue 11): an archive, evaluator, plan subset or phase that does not exist or does
not match is refused with exit 2 and ``error:`` naming it; nothing succeeds on an empty result and no
mistyped path is created."""

from __future__ import annotations

import argparse
import shutil
import tomllib
from pathlib import Path

import pytest

from draligned.analysis.plan import parse_plan
from draligned.cli import build_parser, main
from tests.conftest import SmallReport
from tests.study_helpers import REPO

SIM_TOML = str(REPO / "evaluators" / "sim.toml")
SIM_ID = "sim-lexical-v1"


@pytest.fixture(scope="module")
def read_archive(small_read: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-card H00 archive read by the SIMULATOR evaluator (never damaged: tests copy it to damage it),
    this module's copy of the session's: its commands add reviews and reports to it."""
    return Path(shutil.copytree(small_read[1], tmp_path_factory.mktemp("refusals") / "archive"))


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *named: str) -> str:
    """Run a command that must refuse: exit 2, one ``error:`` line naming each of ``named``."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err, err
    for word in named:
        assert word in err, err
    return err


def test_a_mistyped_evaluator_id_is_refused_by_report_agreement_and_review(read_archive, tmp_path, capsys):
    a = str(read_archive)
    _refused(capsys, ["report", a, "--evaluator", "sim-lexcial-v1", "--out", str(tmp_path / "r")],
             "evaluator 'sim-lexcial-v1' has not read", f"read by: {SIM_ID}")
    assert not (tmp_path / "r").exists()
    _refused(capsys, ["agreement", a, "--evaluators", f"{SIM_ID},nope"], "evaluator 'nope' has not read")
    _refused(capsys, ["review", "export", a, "--evaluator", "nope", "--out", str(tmp_path / "s.jsonl")],
             "evaluator 'nope' has not read")
    assert not (read_archive / "reviews" / "nope").exists() and not (tmp_path / "s.jsonl").exists()
    _refused(capsys, ["states", a, "--evaluator", "nope"], "evaluator 'nope' has not read")


def test_agreement_with_nothing_to_compare_is_refused(read_archive, tmp_path, capsys):
    """An evaluator with no completed read has no read 1 vs read 2 to compare: refused, not an empty answer."""
    assert main(["agreement", str(read_archive), "--evaluators", SIM_ID]) == 0
    assert '"raters"' in capsys.readouterr().out
    copy = tmp_path / "copy"
    shutil.copytree(read_archive, copy)
    shutil.rmtree(copy / "reads" / SIM_ID / "reads")  # as if every read had failed before it was stored
    _refused(capsys, ["agreement", str(copy), "--evaluators", SIM_ID], "nothing to compare")


@pytest.mark.parametrize("argv", [
    ["read", "{A}", "--evaluator", SIM_TOML], ["report", "{A}", "--out", "{T}/out"], ["archive", "ls", "{A}"],
    ["archive", "verify", "{A}"], ["archive", "stats", "{A}"], ["archive", "reindex", "{A}"],
    ["archive", "show", "{A}", "r0"], ["states", "{A}", "--evaluator", SIM_ID],
    ["agreement", "{A}", "--evaluators", SIM_ID], ["review", "export", "{A}", "--evaluator", "x", "--out", "{T}/s"],
    ["cess", "pairs", "{A}"], ["cess", "export", "{A}", "--out", "{T}/t.jsonl"], ["plan", "init", "{A}"],
], ids=lambda argv: " ".join(a for a in argv[:2] if "{" not in a))
@pytest.mark.parametrize("kind", ["missing", "not-an-archive"])
def test_a_path_that_is_no_archive_is_refused_and_nothing_is_created(tmp_path, capsys, argv, kind):
    where = tmp_path / "no" / "such" / "dir" if kind == "missing" else tmp_path / "folder"
    if kind == "not-an-archive":
        where.mkdir()
        (where / "notes.txt").write_text("not an archive\n")
    before = sorted(tmp_path.rglob("*"))
    argv = [a.replace("{A}", str(where)).replace("{T}", str(tmp_path)) for a in argv]
    _refused(capsys, argv, str(where), "no archive here" if kind == "missing" else "not an archive")
    assert sorted(tmp_path.rglob("*")) == before  # no index.duckdb, reads/, reviews/ or output made


def test_report_without_plan_uses_a_plan_over_the_archives_studies_and_says_so(small_report: SmallReport):
    err = small_report.stderr
    assert "no --plan given: using a default plan over the archive's studies (small)" in err
    assert f"draligned plan init {small_report.archive}" in err
    assert "2 of 2 run attempts in the plan's subset" in (small_report.out / "report.md").read_text()


def test_plan_init_prints_a_valid_starting_plan_for_the_archive(read_archive, capsys):
    assert main(["plan", "init", str(read_archive)]) == 0
    text = capsys.readouterr().out
    assert tomllib.loads(text)["subset"]["studies"] == ["small"]
    assert parse_plan(text.encode(), "printed").plan.subset.studies == ["small"]


def test_every_evaluator_option_takes_an_id_or_a_toml_file(read_archive, tmp_path, capsys):
    a = str(read_archive)
    assert main(["states", a, "--evaluator", SIM_TOML, "--json"]) == 0
    assert f'"evaluator_id": "{SIM_ID}"' in capsys.readouterr().out
    assert main(["report", a, "--evaluator", SIM_TOML, "--out", str(tmp_path / "r")]) == 0
    assert main(["review", "export", a, "--evaluator", SIM_TOML, "--out", str(tmp_path / "s.jsonl")]) == 0
    assert (read_archive / "reviews" / SIM_ID).is_dir()
    capsys.readouterr()
    copy = tmp_path / "copy"
    shutil.copytree(read_archive, copy)
    assert main(["read", str(copy), "--evaluator", SIM_ID]) == 0  # the bundled evaluator, by id
    _refused(capsys, ["read", str(copy), "--evaluator", "nope"], "evaluator 'nope'", "pass the evaluator's TOML")
    helps = {name: p.format_help() for name, p in _subparsers(build_parser()).items()}
    for command in ("read", "states", "agreement", "report", "review export", "review import"):
        assert "TOML file" in " ".join(helps[command].split()), command


def _subparsers(parser, prefix: str = "") -> dict:
    """Every (sub)command parser by its command words."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[prefix + name] = sub
                out.update(_subparsers(sub, prefix + name + " "))
    return out


def test_an_unknown_phase_is_an_error_with_exit_2(read_archive, capsys):
    _refused(capsys, ["read", str(read_archive), "--evaluator", SIM_TOML, "--phase", "finals"],
             "unknown phase 'finals'", "requests, drafts, final")


def test_states_pairs_without_json_is_refused(read_archive, capsys):
    _refused(capsys, ["states", str(read_archive), "--evaluator", SIM_ID, "--pairs"], "--pairs", "--json")


def test_cards_validate_on_a_folder_without_cards_is_refused(tmp_path, capsys):
    """It said so with exit 1 and no ``error:``, the exit code of cards that fail validation."""
    _refused(capsys, ["cards", "validate", str(tmp_path)], "no card files found")
