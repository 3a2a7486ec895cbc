"""The workflows commands share, composed from the layers below: run a study file, read an archive with an
evaluator and index it, load the CESS pool table, write a report. They print nothing: the CLI calls them
and prints their results, and the demo (draligned.demo) chains them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from draligned.analysis.plan import load_plan
from draligned.archive import Archive, ArchiveError
from draligned.cards import CardError
from draligned.cess.archive_runs import CessRun
from draligned.evaluator.batching import POLL_S, BatchView, batch_views, cancel_batches, read_archive_batch
from draligned.evaluator.config import Evaluator
from draligned.evaluator.packets import Phase
from draligned.evaluator.reading import PHASES, ReadSummary, read_archive
from draligned.harness import ContractError
from draligned.indexing import connect, ensure, rebuild
from draligned.models import ModelError
from draligned.models.batch import BatchStatus
from draligned.models.cache import CacheMode
from draligned.runner import ProgressCallback, StudyResult, run_study
from draligned.study import StudyError, load_study

STUDY_ERRORS = (StudyError, CardError, ContractError, ModelError, ArchiveError)
"""What a study run raises for bad input or a damaged or locked archive (the CLI's exit 2), not a bug."""


class StudyInterrupted(Exception):
    """Ctrl-C during a study run. The archive was indexed first, so ``ls`` and ``stats`` show the
    interrupted attempts; running the same study again resumes it."""

    def __init__(self, archive_root: Path) -> None:
        super().__init__(f"{archive_root}: study interrupted")
        self.archive_root = archive_root
        """The archive the finished runs are kept in."""


def run_study_file(path: str | Path, archive: str | Path | None = None, cache: CacheMode | None = None,
                   cache_dir: str | Path | None = None, progress: ProgressCallback | None = None) -> StudyResult:
    """Load a study (``archive``, ``cache`` and ``cache_dir`` override its fields) and run it.

    Raises one of STUDY_ERRORS, or StudyInterrupted on Ctrl-C.
    """
    study = load_study(path, archive)
    if cache:
        study.spec.cache = cache
    if cache_dir:
        study.spec.cache_dir = str(Path(cache_dir).resolve())
    try:
        return asyncio.run(run_study(study, progress))
    except KeyboardInterrupt:
        interrupted = Archive(study.archive_root)
        if interrupted.root.is_dir():
            rebuild(interrupted)
        raise StudyInterrupted(interrupted.root) from None


def read_and_index(archive: Archive, evaluator: Evaluator, phases: tuple[Phase, ...] = PHASES, batch: bool = False,
                   poll_s: float = POLL_S, seen: Callable[[BatchStatus], None] | None = None) -> ReadSummary:
    """Read the archive with the evaluator (idempotent, resumable), synchronously or (``batch``) as provider
    batch jobs polled every ``poll_s`` seconds (``seen`` gets each status), then rebuild its index so that the
    reads' tables are in it; raises ArchiveError, EvaluatorError or ModelError."""
    reading = (read_archive_batch(archive, evaluator, phases, poll_s=poll_s, seen=seen) if batch
               else read_archive(archive, evaluator, phases))
    summary = asyncio.run(reading)
    rebuild(archive)
    return summary


def batch_status(archive: Archive, evaluator: Evaluator) -> list[BatchView]:
    """Where each of the evaluator's batch jobs stands (``read --batch --status``); open ones asked live."""
    return asyncio.run(batch_views(archive, evaluator))


def cancel_batch_jobs(archive: Archive, evaluator: Evaluator) -> list[BatchStatus]:
    """Cancel the evaluator's open batch jobs (``read --batch --cancel``); the next ``read --batch`` ingests them."""
    return asyncio.run(cancel_batches(archive, evaluator))


def load_cess_runs(archive: Archive) -> list[CessRun]:
    """The archive's ``cess_runs`` index table (the index is rebuilt first if missing)."""
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


def make_report(archive: str | Path, plan_path: str | Path, evaluator: str, out: str | Path) -> WrittenReport:
    """Build the plan's report over the archive for one evaluator's states and write it under ``out``;
    raises PlanError or ArchiveError."""
    # Imported here so that other commands do not pay for loading matplotlib.
    from draligned.analysis.build import build_report
    from draligned.analysis.render import write_report

    loaded = load_plan(plan_path)
    ensure(Archive(archive))  # the report reads the index; an archive without one gets it built
    report = build_report(archive, loaded, evaluator)
    paths = write_report(report, loaded.plan, out)
    return WrittenReport(html=paths["html"], markdown=paths["md"], tables=paths["tables"],
                         queries=list(dict.fromkeys(report.queries)))
