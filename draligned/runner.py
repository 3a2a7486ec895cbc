"""Run a study: expand slots, skip finished ones, run the rest concurrently, index the archive.

Resume rule: a slot is finished when one of its runs ended ``completed`` or
``budget_exhausted`` (both are outcomes of the protocol). An interrupted run (started
marker only) or a ``failed`` one is rerun as a new attempt; the old record is kept.

Two rules keep a study from starting runs that cannot help: once the study's ``max_cost_usd`` is
spent (its archived runs and the running ones counted) no new run starts, and once a model's runs
failed to connect ``retry.stop_after_connection_failures`` times in a row no new run of that model
starts. Running runs finish; the slots not started stay unstarted, so a later ``run`` resumes them.
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
from draligned.archive.store import remove_stale_temp_files
from draligned.archive.writer import RunWriter, new_record
from draligned.executors import RunSetup, executor_for
from draligned.guards import check_intact
from draligned.indexing import rebuild
from draligned.models import ModelAPI, get_model
from draligned.models.base import RETRY_LISTENER
from draligned.models.cache import CachedModel, ReplayCache
from draligned.records import FINISHED, ModelAttemptEvent, ModelCallEvent, RunRecord, Slot
from draligned.sandbox import WORKSPACE_OWNER, SandboxUnavailable, remove_stale_workspaces, require_sandbox
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
    not_started: dict[str, str] = field(default_factory=dict)
    """Slot id -> why it was not started (study cost cap reached, model unreachable); a later run resumes it."""
    spent_usd: float | None = None
    """What the study's runs in the archive cost (earlier ones included); None when no model is priced."""
    cap_usd: float | None = None
    """The study's ``max_cost_usd``, when it has one."""


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
    """The run that just ended; None in the first event and in live updates."""
    completed: int = 0
    """Runs ended ``completed`` or ``budget_exhausted`` so far."""
    failed: int = 0
    """Runs ended ``failed`` so far."""
    retrying: int = 0
    """Running runs whose current model call is waiting to retry (429, 5xx, timeout, connection error)."""
    not_started: int = 0
    """Slots left unstarted (cost cap reached, or the model unreachable)."""
    cost_usd: float | None = None
    """Cost of this invocation's runs so far (running ones included); None when no model is priced."""


ProgressCallback = Callable[[RunProgress], None]
"""Receives every RunProgress of a study run."""


def plan_resume(archive: Archive, slots: list[Slot]) -> tuple[list[Slot], dict[str, int]]:
    """(slots still to run, attempts already started per slot id)."""
    finished = {r.slot_id for r in archive.records() if r.status in FINISHED}
    attempts = Counter(r.slot_id for r in archive.started())
    return [s for s in slots if s.slot_id not in finished], dict(attempts)


def connection_failed(record: RunRecord) -> bool:
    """Whether a run failed because its model could not be reached (its last attempt a connection error)."""
    attempts = [e for e in record.events if isinstance(e, ModelAttemptEvent)]
    return record.status == "failed" and bool(attempts) and attempts[-1].attempt.error == "APIConnectionError" \
        and (record.status_reason or "").startswith("model error:")


def reached_model(record: RunRecord) -> bool:
    """Whether a run got at least one reply from its model over the network."""
    return any(isinstance(e, ModelCallEvent) and not e.cache_hit for e in record.events)


def study_cost(records: list[RunRecord], study: str) -> float:
    """What the archived runs of ``study`` cost (unpriced runs count 0)."""
    return sum(r.counters.cost_usd or 0.0 for r in records if r.slot.study == study)


async def _run_slot(study: Study, archive: Archive, slot: Slot, attempt: int, model: ModelAPI,
                    search: StudySearch, running: dict[str, RunRecord]) -> RunRecord:
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
    running[record.run_id] = record  # its counters are read live for the cost so far
    WORKSPACE_OWNER.set((archive.root, record.run_id))  # this slot's task only: the next run cleans after a kill
    writer = RunWriter(archive, record)  # the run's one writer: the executor's and the pool search's
    setup = RunSetup(writer=writer, contract=contract, model=model,
                     system_prompt=system_prompt, user_message=user_message, seed=slot.seed,
                     budget=study.spec.budget)
    sealed = await executor_for(slot.harness)(setup, search.backend_for(slot, writer)).run()
    await archive.durable()  # its record and every blob it names are on disk before the run counts as ended
    return sealed


async def run_study(study: Study, progress: ProgressCallback | None = None, verify: bool = True) -> StudyResult:
    """Run every unfinished slot of ``study`` with bounded concurrency, telling ``progress`` how far it is;
    ``verify`` False skips checking the run records' hashes first (``--no-verify``)."""
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
        return await _run_with(study, archive, search, progress, verify)
    finally:
        await search.aclose()


