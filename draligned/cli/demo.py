"""`draligned demo --out DIR`: the bundled offline demo, end to end (its own module: `draligned run` needs
none of the evaluator, CESS and report modules the demo prints from)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from draligned.cli import add_command
from draligned.cli.cess_archive import pairs_text, pool_estimates_text
from draligned.cli.evaluate import print_pair_matrix
from draligned.cli.run import guarded, print_error, print_summary, progress_bars, study_code
from draligned.demo import DEMO_PLAN, DemoResult, DemoStage, run_demo
from draligned.runner import RunProgress

_STAGE_NOTES = {
    "read": "Reading the archive with the SIMULATOR evaluator (lexical, offline; not a language model).",
    "pool": "\ndraligned demo, part 2: logged candidate-pool search (CESS) with the same simulator.",
}


def register(sub: argparse._SubParsersAction) -> None:
    d = add_command(sub, "demo")
    d.add_argument("--out", required=True, help="output directory; the archive goes to OUT/archive")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    print("draligned demo: the agent is the offline SIMULATOR (protocol 'sim'), not a language model.",
          file=sys.stderr)
    with progress_bars(console) as bars:

        def progress(event: DemoStage | RunProgress) -> None:
            if isinstance(event, DemoStage):
                console.print(_STAGE_NOTES[event.stage], markup=False, highlight=False, soft_wrap=True)
            else:
                bars(event)

        code, result = guarded(console, lambda: run_demo(Path(args.out), progress))
    return code if result is None else _print_demo(result)


def _print_demo(result: DemoResult) -> int:
    """Print what the demo did and where everything is; returns the exit code."""
    print_summary(result.study)
    archive, report_dir, reading = result.archive.root, result.report_dir, result.reading
    if result.problems:
        print("\n".join(result.problems) + f"\nerror: the archive is damaged ({len(result.problems)} problem(s)), "
              f"so it was not read and {report_dir} was not (re)written", file=sys.stderr)
        return 2
    if reading is None:
        print(f"error: {result.damaged}\nThe archive is damaged, so it was not read and {report_dir} was not "
              f"(re)written. See: draligned archive verify {archive}", file=sys.stderr)
        return 2
    print_pair_matrix(reading.cells, "final")
    print(f"\nArchive: {archive}\nReport:  {reading.report.html}\nNext:\n"
          f"  draligned archive verify {archive}\n"
          f"  draligned archive ls {archive}\n"
          f"  draligned archive stats {archive} --json\n"
          f"  draligned states {archive} --evaluator {reading.evaluator_id} --json\n"
          f"  draligned report {archive} --plan {DEMO_PLAN} --evaluator {reading.evaluator_id} "
          f"--out {report_dir} --show-sql")
    code = study_code(result.study)
    if result.pool is None:
        print_error(Console(stderr=True), str(result.pool_error))
        return code or 2
    pool, pool_archive = result.pool, result.pool.study.archive.root
    print_summary(pool.study)
    print(pool_estimates_text(pool.runs) + "\n\n" + pairs_text(pool.pairs))
    print(f"\nPool archive: {pool_archive}\nPool report:  {pool.report.html}\n"
          f"  draligned cess pairs {pool_archive}\n"
          f"  draligned cess export {pool_archive} --out trajectories.jsonl")
    return code or study_code(pool.study) or (1 if reading.summary.model_errors else 0)
