"""The workflows commands share, composed from the layers below: run a study file, read an archive with an
evaluator and index it, load the CESS pool table, write a report. They print nothing: the CLI calls them
and prints their results, and the demo (draligned.demo) chains them.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from draligned.archive import Archive, ArchiveError
from draligned.archive.fingerprint import code_fingerprint, fingerprint, holds, remember
from draligned.cards import CardError
from draligned.cess.archive_runs import CessRun
from draligned.evaluator.batching import POLL_S, BatchView, batch_views, cancel_batches, read_archive_batch
from draligned.evaluator.config import Evaluator
from draligned.evaluator.packets import Phase
from draligned.evaluator.reading import PHASES, ReadSummary, read_archive
from draligned.guards import check_intact, default_reader, open_archive, report_plan, require_reader
from draligned.harness import ContractError
from draligned.hashing import sha256_json
from draligned.indexing import connect, ensure, index_state, rebuild, refresh
from draligned.models import ModelError
from draligned.models.batch import BatchStatus
from draligned.models.cache import CacheMode
from draligned.runner import ProgressCallback, StudyResult, run_study
from draligned.shards import StudyPart
from draligned.study import StudyError, load_study
from draligned.workers import in_workers, run_loop

STUDY_ERRORS = (StudyError, CardError, ContractError, ModelError, ArchiveError)
"""What a study run raises for bad input or a damaged or locked archive (the CLI's exit 2), not a bug."""


class StudyInterrupted(Exception):
    """Ctrl-C (or SIGTERM, handled the same way) during a study run. The archive was indexed first, so
    ``ls`` and ``stats`` show the interrupted attempts; running the same study again resumes it."""

    def __init__(self, archive_root: Path, signum: int = signal.SIGINT) -> None:
        super().__init__(f"{archive_root}: study interrupted")
        self.archive_root = archive_root
        """The archive the finished runs are kept in."""
        self.signum = signum
        """The signal that stopped it (SIGINT or SIGTERM); the CLI exits with 128 + it."""


@contextmanager
def _sigterm_as_interrupt() -> Iterator[list[int]]:
    """While the block runs, SIGTERM interrupts like Ctrl-C (asyncio cancels the runs, whose cleanup removes
    their workspaces); yields a list that holds SIGTERM once one arrived."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield seen
        return

    def forward(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        on_ctrl_c = signal.getsignal(signal.SIGINT)  # asyncio's own handler while asyncio.run runs
        if callable(on_ctrl_c) and on_ctrl_c is not signal.default_int_handler:
            on_ctrl_c(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job) or Python's default: interrupt as Ctrl-C would
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_study_file(path: str | Path, archive: str | Path | None = None, cache: CacheMode | None = None,
                   cache_dir: str | Path | None = None, progress: ProgressCallback | None = None,
                   verify: bool = True, acquisition: CacheMode | None = None,
                   acquisition_store: str | Path | None = None, workers: int = 1,
                   part: StudyPart | None = None, ray: str | None = None) -> StudyResult:
    """Load a study (``archive``, ``cache`` and ``cache_dir`` override its fields; ``acquisition`` and
    ``acquisition_store`` its ``[search]`` store mode and directory) and run it (``verify`` False skips
    checking the archive's run records first). A store named without a mode is replayed read-only: another
    archive's store is read, never written. ``workers`` above 1 runs the slots in that many worker processes
    (draligned.workers); ``part`` runs only its slots (``--shard K/N``); ``ray`` (an address or ``local``) runs
    them as Ray tasks (draligned.distributed.ray_run).

    Raises one of STUDY_ERRORS, or StudyInterrupted on Ctrl-C or SIGTERM.
    """
    study = load_study(path, archive)
    if cache:
        study.spec.cache = cache
    if cache_dir:
        study.spec.cache_dir = str(Path(cache_dir).resolve())
    if (acquisition or acquisition_store) and not study.spec.search.is_web:
        raise StudyError(f"{study.path}: field search.backend: --acquisition and --acquisition-store apply to the "
                         f"web backends only, not {study.spec.search.backend!r}")
    if acquisition_store:
        study.spec.search.store_dir = str(Path(acquisition_store).resolve())
        study.spec.search.cache = acquisition or "read-only"
    elif acquisition:
        study.spec.search.cache = acquisition
    with _sigterm_as_interrupt() as terminated:
        try:
            if ray is not None:
                from draligned.distributed.ray_run import run_study_ray  # Ray is imported only when asked for

                return run_study_ray(study, ray, progress, verify)
            return run_loop(run_study(study, progress, verify, in_workers(workers), part))
        except KeyboardInterrupt:
            interrupted = Archive(study.archive_root)
            if interrupted.root.is_dir():
                rebuild(interrupted)
            raise StudyInterrupted(interrupted.root, terminated[0] if terminated else signal.SIGINT) from None


def read_and_index(archive: Archive, evaluator: Evaluator, phases: tuple[Phase, ...] = PHASES, verify: bool = True,
                   batch: bool = False, poll_s: float = POLL_S,
                   seen: Callable[[BatchStatus], None] | None = None) -> ReadSummary:
    """Check the archive's hashes (unless ``verify`` is False), read it with the evaluator (idempotent,
    resumable), synchronously or (``batch``) as provider batch jobs polled every ``poll_s`` seconds (``seen``
    gets each status), then refresh its index so that the reads' tables are in it (rebuilt when the read wrote
    any file); raises ArchiveError, EvaluatorError or ModelError.

    A synchronous read that left nothing to read is remembered at the archive's fingerprint: while no file
    changes (no new run, no read added or lost, no other evaluator), the next one answers from that mark
    without building a packet."""
    files = fingerprint(archive)
    check_intact(archive, verify, files=files)
    key = f"read:{evaluator.evaluator_id}"
    facts = {"evaluator": sha256_json(evaluator.snapshot()), "phases": list(phases)}
    if not batch and (done := holds(archive, key, files, **facts)) is not None:
        refresh(archive, files)
        return ReadSummary.model_validate(done["summary"])
    runs = fingerprint(archive, "runs")
    reading = (read_archive_batch(archive, evaluator, phases, poll_s=poll_s, seen=seen) if batch
               else read_archive(archive, evaluator, phases))
    summary = asyncio.run(reading)
    files = fingerprint(archive)
    refresh(archive, files)  # rebuilt unless nothing was written (a re-read of other phases)
    settled = not (summary.model_errors or summary.lines_failed or summary.in_batch)
    if not batch and settled and fingerprint(archive, "runs") == runs:  # every run there is was read
        done_now = ReadSummary(packets=summary.packets, blocked=summary.blocked,
                               already_read=summary.packets - summary.blocked)
        remember(archive, key, files, summary=done_now.model_dump(), **facts)
    return summary


def batch_status(archive: Archive, evaluator: Evaluator) -> list[BatchView]:
    """Where each of the evaluator's batch jobs stands (``read --batch --status``); open ones asked live."""
    return asyncio.run(batch_views(archive, evaluator))


