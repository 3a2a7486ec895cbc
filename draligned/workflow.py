"""The workflows commands share, composed from the layers below: run a study file, load the CESS pool table,
show or cancel batch reads (reading an archive and writing its report: :mod:`draligned.audit`). They print
nothing: the CLI calls them and prints their results, and the demo (draligned.demo) chains them.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from draligned.archive import Archive
from draligned.cess.archive_runs import CessRun
from draligned.evaluator.batching import BatchView, batch_views, cancel_batches
from draligned.evaluator.config import Evaluator
from draligned.guards import check_intact
from draligned.indexing import connect, rebuild
from draligned.models.batch import BatchStatus
from draligned.models.cache import CacheMode
from draligned.runner import ProgressCallback, StudyResult, run_study
from draligned.shards import StudyPart
from draligned.study import StudyError, load_study
from draligned.workers import in_workers, run_loop


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

    Raises one of draligned.runner.STUDY_ERRORS, or StudyInterrupted on Ctrl-C or SIGTERM.
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
