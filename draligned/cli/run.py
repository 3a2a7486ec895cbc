"""`draligned run STUDY.toml` and `draligned demo --out DIR`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from draligned.archive import Archive, ArchiveError
from draligned.cards import CardError
from draligned.cli.evaluate import print_pair_matrix, run_read
from draligned.cli.report import DEMO_PLAN, make_report
from draligned.evaluator.config import load_evaluator
from draligned.evaluator.states import pair_cells, state_rows
from draligned.harness import ContractError
from draligned.indexing import rebuild, verify
from draligned.models import ModelError
from draligned.models.cache import CACHE_MODES
from draligned.runner import StudyResult, run_study
from draligned.study import StudyError, load_study

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_STUDY = REPO_ROOT / "studies" / "demo.toml"
DEMO_EVALUATOR = REPO_ROOT / "evaluators" / "sim.toml"
DEMO_POOL_STUDY = REPO_ROOT / "studies" / "demo_pool.toml"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a study (resumes: finished slots are skipped)")
    p.add_argument("study", help="study TOML file")
    p.add_argument("--archive", help="archive root (overrides the study's `archive`)")
    p.add_argument("--cache", choices=CACHE_MODES, help="replay cache mode (overrides the study's `cache`)")
    p.add_argument("--cache-dir", help="replay cache directory (default ARCHIVE/cache); e.g. an old "
                                       "archive's cache to replay it with --cache read-only")
    p.set_defaults(func=cmd_run)
    d = sub.add_parser("demo", help="run the bundled offline demo study with the simulated agent")
    d.add_argument("--out", required=True, help="output directory; the archive goes to OUT/archive")
    d.set_defaults(func=cmd_demo)


def _execute(study_path: Path, archive: str | Path | None, cache: str | None = None,
             cache_dir: str | None = None) -> tuple[int, StudyResult | None]:
    console = Console(stderr=True)
    try:
        study = load_study(study_path, archive)
        if cache:
            study.spec.cache = cache
        if cache_dir:
            study.spec.cache_dir = str(Path(cache_dir).resolve())
        try:
            result = asyncio.run(run_study(study, show_progress=console.is_terminal))
        except KeyboardInterrupt:
            archive = Archive(study.archive_root)
            if archive.root.is_dir():
                rebuild(archive)  # so ls/stats show the interrupted attempts
            console.print(f"interrupted: finished runs are kept in {escape(str(archive.root))}; run the same "
                          f"command again to resume (interrupted runs are rerun as new attempts)", soft_wrap=True)
            return 130, None
    except (StudyError, CardError, ContractError, ModelError, ArchiveError) as exc:
        # Not wrapped (paths stay on one line, greppable) and not read as markup ("['p']" is text).
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2, None
    _summary(result)
    failed = result.statuses.get("failed", 0)
    return (1 if failed else 0), result


def _summary(result: StudyResult) -> None:
    table = Table(title=f"Study summary ({result.archive.root})")
    table.add_column("slots", justify="right")
    table.add_column("skipped (already finished)", justify="right")
    for status in ("completed", "budget_exhausted", "failed"):
        table.add_column(status, justify="right")
    table.add_row(str(result.slots), str(result.skipped),
                  *(str(result.statuses.get(s, 0)) for s in ("completed", "budget_exhausted", "failed")))
    Console().print(table)
    for rec in result.records:
        if rec.status == "failed":
            Console().print(f"[red]failed[/red] {rec.run_id}: {rec.status_reason}")


def cmd_run(args: argparse.Namespace) -> int:
    code, _ = _execute(Path(args.study), args.archive, args.cache, args.cache_dir)
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    archive = out / "archive"
    print("draligned demo: the agent is the offline SIMULATOR (protocol 'sim'), not a language model.",
          file=sys.stderr)
    code, result = _execute(DEMO_STUDY, archive)
    if result is None:
        return code
    # A rerun into an existing directory must not report over a damaged archive, whichever file was hit.
    if problems := verify(result.archive):
        print("\n".join(problems) + f"\nerror: the archive is damaged ({len(problems)} problem(s)), so it was "
              f"not read and {out / 'report'} was not (re)written", file=sys.stderr)
        return 2
    print("Reading the archive with the SIMULATOR evaluator (lexical, offline; not a language model).",
          file=sys.stderr)
    try:
        summary = run_read(result.archive, DEMO_EVALUATOR)
        evaluator_id = load_evaluator(DEMO_EVALUATOR).evaluator_id
        print_pair_matrix(pair_cells(result.archive, state_rows(result.archive, evaluator_id)), "final")
        html = make_report(archive, DEMO_PLAN, evaluator_id, out / "report")
    except ArchiveError as exc:  # e.g. a blob altered since the runs: say so, never a traceback
        print(f"error: {exc}\nThe archive is damaged, so it was not read and {out / 'report'} was not "
              f"(re)written. See: draligned archive verify {archive}", file=sys.stderr)
        return 2
    print(f"\nArchive: {archive}\nReport:  {html}\nNext:\n"
          f"  draligned archive verify {archive}\n"
          f"  draligned archive ls {archive}\n"
          f"  draligned archive stats {archive} --json\n"
          f"  draligned states {archive} --evaluator {evaluator_id} --json\n"
          f"  draligned report {archive} --plan {DEMO_PLAN} --evaluator {evaluator_id} "
          f"--out {out / 'report'} --show-sql")
    pool_code = _demo_pool(out / "pool-archive", out / "pool-report", evaluator_id)
    return code or pool_code or (1 if summary.model_errors else 0)


def _demo_pool(archive: Path, report_dir: Path, evaluator_id: str) -> int:
    """The pool-search demo: CESS pool estimates per arm, the P/Q pair table, and its report (whose
    CESS section is filled from the pool archive's cess_runs; it has no evaluator reads)."""
    from draligned.cess.pairs import pairs_report
    from draligned.cli.cess_archive import load_cess_runs, pairs_text, pool_estimates_text

    print("\ndraligned demo, part 2: logged candidate-pool search (CESS) with the same simulator.",
          file=sys.stderr)
    code, result = _execute(DEMO_POOL_STUDY, archive)
    if result is None:
        return code
    runs = load_cess_runs(result.archive)
    print(pool_estimates_text(runs) + "\n\n" + pairs_text(pairs_report(runs)))
    html = make_report(archive, DEMO_PLAN, evaluator_id, report_dir)
    print(f"\nPool archive: {archive}\nPool report:  {html}\n  draligned cess pairs {archive}\n"
          f"  draligned cess export {archive} --out trajectories.jsonl")
    return code
