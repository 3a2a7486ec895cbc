"""`draligned run STUDY.toml`: the study's progress bars and its summary (also drawn by `draligned demo`)."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from draligned.cli import add_command
from draligned.models.cache import CACHE_MODES
from draligned.runner import STUDY_ERRORS, ProgressCallback, RunProgress, StudyResult
from draligned.shards import Shard, parse_shard
from draligned.study import StudyError
from draligned.workflow import StudyInterrupted, run_study_file

T = TypeVar("T")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "run")
    p.add_argument("study", help="study TOML file")
    p.add_argument("--archive", help="archive root (overrides the study's `archive`)")
    p.add_argument("--cache", choices=CACHE_MODES, help="replay cache mode (overrides the study's `cache`)")
    p.add_argument("--cache-dir", help="replay cache directory (default ARCHIVE/cache); e.g. an old "
                                       "archive's cache to replay it with --cache read-only")
    p.add_argument("--no-verify", action="store_true",
                   help="do not check the archive's run records first (a damaged record would pass for a "
                        "finished slot)")
    p.add_argument("--acquisition", choices=CACHE_MODES,
                   help="web backends: acquisition store mode (overrides [search] cache)")
    p.add_argument("--acquisition-store", help="web backends: the acquisition store to use (default "
                                               "ARCHIVE/acquisition); another archive's store is replayed "
                                               "read-only unless --acquisition says otherwise")
    p.add_argument("--workers", type=_workers, default=None,
                   help="worker processes running the slots, each with its own event loop (default "
                        "$DRALIGNED_WORKERS, else the number of cores; 1: all on one event loop)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--shard", type=_shard, metavar="K/N",
                       help="run only shard K of N (slots split by the sha256 of their id); merge the shard "
                            "archives with 'draligned archive merge'")
    where.add_argument("--ray", metavar="ADDRESS", help="run each slot as a Ray task on the cluster at ADDRESS "
                                                        "('local': start one here); needs draligned[ray]")
    p.set_defaults(func=cmd_run)


def _workers(text: str) -> int:
    """``--workers``: a whole number from 1 to 256."""
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 256 (got {text!r})")
    return int(text)


def default_workers() -> int:
    """``$DRALIGNED_WORKERS`` when set (a bad value is refused), else the number of cores."""
    env = os.environ.get("DRALIGNED_WORKERS")
    if env is None:
        return os.cpu_count() or 1
    try:
        return _workers(env)
    except argparse.ArgumentTypeError as exc:
        raise StudyError(f"environment variable DRALIGNED_WORKERS: {exc}") from None


def _shard(text: str) -> Shard:
    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@contextmanager
def progress_bars(console: Console) -> Iterator[ProgressCallback]:
    """A callback drawing one rich progress bar per study from the runner's events (on a terminal only),
    with the live counts of completed, failed and retrying runs and the cost so far when priced."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[counts]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        bars: dict[str, TaskID] = {}

        def draw(event: RunProgress) -> None:
            if event.study not in bars:
                bars[event.study] = progress.add_task(f"{event.study}: runs", total=event.total, counts="")
            progress.update(bars[event.study], completed=event.done, counts=live_counts(event))

        yield draw


def live_counts(event: RunProgress) -> str:
    """``completed 3 · failed 1 · retrying 2 · not started 4 · $0.0123`` for the progress line."""
    parts = [f"completed {event.completed}", f"failed {event.failed}", f"retrying {event.retrying}"]
    parts += [f"not started {event.not_started}"] if event.not_started else []
    parts += [f"${event.cost_usd:.4f}"] if event.cost_usd is not None else []
    return " · ".join(parts)


def guarded(console: Console, work: Callable[[], T]) -> tuple[int, T | None]:
    """Run a study workflow; its input errors and Ctrl-C become an exit code and a message, not a traceback."""
    try:
        return 0, work()
    except StudyInterrupted as exc:
        how = " (SIGTERM)" if exc.signum == signal.SIGTERM else ""
        console.print(f"interrupted{how}: finished runs are kept in {escape(str(exc.archive_root))}; run the same "
                      f"command again to resume (interrupted runs are rerun as new attempts)", soft_wrap=True)
        return 128 + exc.signum, None  # 130 Ctrl-C, 143 SIGTERM
    except STUDY_ERRORS as exc:
        print_error(console, str(exc))
        return 2, None


def print_error(console: Console, message: str) -> None:
    # Not wrapped (paths stay on one line, greppable) and not read as markup ("['p']" is text).
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)


def study_code(result: StudyResult) -> int:
    """1 when some runs failed or some slots were left unstarted (cost cap, unreachable model), else 0."""
    return 1 if result.statuses.get("failed", 0) or result.not_started else 0


def print_summary(result: StudyResult) -> None:
    table = Table(title=f"Study summary ({result.archive.root})")
    table.add_column("slots", justify="right")
    table.add_column("skipped (already finished)", justify="right")
    for status in ("completed", "budget_exhausted", "failed"):
        table.add_column(status, justify="right")
    table.add_row(str(result.slots), str(result.skipped),
                  *(str(result.statuses.get(s, 0)) for s in ("completed", "budget_exhausted", "failed")))
    Console().print(table)
    for rec in result.runs:
        if rec.status == "failed":
            Console().print(f"[red]failed[/red] {rec.run_id}: {escape(rec.status_reason or '')}", soft_wrap=True)
    if result.spent_usd is not None:
        cap = f" of max_cost_usd ${result.cap_usd:g}" if result.cap_usd is not None else ""
        print(f"spent: ${result.spent_usd:.4f}{cap} (this study's runs in the archive)")
    reasons = sorted(set(result.not_started.values()))
    for why in reasons:
        n = sum(1 for r in result.not_started.values() if r == why)
        print(f"not started: {n} slot(s): {why}; run the same command again to resume them")


def cmd_run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    with progress_bars(console) as bars:
        code, result = guarded(console, lambda: run_study_file(
            Path(args.study), args.archive, args.cache, args.cache_dir, bars, verify=not args.no_verify,
            acquisition=args.acquisition, acquisition_store=args.acquisition_store,
            workers=args.workers or default_workers(), part=args.shard, ray=args.ray))
    if result is None:
        return code
    print_summary(result)
    return study_code(result)
