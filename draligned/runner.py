"""Run a study: expand slots, skip finished ones, run the rest concurrently, index the archive.

Resume rule: a slot is finished when one of its runs ended ``completed`` or
``budget_exhausted`` (both are outcomes of the protocol). An interrupted run (started
marker only) or a ``failed`` one is rerun as a new attempt; the old record is kept.

Two rules keep a study from starting runs that cannot help: once the study's ``max_cost_usd`` is
spent (its archived runs and the running ones counted) no new run starts, and once a model's runs
failed to connect ``retry.stop_after_connection_failures`` times in a row no new run of that model
starts. Running runs finish; the slots not started stay unstarted, so a later ``run`` resumes them.

Both rules live in ``Dispatch``, which hands the slots out one at a time to the lanes of ``run_slots``: on
this event loop (``in_process``), in worker processes too (draligned.workers), or in Ray tasks
(draligned.distributed.ray_run). A study keeps each ended run's ``RunOutcome``, not its record, so its memory
does not grow with the runs.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import secrets
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from draligned.archive import Archive, ArchiveError
from draligned.archive.store import remove_stale_temp_files
from draligned.archive.writer import RunWriter, new_record
from draligned.cards import CardError
from draligned.executors import RunSetup, executor_for
from draligned.harness import ContractError
from draligned.models import ModelAPI, ModelError, get_model
from draligned.models.base import RETRY_LISTENER
from draligned.models.cache import CachedModel, ReplayCache
from draligned.records import FINISHED, ModelAttemptEvent, ModelCallEvent, Record, RunRecord, Slot
from draligned.sandbox import WORKSPACE_OWNER, SandboxUnavailable, remove_stale_workspaces, require_sandbox
from draligned.shards import LOCK_NAME, StudyPart, hold_lock
from draligned.study import Study, StudyError
from draligned.tools.pool_search import StudySearch, open_search
from draligned.tools.web import WebConfigError

STUDY_ERRORS = (StudyError, CardError, ContractError, ModelError, ArchiveError)
"""What a study run raises for bad input or a damaged or locked archive (the CLI's exit 2), not a bug."""


class RunOutcome(Record, frozen=True):
    """What the study keeps of a run that ended (about 1.2 KB, not its ~77 KB record, which is in the archive):
    enough for the summary, the cost cap and the stop-after-connection-failures rule."""

    run_id: str
    """The run's id (its record is ``ARCHIVE/runs/<run_id>.json``)."""
    slot_id: str
    """The slot it ran."""
    model: str
    """The study's model name."""
    status: str
    """How it ended: completed, budget_exhausted or failed."""
    status_reason: str | None
    """Why, for a failed or budget-exhausted run."""
    cost_usd: float | None
    """Its priced calls' cost; None when unpriced."""
    connection_failed: bool
    """It failed because its model could not be reached (see ``connection_failed``)."""
    reached_model: bool
    """It got at least one reply from its model over the network."""

    @classmethod
    def of(cls, record: RunRecord) -> RunOutcome:
        return cls(run_id=record.run_id, slot_id=record.slot_id, model=record.slot.model, status=record.status,
                   status_reason=record.status_reason, cost_usd=record.counters.cost_usd,
                   connection_failed=connection_failed(record), reached_model=reached_model(record))


@dataclass
class StudyResult:
    """What a study run did."""

    archive: Archive
    slots: int
    skipped: int
    statuses: Counter = field(default_factory=Counter)
    runs: list[RunOutcome] = field(default_factory=list)
    """The runs this invocation ended, in the order they ended (their records are in the archive)."""
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
    run: RunOutcome | None = None
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


class _Head(TypedDict):
    """The fields of an archived run record that planning needs (the rest, events above all, is skipped)."""

    slot_id: str
    status: str
    slot: dict[str, Any]
    counters: dict[str, Any]


_HEAD = TypeAdapter(_Head)


def archived_heads(archive: Archive, started: bool = False) -> Iterator[_Head]:
    """The planning fields of each final run record (or started marker), one file at a time: a study of
    20,000 runs is planned without holding 20,000 parsed records."""
    for name in archive.run_names()[1 if started else 0]:
        path = archive.runs_dir / name
        try:
            yield _HEAD.validate_json(path.read_bytes())
        except ValidationError:
            archive.load_record(path)  # raises the ArchiveError naming the file
            raise


@dataclass(frozen=True)
class ResumePlan:
    """What the archive says of a study's slots, from one pass over its run records."""

    todo: list[Slot]
    """The slots with no finished run yet, in the study's order."""
    attempts: dict[str, int]
    """How many attempts each slot id has started (its started markers)."""
    cost_usd: float
    """What the archived runs of the study cost, all parts included (unpriced runs count 0)."""


def plan_resume(archive: Archive, slots: list[Slot], study: str = "") -> ResumePlan:
    """What is left of ``slots`` and what the archived runs of ``study`` cost: each final record is read once
    (at 20,000 runs a second pass for the cost doubled the planning)."""
    finished: set[str] = set()
    cost = 0.0
    for head in archived_heads(archive):
        if head["status"] in FINISHED:
            finished.add(head["slot_id"])
        if head["slot"]["study"] == study:
            cost += head["counters"].get("cost_usd") or 0.0
    attempts = Counter(r["slot_id"] for r in archived_heads(archive, started=True))
    return ResumePlan([s for s in slots if s.slot_id not in finished], dict(attempts), cost)


def connection_failed(record: RunRecord) -> bool:
    """Whether a run failed because its model could not be reached (its last attempt a connection error)."""
    attempts = [e for e in record.events if isinstance(e, ModelAttemptEvent)]
    return record.status == "failed" and bool(attempts) and attempts[-1].attempt.error == "APIConnectionError" \
        and (record.status_reason or "").startswith("model error:")


def reached_model(record: RunRecord) -> bool:
    """Whether a run got at least one reply from its model over the network."""
    return any(isinstance(e, ModelCallEvent) and not e.cache_hit for e in record.events)


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
    return await executor_for(slot.harness)(setup, search.backend_for(slot, writer)).run()


def open_study_search(study: Study) -> StudySearch:
    """The study's search backend (corpus, pools or web); a StudyError naming the field when it cannot open."""
    spec = study.spec.search
    try:
        return open_search(spec, study.corpus_path, study.pool_paths, study.acquisition_root)
    except ValueError as exc:  # CorpusError, PoolFileError, unscored pools, WebConfigError (missing key, SDK)
        where = "corpus" if spec.backend == "corpus" else "search.pools"
        if isinstance(exc, WebConfigError):
            where = f"search.{exc.field}"
        raise StudyError(f"{study.path}: field {where}: {exc}") from exc


def prepare_models(study: Study, names: set[str]) -> dict[str, ModelAPI]:
    """The study's models named in ``names``, behind the replay cache when the study has one; a missing key
    fails here, before any run starts (and before any file is made)."""
    models = {m.name: get_model(m) for m in study.spec.models if m.name in names}
    if study.spec.cache != "off":
        cache = ReplayCache(study.cache_root, study.spec.cache)
        models = {name: CachedModel(m, cache) for name, m in models.items()}
    for m in models.values():
        m.check_ready()
    return models


Take = Callable[[float], Awaitable["tuple[Slot, int] | None"]]
"""Asked for the next (slot, attempt) to run, with the cost of the caller's running runs; None: no more."""
End = Callable[[RunOutcome, float], Awaitable[None]]
"""Told each run that ended, with the cost of the caller's runs still running."""
Retrying = Callable[[str, int], None]
"""Told +1 / -1 with a slot id when that run's current model call starts / stops retrying."""


def any_priced(models: dict[str, ModelAPI]) -> bool:
    """Whether a model of the study has a price (else every run costs 0 and no cap applies)."""
    return any(m.declaration.price is not None for m in models.values())


async def run_slots(study: Study, archive: Archive, search: StudySearch, models: dict[str, ModelAPI],
                    take: Take, end: End, concurrency: int, retrying: Retrying | None = None) -> None:
    """Run slots in this process, ``concurrency`` at a time, until ``take`` has no more: each of
    ``concurrency`` lanes takes its next slot when its run ends (a queue, so a slow slot holds up no one),
    runs it with its own writer and passes its RunOutcome to ``end`` once its record is durable. A lane does
    not wait for that to start its next run: the group commit's batch (three ``syncfs`` of the filesystem, up
    to two batches' wait) would otherwise idle every lane after every run, a third of a 5-call run at
    L = 100 ms (benchmarks/README.md). A run that ended ``failed`` is reported before the lane's next run
    starts (the stop-after-connection-failures rule counts it first), and one that finished counts as
    running (its cost included) until it is reported. Knows nothing of the cost cap or the lock: whoever
    supplies ``take`` decides (Dispatch in one process, draligned.workers across processes)."""
    running: dict[str, RunRecord] = {}
    priced = any_priced(models)  # unpriced runs cost 0

    def live() -> float:
        """The running runs' cost: a walk over every run in flight (at each take and each report), done only
        when a model is priced."""
        return sum(r.counters.cost_usd or 0.0 for r in running.values()) if priced else 0.0

    async def report(rec: RunRecord) -> None:
        await archive.durable()  # its record and every blob it names are on disk before the run counts as ended
        running.pop(rec.run_id, None)  # its cost counted as running until then
        await end(RunOutcome.of(rec), live())

    async def lane() -> None:
        pending: asyncio.Future[None] | None = None
        me = asyncio.current_task()

        def stop_if_failed(done: asyncio.Future[None]) -> None:
            """A durable wait that failed (a refused write) stops the lane's run in progress at once."""
            if me is not None and not done.cancelled() and done.exception() is not None:
                me.cancel()

        try:
            while (got := await take(live())) is not None:
                slot, attempt = got
                if retrying is not None:
                    RETRY_LISTENER.set(functools.partial(retrying, slot.slot_id))  # this lane's calls only
                rec = await _run_slot(study, archive, slot, attempt, models[slot.model], search, running)
                if pending is not None:
                    await pending  # the lane's runs are reported in the order they ended
                pending = asyncio.ensure_future(report(rec))
                pending.add_done_callback(stop_if_failed)
                if rec.status not in FINISHED:  # the stop rules count a failed run before the next starts
                    await pending
            if pending is not None:
                await pending
        except asyncio.CancelledError:
            failure = pending.exception() if pending is not None and pending.done() and not pending.cancelled() \
                else None
            if failure is not None:
                raise failure from None  # the failure, not the cancel it caused
            raise
        finally:
            if pending is not None and not pending.done():  # cancelled: an unreported run is resumed as ended
                pending.cancel()

    with archive.group_commit():  # this process's archive writes on a writer thread, many files per sync
        await asyncio.gather(*(lane() for _ in range(concurrency)))


class Dispatch:
    """The study-wide side of a run: hands out the slots still to do one at a time, starts none once the
    study's cost cap is spent or while its model is unreachable, counts every run that ended and tells
    ``progress``. The same in one process, across worker processes (each a ``source``) and for Ray tasks."""

    def __init__(self, study: Study, todo: list[Slot], attempts: dict[str, int], result: StudyResult,
                 models: dict[str, ModelAPI], earlier: float, progress: ProgressCallback | None) -> None:
        self.study, self.result, self.progress, self.earlier = study, result, progress, earlier
        self.total = len(todo)
        self.priced = any_priced(models)
        self._queue, self._attempts = deque(todo), attempts
        self._stop_after = {n: m.declaration.retry.stop_after_connection_failures for n, m in models.items()}
        self._ended_cost = 0.0
        self._running_cost: dict[int, float] = {}  # source -> cost of its running runs, as it last said
        self._retrying: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()  # consecutive runs per model that could not connect
        self._stopped: dict[str, str] = {}  # model -> why no new run of it starts

    def cost(self) -> float:
        """This invocation's runs so far, running ones included."""
        return round(self._ended_cost + sum(self._running_cost.values()), 8)

    def take(self, source: int = 0, running: float = 0.0) -> tuple[Slot, int] | None:
        """The next slot that may start, with its attempt number; slots that may not are set aside as
        not started (with why). None when none is left."""
        self._running_cost[source] = running
        while self._queue:
            slot = self._queue.popleft()
            why = self.refusal(slot)
            if why is None:
                return slot, self._attempts.get(slot.slot_id, 0) + 1
            self.set_aside(slot.slot_id, why)
        return None

    def set_aside(self, slot_id: str, why: str) -> None:
        """Count a slot as not started in this study run, with why (a rerun tries it again)."""
        self.result.not_started[slot_id] = why
        self.tell()

    def refusal(self, slot: Slot) -> str | None:
        """Why a run of ``slot`` may not start now (the study's cost cap is spent, or its model was stopped as
        unreachable), or None: asked for every slot taken and for every retry of a Ray task."""
        cap, spent = self.study.spec.max_cost_usd, self.earlier + self.cost()
        if cap is not None and spent >= cap:
            return f"study cost cap reached: ${spent:.4f} spent of max_cost_usd ${cap:g}"
        return self._stopped.get(slot.model)

    def end(self, outcome: RunOutcome, source: int = 0, running: float = 0.0) -> None:
        """Count a run that ended; after ``stop_after_connection_failures`` consecutive unreachable runs of
        its model, start no more of that model."""
        self._running_cost[source] = running
        self._ended_cost += outcome.cost_usd or 0.0
        self.result.runs.append(outcome)
        self.result.statuses[outcome.status] += 1
        name = outcome.model
        if outcome.reached_model:
            self._refused[name] = 0
        elif outcome.connection_failed:
            self._refused[name] += 1
            if self._refused[name] >= self._stop_after[name] and name not in self._stopped:
                self._stopped[name] = (f"model {name!r} unreachable: {self._stop_after[name]} consecutive runs "
                                       f"failed to connect (last: {outcome.status_reason})")
        self.tell(outcome)

    def retrying(self, slot_id: str, delta: int) -> None:
        self._retrying[slot_id] += delta
        self.tell()

    def forget_retrying(self, slot_id: str) -> None:
        """A slot's run ended without saying so (its Ray task died): none of its calls is retrying now."""
        if self._retrying.pop(slot_id, 0):
            self.tell()

    def tell(self, outcome: RunOutcome | None = None) -> None:
        if self.progress is None:
            return
        statuses = self.result.statuses
        self.progress(RunProgress(
            study=self.study.spec.name, total=self.total, done=sum(statuses.values()), run=outcome,
            completed=sum(statuses[s] for s in FINISHED), failed=statuses["failed"],
            retrying=sum(1 for n in self._retrying.values() if n > 0), not_started=len(self.result.not_started),
            cost_usd=self.cost() if self.priced else None))

    def close(self) -> None:
        """Record the cap and what the study's runs in the archive cost in the result."""
        self.result.cap_usd = self.study.spec.max_cost_usd
        self.result.spent_usd = round(self.earlier + self._ended_cost, 8) if self.priced else None


Execute = Callable[[Study, StudySearch, dict[str, ModelAPI], Dispatch], Awaitable[None]]
"""Runs the slots ``Dispatch`` hands out: in this process (``in_process``), in worker processes
(draligned.workers) or as Ray tasks (draligned.distributed.ray_run.in_ray)."""


async def in_process(study: Study, search: StudySearch, models: dict[str, ModelAPI], dispatch: Dispatch) -> None:
    """All of a study's runs on this process's event loop, ``concurrency`` at a time (``--workers 1``)."""

    async def take(running: float) -> tuple[Slot, int] | None:
        return dispatch.take(0, running)

    async def end(outcome: RunOutcome, running: float) -> None:
        dispatch.end(outcome, 0, running)

    await run_slots(study, Archive(study.archive_root), search, models, take, end, study.spec.concurrency,
                    dispatch.retrying)


async def run_study(study: Study, progress: ProgressCallback | None = None, verify: bool = True,
                    execute: Execute = in_process, part: StudyPart | None = None) -> StudyResult:
    """Run every unfinished slot of ``study`` with bounded concurrency through ``execute`` (default: on
    this event loop), telling ``progress`` how far it is; ``verify`` False skips checking the run records'
    hashes first (``--no-verify``); ``part`` runs only its slots, under its own locks (``--shard K/N``; see
    draligned.shards)."""
    archive = Archive(study.archive_root)
    search = open_study_search(study)
    try:
        return await _run_with(study, archive, search, progress, verify, execute, part)
    finally:
        await search.aclose()


async def _run_with(study: Study, archive: Archive, search: StudySearch,
                    progress: ProgressCallback | None, verify: bool, execute: Execute,
                    part: StudyPart | None) -> StudyResult:
    slots = [s for s in study.slots(search.sha256) if part is None or part.owns(s.slot_id)]
    todo = plan_resume(archive, slots).todo  # what the checks below prepare for; planned again under the lock
    sandboxed = sorted({s.harness for s in todo if executor_for(s.harness).needs_sandbox})
    if sandboxed:
        try:
            await require_sandbox()
        except SandboxUnavailable as exc:
            raise StudyError(f"{study.path}: harnesses {', '.join(sandboxed)} run their shell in a sandbox "
                             f"and refuse to start without one (no unsandboxed fallback): {exc}") from exc
    models = prepare_models(study, {s.model for s in todo})
    with ExitStack() as held:  # also when nothing is left to do: planning reads what other runs write
        if part is None:
            # One ``draligned run`` at a time (released when the fd closes or the process dies).
            held.callback(os.close, hold_lock(
                archive.root / LOCK_NAME, fcntl.LOCK_EX,
                f"{archive.root}: another 'draligned run' is writing to this archive; let it finish "
                f"(running the same study twice at once would run its slots twice)"))
        else:
            held.enter_context(part.locked(archive))
        result = await _run_locked(study, archive, search, slots, models, verify, progress, execute, part is None)
        from draligned.indexing import refresh  # here: DuckDB and every table's supplier, which workers never need

        # still under the run lock, so no other run's records arrive meanwhile; a run that wrote nothing
        # keeps an index built from the files as they are (a resume of a finished study rebuilds nothing)
        refresh(archive)
    return result


def put_provenance(study: Study, archive: Archive) -> None:
    """Archive the exact study, card and contract bytes every run of ``study`` names by hash."""
    archive.put_blob(study.path.read_bytes())
    for lc in study.cards:
        if archive.put_blob(Path(lc.path).read_bytes()) != lc.file_sha256:
            raise StudyError(f"{lc.path}: card file changed while the study was starting")
    for c in study.contracts.values():
        archive.put_blob(c.raw)


async def _run_locked(study: Study, archive: Archive, search: StudySearch, slots: list[Slot],
                      models: dict[str, ModelAPI], verify: bool, progress: ProgressCallback | None,
                      execute: Execute, alone: bool) -> StudyResult:
    """Check the run records, clean what killed runs left, plan again and run every slot still to do (only
    those of the prepared ``models``: a slot that became unfinished meanwhile waits for the next run).
    Only a run ``alone`` on the archive removes workspaces: a part cannot tell a live part's from a dead one's."""
    from draligned.guards import check_intact  # here: the evaluator's and the plans' modules, which workers never need

    check_intact(archive, verify, records_only=True)  # a damaged record would pass for a finished slot
    remove_stale_temp_files(archive)
    if alone:
        remove_stale_workspaces(archive.root)
    plan = plan_resume(archive, slots, study.spec.name)
    todo = [s for s in plan.todo if s.model in models]
    result = StudyResult(archive=archive, slots=len(slots), skipped=len(slots) - len(todo))
    if todo:
        put_provenance(study, archive)
    dispatch = Dispatch(study, todo, plan.attempts, result, models, plan.cost_usd if any_priced(models) else 0.0,
                        progress)  # unpriced models have no cap
    dispatch.tell()
    try:
        if todo:
            await execute(study, search, models, dispatch)
    finally:
        dispatch.close()
    return result