async def _run_with(study: Study, archive: Archive, search: StudySearch,
                    progress: ProgressCallback | None, verify: bool) -> StudyResult:
    slots = study.slots(search.sha256)
    todo, _ = plan_resume(archive, slots)  # what the checks below prepare for; planned again under the lock
    sandboxed = sorted({s.harness for s in todo if executor_for(s.harness).needs_sandbox})
    if sandboxed:
        try:
            await require_sandbox()
        except SandboxUnavailable as exc:
            raise StudyError(f"{study.path}: harnesses {', '.join(sandboxed)} run their shell in a sandbox "
                             f"and refuse to start without one (no unsandboxed fallback): {exc}") from exc
    models = {m.name: get_model(m) for m in study.spec.models if any(s.model == m.name for s in todo)}
    if study.spec.cache != "off":
        cache = ReplayCache(study.cache_root, study.spec.cache)
        models = {name: CachedModel(m, cache) for name, m in models.items()}
    for m in models.values():
        m.check_ready()  # a missing key fails this study before any run starts (and before any file is made)
    lock = _lock_archive(archive)  # also when nothing is left to do: planning reads what other runs write
    try:
        with archive.group_commit():  # archive writes on a writer thread, many files per sync
            result = await _run_locked(study, archive, search, slots, models, verify, progress)
        rebuild(archive)  # still under the run lock, so no other run's records arrive meanwhile
    finally:
        os.close(lock)
    return result


async def _run_locked(study: Study, archive: Archive, search: StudySearch, slots: list[Slot],
                      models: dict[str, ModelAPI], verify: bool, progress: ProgressCallback | None) -> StudyResult:
    """Check the run records, clean what killed runs left, plan again and run every slot still to do (only
    those of the prepared ``models``: a slot that became unfinished meanwhile waits for the next run)."""
    check_intact(archive, verify, records_only=True)  # a damaged record would pass for a finished slot
    remove_stale_temp_files(archive)
    remove_stale_workspaces(archive.root)
    todo, attempts = plan_resume(archive, slots)
    todo = [s for s in todo if s.model in models]
    result = StudyResult(archive=archive, slots=len(slots), skipped=len(slots) - len(todo))
    await _run_todo(study, archive, search, models, todo, attempts, result, progress)
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
    priced = any(m.declaration.price is not None for m in models.values())
    cap = study.spec.max_cost_usd
    earlier = study_cost(archive.records(), study.spec.name) if priced else 0.0
    running: dict[str, RunRecord] = {}
    ended: list[RunRecord] = []
    retrying: Counter[str] = Counter()
    refused: Counter[str] = Counter()  # consecutive runs per model that could not connect
    stopped: dict[str, str] = {}  # model -> why no new run of it starts

    def cost() -> float:
        return round(sum(r.counters.cost_usd or 0.0 for r in (*ended, *running.values())), 8)

    def tell(record: RunRecord | None = None) -> None:
        if progress is not None:
            progress(RunProgress(
                study=study.spec.name, total=len(todo), done=len(ended), record=record,
                completed=sum(r.status in FINISHED for r in ended), failed=sum(r.status == "failed" for r in ended),
                retrying=sum(1 for n in retrying.values() if n > 0), not_started=len(result.not_started),
                cost_usd=cost() if priced else None))

    def why_not(slot: Slot) -> str | None:
        if cap is not None and earlier + cost() >= cap:
            return f"study cost cap reached: ${earlier + cost():.4f} spent of max_cost_usd ${cap:g}"
        return stopped.get(slot.model)

    async def one(slot: Slot) -> RunRecord | None:
        async with gate:
            if (why := why_not(slot)) is not None:
                result.not_started[slot.slot_id] = why
                tell()
                return None
            key = slot.slot_id

            def listen(delta: int) -> None:
                retrying[key] += delta
                tell()
            RETRY_LISTENER.set(listen)  # this task's own context: only this run's calls tell it
            rec = await _run_slot(study, archive, slot, attempts.get(slot.slot_id, 0) + 1,
                                  models[slot.model], search, running)
            running.pop(rec.run_id, None)
            ended.append(rec)
            _count_connection(rec, slot.model, models[slot.model], refused, stopped)
        tell(rec)
        return rec

    tell(None)
    result.records = [r for r in await asyncio.gather(*(one(s) for s in todo)) if r is not None]
    result.statuses.update(r.status for r in result.records)
    result.cap_usd = cap
    result.spent_usd = round(earlier + cost(), 8) if priced else None


def _count_connection(rec: RunRecord, name: str, model: ModelAPI, refused: Counter[str],
                      stopped: dict[str, str]) -> None:
    """Count consecutive unreachable runs of a model; at its limit, stop starting its runs."""
    if reached_model(rec):
        refused[name] = 0
    elif connection_failed(rec):
        refused[name] += 1
        limit = model.declaration.retry.stop_after_connection_failures
        if refused[name] >= limit and name not in stopped:
            stopped[name] = (f"model {name!r} unreachable: {limit} consecutive runs failed to connect "
                             f"(last: {rec.status_reason})")
