"""The bundled offline demo: run the demo study with the simulated agent, read its archive with the
SIMULATOR evaluator, write its report, then run the pool-search study and its CESS pool estimates.

``run_demo`` returns everything the demo did as a DemoResult and prints nothing; the CLI's
``draligned demo`` prints it. The bundled files come from draligned.data, so the demo runs from
any working directory, from a checkout or an installed wheel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from draligned.archive import Archive, ArchiveError
from draligned.audit import WrittenReport, make_report, read_and_index
from draligned.cess.archive_runs import CessRun
from draligned.cess.pairs import PairsReport, pairs_report
from draligned.data import data_dir
from draligned.evaluator.config import load_evaluator
from draligned.evaluator.states import PairCell, pair_cells, state_rows
from draligned.evaluator.summary import ReadSummary
from draligned.indexing import verify_changed
from draligned.runner import STUDY_ERRORS, RunProgress, StudyResult
from draligned.workflow import load_cess_runs, run_study_file

DEMO_STUDY = data_dir("studies") / "demo.toml"
"""The demo study: every demo card, both arms, the three harnesses, the simulated agent."""
DEMO_POOL_STUDY = data_dir("studies") / "demo_pool.toml"
"""The pool-search demo study (CESS pool estimates per run)."""
DEMO_EVALUATOR = data_dir("evaluators") / "sim.toml"
"""The SIMULATOR evaluator (lexical, offline; not a language model)."""
DEMO_PLAN = data_dir("analysis") / "demo.toml"
"""The demo's analysis plan (also the default plan of ``draligned report``)."""

Stage = Literal["read", "pool"]
"""A demo step after the first study: reading its archive; the pool-search study."""


@dataclass(frozen=True)
class DemoStage:
    """A demo step starts (the CLI says what runs next)."""

    stage: Stage
    """Which step."""


DemoProgress = Callable[[DemoStage | RunProgress], None]
"""Receives the runner's progress of both studies and the start of each later step."""


@dataclass
class PoolDemo:
    """Part 2: the pool-search study, its CESS pool estimates and its report."""

    study: StudyResult
    """What the pool study's run did (its archive is ``study.archive``)."""
    runs: list[CessRun]
    """The pool archive's cess_runs table."""
    pairs: PairsReport
    """P/Q pair contrasts and the 2×2 intervention effects."""
    report: WrittenReport
    """The pool archive's report (its CESS section; it has no evaluator reads)."""


@dataclass
class DemoRead:
    """Part 1 after the run: the SIMULATOR evaluator's read, its pair cells and the report."""

    evaluator_id: str
    """The SIMULATOR evaluator's id."""
    summary: ReadSummary
    """What the read did."""
    cells: list[PairCell]
    """The pair cells of the evaluator's states (P arm × Q arm per pair and document)."""
    report: WrittenReport
    """The demo study's report."""


@dataclass
class DemoResult:
    """Everything one demo run did. When the archive was damaged (``problems`` or ``damaged``), nothing
    was read and no report was (re)written; when the pool study could not run, ``pool_error`` says why."""

    study: StudyResult
    """What the demo study's run did (its archive is ``study.archive``)."""
    report_dir: Path
    """Where the demo study's report goes."""
    problems: list[str] = field(default_factory=list)
    """``archive verify`` problems of the archive after the run (a rerun into a damaged directory)."""
    damaged: str | None = None
    """The archive error that stopped reading or reporting (e.g. a blob altered since the runs)."""
    reading: DemoRead | None = None
    """The read and the report, unless the archive was damaged."""
    pool: PoolDemo | None = None
    """Part 2, when it ran."""
    pool_error: str | None = None
    """Why the pool study could not run (bad input, a locked or damaged archive)."""

    @property
    def archive(self) -> Archive:
        """The demo study's archive."""
        return self.study.archive


def run_demo(out: str | Path, progress: DemoProgress | None = None) -> DemoResult:
    """Run the whole demo into ``out`` (``archive/``, ``report/``, ``pool-archive/``, ``pool-report/``).

    Raises one of STUDY_ERRORS if the demo study cannot run, StudyInterrupted on Ctrl-C.
    """
    out = Path(out)
    tell = progress or (lambda _event: None)
    result = DemoResult(study=run_study_file(DEMO_STUDY, out / "archive", progress=tell), report_dir=out / "report")
    # A rerun into an existing directory must not report over a damaged archive, whichever file was hit
    # (files unchanged since a verify found them intact are not hashed again: a rerun costs no rehash).
    result.problems = verify_changed(result.archive)
    if result.problems:
        return result
    tell(DemoStage("read"))
    evaluator = load_evaluator(DEMO_EVALUATOR)
    evaluator_id = evaluator.evaluator_id
    try:
        summary = read_and_index(result.archive, evaluator, verify=False)  # verified just above
        cells = pair_cells(result.archive, state_rows(result.archive, evaluator_id))
        report = make_report(result.archive.root, DEMO_PLAN, evaluator_id, result.report_dir)
    except ArchiveError as exc:
        result.damaged = str(exc)
        return result
    result.reading = DemoRead(evaluator_id=evaluator_id, summary=summary, cells=cells, report=report)
    tell(DemoStage("pool"))
    try:
        result.pool = _pool_demo(out, tell)
    except STUDY_ERRORS as exc:
        result.pool_error = str(exc)
    return result


def _pool_demo(out: Path, progress: DemoProgress) -> PoolDemo:
    """The pool-search study, its pool estimates and pair table, and its report (whose CESS section is
    filled from the pool archive's cess_runs)."""
    study = run_study_file(DEMO_POOL_STUDY, out / "pool-archive", progress=progress)
    runs = load_cess_runs(study.archive)
    report = make_report(study.archive.root, DEMO_PLAN, None, out / "pool-report")  # no evaluator read it
    return PoolDemo(study=study, runs=runs, pairs=pairs_report(runs), report=report)
