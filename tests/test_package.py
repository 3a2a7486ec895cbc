"""The installable package's command-line surface: progress through a callback, `--version`, and
commands that write nothing where they were not asked to."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from draligned.cli import COMMANDS, build_parser, main
from draligned.runner import RunProgress, run_study
from draligned.study import load_study
from tests.study_helpers import REPO, write_study


def test_run_study_reports_progress_through_the_callback(tmp_path: Path) -> None:
    events: list[RunProgress] = []
    path = write_study(tmp_path, ["travel_budget_en.json"], seeds=2)
    result = asyncio.run(run_study(load_study(path), events.append))
    assert [(e.study, e.total, e.done) for e in events] == [("t", 4, n) for n in range(5)]
    assert events[0].run is None
    assert sorted(e.run.run_id for e in events[1:]) == sorted(r.run_id for r in result.runs)
    events.clear()
    asyncio.run(run_study(load_study(path), events.append))  # resumed: nothing left to run
    assert [(e.total, e.done, e.run) for e in events] == [(0, 0, None)]


def test_rich_is_drawn_only_by_the_cli() -> None:
    """The library reports through results and callbacks; only draligned/cli renders with rich."""
    users = []
    for path in (REPO / "draligned").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "rich" or n.startswith("rich.") for n in names):
                users.append(path.relative_to(REPO))
    assert users and all(p.parts[:2] == ("draligned", "cli") for p in users), users


def test_the_lazy_parser_shows_every_command_as_the_full_one_does() -> None:
    """With only one command's module loaded, the top-level help (and so an unknown-command error) is the
    same as with every module: each command is in COMMANDS with the help its module registers."""
    assert build_parser([]).format_help() == build_parser().format_help()
    for command in COMMANDS:
        assert build_parser([command]).format_help() == build_parser().format_help(), command


def test_a_command_imports_only_its_own_cli_module() -> None:
    """A command-line process imports the module of its command, not every command's (start-up time)."""
    probe = ("import sys\nfrom draligned.cli import main\ntry:\n    main(['sandbox', 'run', '--help'])\n"
             "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.startswith('draligned.cli.')), "
             "[m for m in ('duckdb', 'draligned.runner', 'draligned.evaluator') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO).stdout
    assert out.startswith("usage: draligned sandbox run ")
    assert out.splitlines()[-1] == "['draligned.cli.sandbox'] []"


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"draligned {version('draligned')}\n"


def test_cards_schema_prints_and_writes_nothing_unasked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["cards", "schema"]) == 0
    assert capsys.readouterr().out == (REPO / "factor_cards" / "schema.json").read_text(encoding="utf-8")
    assert os.listdir(tmp_path) == []


def test_output_piped_into_a_reader_that_stopped_is_quiet_exit_0() -> None:
    read, write = os.pipe()
    os.close(read)  # `draligned cards schema | head -c 0`: the reader is gone before the first write
    try:
        done = subprocess.run([sys.executable, "-m", "draligned.cli", "cards", "schema"], stdout=write,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, b"")


def test_a_broken_pipe_inside_a_command_is_a_fault_not_exit_0(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A run whose sandbox or model server pipe broke once ended as `| head` does: exit 0, nothing said.
    def broken(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("draligned.workflow.run_study", broken)
    with pytest.raises(BrokenPipeError):
        main(["run", str(write_study(tmp_path, ["travel_budget_en.json"]))])


def test_reader_gone_tells_a_closed_pipe_from_an_open_one_and_a_file(tmp_path: Path) -> None:
    from draligned.cli import reader_gone

    read, write = os.pipe()
    try:
        assert not reader_gone(write)
        os.close(read)
        assert reader_gone(write)
    finally:
        os.close(write)
    with open(tmp_path / "out", "wb") as out:
        assert not reader_gone(out.fileno())
