"""Run a study: expand slots, skip finished ones, run the rest concurrently, index the archive.

Resume rule: a slot is finished when one of its runs ended ``completed`` or
``budget_exhausted`` (both are outcomes of the protocol). An interrupted run (started
marker only) or a ``failed`` one is rerun as a new attempt; the old record is kept.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from draligned.archive import Archive
from draligned.archive.writer import RunWriter, new_record
from draligned.executors import RunSetup, executor_for
from draligned.indexing import rebuild
from draligned.models import ModelAPI, get_model
from draligned.models.cache import CachedModel, ReplayCache
from draligned.records import FINISHED, RunRecord, Slot
from draligned.sandbox import SandboxUnavailable, require_sandbox
from draligned.study import Study, StudyError
from draligned.tools.pool_search import StudySearch, open_search
from draligned.tools.web import WebConfigError

LOCK_NAME = ".run.lock"


@dataclass
class StudyResult:
    """What a study run did."""

    archive: Archive
    slots: int
    skipped: int
    statuses: Counter = field(default_factory=Counter)
    records: list[RunRecord] = field(default_factory=list)


@dataclass(frozen=True)
class RunProgress:
    """How far a study's runs are: sent once before the first run ends (``done`` 0) and after each run, so
    a caller can draw a progress bar (the CLI does) without the runner drawing anything."""

    study: str
    """The study's name."""
    total: int
    """Runs this invocation starts (finished slots are skipped, not counted)."""
    done: int
    """Runs ended so far."""
    record: RunRecord | None = None
    """The run that just ended; None in the first event."""


ProgressCallback = Callable[[RunProgress], None]
"""Receives every RunProgress of a study run."""


def plan_resume(archive: Archive, slots: list[Slot]) -> tuple[list[Slot], dict[str, int]]:
    """(slots still to run, attempts already started per slot id)."""
    finished = {r.slot_id for r in archive.records() if r.status in FINISHED}
    attempts = Counter(r.slot_id for r in archive.started())
    return [s for s in slots if s.slot_id not in finished], dict(attempts)


async def _run_slot(study: Study, archive: Archive, slot: Slot, attempt: int, model: ModelAPI,
                    search: StudySearch) -> RunRecord:
    lc = next(c for c in study.cards if c.card.card_id == slot.card_id)
    contract = study.contracts[slot.harness]
    decl = model.declaration
    system_prompt = contract.contract.system_prompt
    user_message = lc.card.render(slot.arm).text
    record = new_record(
        run_id="r" + secrets.token_hex(8), attempt=attempt, slot_id=slot.slot_id, slot=slot,
        study_sha256=study.sha256, card_path=str(lc.path), protocol=decl.protocol,
        requested_model=decl.model, base_url=decl.base_url,
        system_prompt_blob=archive.put_blob(system_prompt),
        user_message_blob=archive.put_blob(user_message),
        tools_blob=archive.put_json_blob([t.model_dump(mode="json") for t in contract.contract.tools]),
    )
    writer = RunWriter(archive, record)  # the run's one writer: the executor's and the pool search's
    setup = RunSetup(writer=writer, contract=contract, model=model,
                     system_prompt=system_prompt, user_message=user_message, seed=slot.seed,
                     budget=study.spec.budget)
    return await executor_for(slot.harness)(setup, search.backend_for(slot, writer)).run()


async def run_study(study: Study, progress: ProgressCallback | None = None) -> StudyResult:
    """Run every unfinished slot of ``study`` with bounded concurrency, telling ``progress`` how far it is."""
    archive = Archive(study.archive_root)
    spec = study.spec.search
    try:
        search = open_search(spec, study.corpus_path, study.pool_paths, study.acquisition_root)
    except ValueError as exc:  # CorpusError, PoolFileError, unscored pools, WebConfigError (missing key, SDK)
        where = "corpus" if spec.backend == "corpus" else "search.pools"
        if isinstance(exc, WebConfigError):
            where = f"search.{exc.field}"
        raise StudyError(f"{study.path}: field {where}: {exc}") from exc
    try:
        return await _run_with(study, archive, search, progress)
    finally:
        await search.aclose()


async def _run_with(study: Study, archive: Archive, search: StudySearch,
                    progress: ProgressCallback | None) -> StudyResult:
    slots = study.slots(search.sha256)
    todo, attempts = plan_resume(archive, slots)
    sandboxed = sorted({s.harness for s in todo if executor_for(s.harness).needs_sandbox})
    if sandboxed:
        try:
            await require_sandbox()
        except SandboxUnavailable as exc:
            raise StudyError(f"{study.path}: harnesses {', '.join(sandboxed)} run their shell in a sandbox "
                             f"and refuse to start without one (no unsandboxed fallback): {exc}") from exc
    result = StudyResult(archive=archive, slots=len(slots), skipped=len(slots) - len(todo))
    models = {m.name: get_model(m) for m in study.spec.models if any(s.model == m.name for s in todo)}
    if study.spec.cache != "off":
        cache = ReplayCache(study.cache_root, study.spec.cache)
        models = {name: CachedModel(m, cache) for name, m in models.items()}
    for m in models.values():
        m.check_ready()  # a missing key fails this study before any run starts
    lock = _lock_archive(archive) if todo else None
    try:
        if lock is not None:  # plan again under the lock: another run may have finished slots meanwhile
            todo, attempts = plan_resume(archive, slots)
            result.skipped = len(slots) - len(todo)
        await _run_todo(study, archive, search, models, todo, attempts, result, progress)
    finally:
        if lock is not None:
            os.close(lock)
    rebuild(archive)
    return result


def _lock_archive(archive: Archive) -> int:
    """An exclusive lock on the archive for one ``draligned run`` at a time (released when the fd
    closes or the process dies): two runs at once would both run, and archive, the same slots."""
    try:
        archive.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(archive.root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # a file in the way, no permission, read-only disk
        raise StudyError(f"{archive.root}: cannot use it as the archive directory: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StudyError(f"{archive.root}: another 'draligned run' is writing to this archive; let it finish "
                         f"(running the same study twice at once would run its slots twice)") from None
    return fd


async def _run_todo(study: Study, archive: Archive, search: StudySearch, models: dict[str, ModelAPI],
                    todo: list[Slot], attempts: dict[str, int], result: StudyResult,
                    progress: ProgressCallback | None) -> None:
    """Archive the study's provenance files and run the slots still to do, with bounded concurrency."""
    if todo:
        # Provenance: the exact study, card and contract bytes every run names by hash.
        archive.put_blob(study.path.read_bytes())
        for lc in study.cards:
            if archive.put_blob(Path(lc.path).read_bytes()) != lc.file_sha256:
                raise StudyError(f"{lc.path}: card file changed while the study was starting")
        for c in study.contracts.values():
            archive.put_blob(c.raw)
    gate = asyncio.Semaphore(study.spec.concurrency)
    done = 0

    def tell(record: RunRecord | None) -> None:
        if progress is not None:
            progress(RunProgress(study=study.spec.name, total=len(todo), done=done, record=record))

    async def one(slot: Slot) -> RunRecord:
        nonlocal done
        async with gate:
            rec = await _run_slot(study, archive, slot, attempts.get(slot.slot_id, 0) + 1,
                                  models[slot.model], search)
        done += 1
        tell(rec)
        return rec

    tell(None)
    result.records = list(await asyncio.gather(*(one(s) for s in todo)))
    result.statuses.update(r.status for r in result.records)
