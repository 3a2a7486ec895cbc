"""The workflows commands share, composed from the layers below: run a study file, read an archive with an
evaluator and index it, load the CESS pool table, write a report. They print nothing: the CLI calls them
and prints their results, and the demo (draligned.demo) chains them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from draligned.analysis.plan import load_plan
from draligned.archive import Archive, ArchiveError
from draligned.cards import CardError
from draligned.cess.archive_runs import CessRun
from draligned.evaluator.config import Evaluator
from draligned.evaluator.packets import Phase
from draligned.evaluator.reading import PHASES, ReadSummary, read_archive
from draligned.harness import ContractError
from draligned.indexing import connect, ensure, rebuild
from draligned.models import ModelError
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
                   cache_dir: str | Path | None = None, progress: ProgressCallback | None = None,
                   acquisition: CacheMode | None = None, acquisition_store: str | Path | None = None) -> StudyResult:
    """Load a study (``archive``, ``cache`` and ``cache_dir`` override its fields; ``acquisition`` and
    ``acquisition_store`` its ``[search]`` store mode and directory) and run it. A store named without a mode
    is replayed read-only: another archive's store is read, never written.

    Raises one of STUDY_ERRORS, or StudyInterrupted on Ctrl-C.
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
    try:
        return asyncio.run(run_study(study, progress))
    except KeyboardInterrupt:
        interrupted = Archive(study.archive_root)
        if interrupted.root.is_dir():
            rebuild(interrupted)
        raise StudyInterrupted(interrupted.root) from None


def read_and_index(archive: Archive, evaluator: Evaluator, phases: tuple[Phase, ...] = PHASES) -> ReadSummary:
    """Read the archive with the evaluator (idempotent, resumable), then rebuild its index so that the
    reads' tables are in it; raises ArchiveError or ModelError."""
    summary = asyncio.run(read_archive(archive, evaluator, phases))
    rebuild(archive)
    return summary


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