def cancel_batch_jobs(archive: Archive, evaluator: Evaluator) -> list[BatchStatus]:
    """Cancel the evaluator's open batch jobs (``read --batch --cancel``); the next ``read --batch`` ingests them."""
    return asyncio.run(cancel_batches(archive, evaluator))


def load_cess_runs(archive: Archive, verify: bool = True) -> list[CessRun]:
    """The archive's ``cess_runs`` index table (the index is rebuilt first if missing), after checking the
    archive's hashes unless ``verify`` is False."""
    check_intact(archive, verify)
    con = connect(archive)
    try:
        cursor = con.execute("SELECT * FROM cess_runs ORDER BY run_id")
        names = [d[0] for d in cursor.description]
        return [CessRun(**dict(zip(names, row, strict=True))) for row in cursor.fetchall()]
    finally:
        con.close()


@dataclass(frozen=True)
class WrittenReport:
    """Where a report was written, and the queries it ran."""

    html: Path
    """The self-contained report.html."""
    markdown: Path
    """report.md."""
    tables: Path
    """The directory of every table as CSV and Parquet."""
    queries: list[str]
    """Every query the report ran, in order, each once."""
    notes: list[str] = field(default_factory=list)
    """What was chosen for the caller (a default plan or evaluator, a skipped check), to be shown."""


def make_report(archive: str | Path, plan_path: str | Path | None, evaluator: str | None, out: str | Path,
                verify: bool = True) -> WrittenReport:
    """Build the plan's report over the archive for one evaluator's states and write it under ``out``.

    Without a plan, a starter plan over the archive's own studies is used; without an evaluator, the one
    that has read the archive (or none); an evaluator is an id or its TOML file and must have read the
    archive. The archive's hashes are checked first unless ``verify`` is False (the report records it).
    Raises PlanError, EvaluatorError or ArchiveError.
    """
    from draligned.analysis.kept import kept_queries, record_inputs

    opened = open_archive(archive)
    files = fingerprint(opened)
    loaded, plan_note = report_plan(opened, plan_path, files)
    evaluator_id = default_reader(opened) if evaluator is None else require_reader(opened, evaluator)
    check_intact(opened, verify, files=files)
    ensure(opened)  # the report reads the index; an archive without one gets it built
    out = Path(out)
    inputs = sha256_json({"files": files, "index": index_state(opened, files), "evaluator": evaluator_id,
                          "plan": loaded.plan.model_dump(mode="json"), "verified": verify,
                          "code": code_fingerprint()})
    queries = kept_queries(out, inputs)
    if queries is None:
        # Imported here so that other commands, and a kept report, do not pay for loading matplotlib.
        from draligned.analysis.build import build_report
        from draligned.analysis.render import write_report

        report = build_report(opened.root, loaded, evaluator_id, verified=verify)
        write_report(report, loaded.plan, out)
        queries = list(dict.fromkeys(report.queries))
        record_inputs(out, inputs, queries)
    notes = [plan_note] if plan_note else []
    if evaluator is None:
        notes.append(f"no --evaluator given: using {evaluator_id}")
    if not verify:
        notes.append("--no-verify: the archive's hashes were not checked (the report's manifest says so)")
    return WrittenReport(html=out / "report.html", markdown=out / "report.md", tables=out / "tables",
                         queries=queries, notes=notes)
