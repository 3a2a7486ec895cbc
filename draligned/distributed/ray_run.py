"""``draligned run STUDY --ray ADDRESS|local``: every unfinished slot of a study as one Ray task.

The driver is an ordinary ``run_study`` (draligned.runner) whose ``Execute`` submits Ray tasks: it holds the
archive's run lock, plans, archives the provenance files, and its ``Dispatch`` hands out each slot that may
start (the study's cost cap and the stop-after-connection-failures rule, as with ``--workers``) and counts
each run that ended. At most the study's ``concurrency`` tasks are in flight; each runs its one slot with the
runner's lanes into a fresh node-local archive shard and sends, as they happen, its run's started marker (with
the files it names), its model calls' retrying and at last the shard's files with the run's outcome. The
driver stages the files under ``ARCHIVE/.ray-shards/`` as they arrive, tells ``Dispatch``, and at the end
merges the staged shards into the study's archive (draligned.shards.merge_locked). A try whose worker or node
died is tried again (``MAX_RETRIES`` times) as the next attempt when its started marker had arrived, which
stays archived as an interrupted run, as a killed local run's does: a lost node costs only its in-flight runs.
A driver that fails or is interrupted ends the tasks it has in flight (killed with their workers, as on
a lost node), also on a cluster it did not start. A rerun first merges the shards a killed driver staged,
then skips every finished slot. A named actor (draligned.distributed.ray_limits) admits at most
``max_connections`` runs of each model at once across the cluster (the driver gives each try's lease back
when the try ended).
Ray is imported only here (``pip install 'draligned[ray]'``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draligned.archive import Archive
from draligned.archive.store import write_once
from draligned.distributed.ray_limits import ModelLimits
from draligned.distributed.ray_shard import Event, StreamingShard, new_scratch, remove_dead_scratch
from draligned.models import ModelAPI
from draligned.records import Slot
from draligned.runner import (
    Dispatch,
    Execute,
    ProgressCallback,
    Retrying,
    RunOutcome,
    StudyResult,
    open_study_search,
    prepare_models,
    put_provenance,
    run_slots,
    run_study,
)
from draligned.shards import lock_whole, merge_locked
from draligned.study import Study, StudyError
from draligned.tools.pool_search import StudySearch

STAGING = ".ray-shards"
"""Where the driver stages the shards its tasks returned (inside the archive; a merge skips dot folders)."""
MAX_RETRIES = 3
"""How often the driver tries a slot's task again whose worker or node died."""
LEASE_POLL_S = 0.05
"""How often a task asks the limits actor again while its model is at its limit."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise StudyError("--ray needs Ray: pip install 'draligned[ray]'") from None
    return ray


_LIMITS: dict[tuple[str, str], Any] = {}
"""(the driver's node id, its Ray job id) -> its ModelLimits actor, kept while this connection lasts: an
actor's process takes seconds to start, and a named actor without a handle is collected. A new cluster has
new node ids, a new connection a new job id."""


def _limits_actor(ray: Any) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    context = ray.get_runtime_context()
    key = (context.get_node_id(), context.get_job_id())
    if key not in _LIMITS:
        _LIMITS.clear()  # an earlier connection's actor ended with it
        here = NodeAffinitySchedulingStrategy(key[0], soft=False)
        _LIMITS[key] = ray.remote(num_cpus=0)(ModelLimits).options(
            name=f"draligned-limits-{secrets.token_hex(4)}", scheduling_strategy=here).remote()
    return _LIMITS[key]


def run_slot(study: Study, slot: Slot, attempt: int, limits: Any, key: str, limit: int,
             lease: str) -> Iterator[Event]:
    """The Ray task (a generator, so the driver hears each event as it happens): run attempt ``attempt`` of
    ``slot`` into a node-local shard under the lease ``lease`` of the limits actor (``limit`` runs of the
    model ``key`` at once); its last event is the shard's files and the run's RunOutcome."""
    ray = _ray()
    while not ray.get(limits.try_acquire.remote(key, limit, lease)):  # the driver releases it
        time.sleep(LEASE_POLL_S)
    events: queue.SimpleQueue[Event | BaseException] = queue.SimpleQueue()
    scratch_base = Path(tempfile.gettempdir())
    remove_dead_scratch(scratch_base)
    scratch, held = new_scratch(scratch_base)

    def run() -> None:  # the run's own event loop, in a thread: the generator yields while it runs
        try:
            archive = StreamingShard(scratch, events.put)
            outcome = asyncio.run(_run_one(study.model_copy(update={"archive_root": scratch}), archive, slot,
                                           attempt, lambda slot_id, delta: events.put(("retrying", slot_id, delta))))
            events.put(("ended", archive.unsent(), outcome))
        except BaseException as exc:  # raised in the task: the driver does not retry it
            events.put(exc)

    runner = threading.Thread(target=run, name=f"draligned-{lease}")
    runner.start()
    try:
        while True:
            event = events.get()
            if isinstance(event, BaseException):
                raise event
            yield event
            if event[0] == "ended":
                return
    finally:
        runner.join()
        shutil.rmtree(scratch, ignore_errors=True)
        os.close(held)


async def _run_one(study: Study, archive: Archive, slot: Slot, attempt: int, retrying: Retrying) -> RunOutcome:
    """One run of ``slot`` on one lane of the runner (the driver's Dispatch decided it may start)."""
    given: list[tuple[Slot, int]] = [(slot, attempt)]
    ended: list[RunOutcome] = []

    async def take(running: float) -> tuple[Slot, int] | None:
        return given.pop() if given else None

    async def end(outcome: RunOutcome, running: float) -> None:
        ended.append(outcome)

    put_provenance(study, archive)  # a shard verifies on its own before it is merged
    search = open_study_search(study)
    try:
        await run_slots(study, archive, search, prepare_models(study, {slot.model}), take, end, 1, retrying)
    finally:
        await search.aclose()
    return ended[0]


def _limit(study: Study) -> dict[str, int]:
    return {m.name: m.retry.max_connections if isinstance(m.retry.max_connections, int) else m.retry.auto_max
            for m in study.spec.models}


def _merge_staged(archive: Archive) -> None:
    """Merge every shard staged under the archive into it, then remove them (the run's ``refresh`` indexes
    the archive after)."""
    staged = sorted(p for p in (archive.root / STAGING).glob("*") if p.is_dir())
    if staged:
        merge_locked([Archive(p) for p in staged], archive, index=False)
        shutil.rmtree(archive.root / STAGING)


def run_study_ray(study: Study, address: str, progress: ProgressCallback | None = None,
                  verify: bool = True) -> StudyResult:
    """Run every unfinished slot of ``study`` as a Ray task on the cluster at ``address`` (``local``: start one
    on this machine) and merge the shards into the study's archive. Raises StudyError or ArchiveError."""
    _ray()
    if study.spec.search.is_web and not study.spec.search.store_dir:
        raise StudyError(f"{study.path}: field search.store_dir: a web study on Ray needs --acquisition-store on a "
                         f"filesystem every node shares (one web per study: its first writer wins there)")
    archive = Archive(study.archive_root)
    archive.runs_dir.mkdir(parents=True, exist_ok=True)
    with lock_whole(archive, "a Ray study run"):
        _merge_staged(archive)  # what a killed driver had received: finished runs count
    return asyncio.run(run_study(study, progress, verify, in_ray(address)))


def in_ray(address: str) -> Execute:
    """An ``Execute`` for draligned.runner.run_study that runs each slot ``Dispatch`` hands out as a Ray task on
    the cluster at ``address`` (started and stopped here unless Ray is already initialised) and merges the
    returned shards into the archive."""

    async def execute(study: Study, search: StudySearch, models: dict[str, ModelAPI], dispatch: Dispatch) -> None:
        ray = _ray()
        started = not ray.is_initialized()
        if started:
            kwargs: dict[str, Any] = ({"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
                                      if address == "local" else {"address": address})
            ray.init(**kwargs, log_to_driver=False)
        try:
            await _run_tasks(ray, study, dispatch)
        finally:
            if started:
                ray.shutdown()
        _merge_staged(dispatch.result.archive)
    return execute


@dataclass
class _Try:
    """One try of a slot's task: its attempt number, which try of the slot it is in this study run, its lease
    of the limits actor, and what its events said so far."""

    slot: Slot
    attempt: int
    tries: int
    lease: str
    stream: Any
    """Its task's stream of events (an ObjectRefGenerator: what ``ray.cancel`` takes)."""
    started: bool = False
    """Its started marker reached the driver (it is archived, so the next try is the next attempt)."""
    ended: bool = False
    """Its run ended (told ``Dispatch``): its place may go to the next slot before its task is reaped."""


async def _follow(stream: Any, one: _Try, dispatch: Dispatch, then: Callable[[], None]) -> None:
    """Stage what a try's task sends as it arrives and tell ``dispatch``; once its run ended, call ``then``
    at once (the next slot is taken before any other run's end is counted, as a lane does); raises what
    ended the task."""
    staged = dispatch.result.archive.root / STAGING / one.lease
    async for ref in stream:
        kind, data, more = await ref
        if kind == "retrying":
            dispatch.retrying(data, more)
            continue
        for rel, body in data.items():
            write_once(staged / rel, body)
        one.started = True
        if kind == "ended":
            dispatch.end(more)
            one.ended = True
            then()
            return


async def _run_tasks(ray: Any, study: Study, dispatch: Dispatch) -> None:
    """Keep up to the study's ``concurrency`` runs going as Ray tasks, each with the next slot ``dispatch`` lets start
    (it applies the cost cap and the connection-failure stop); stage what each sends and tell ``dispatch``.
    A try whose worker or node died is tried again, as the next attempt when its started marker had
    arrived, up to ``MAX_RETRIES`` times; one that raised is not (it would raise again). The driver does
    not see a running task's cost: the cap counts ended runs."""
    limits, limit = _limits_actor(ray), _limit(study)
    task = ray.remote(num_cpus=1, max_retries=0)(run_slot)
    token, numbers = secrets.token_hex(4), itertools.count()
    in_flight: dict[asyncio.Task[None], _Try] = {}

    def model_key(model: str) -> str:  # the model's limit in the actor, for this study run's tries only
        return f"{token}/{model}"

    def release(one: _Try) -> None:  # its place in its model's limit (also the lease of a dead worker)
        limits.release.remote(model_key(one.slot.model), one.lease)

    def submit(slot: Slot, attempt: int, tries: int) -> None:
        lease = f"{token}-{next(numbers):06d}"
        one = _Try(slot, attempt, tries, lease,
                   task.remote(study, slot, attempt, limits, model_key(slot.model), limit[slot.model], lease))
        in_flight[asyncio.ensure_future(_follow(one.stream, one, dispatch, fill))] = one

    def fill() -> None:
        while (sum(not t.ended for t in in_flight.values()) < study.spec.concurrency
               and (got := dispatch.take()) is not None):
            submit(*got, tries=1)

    def settle(fut: asyncio.Task[None]) -> None:
        """A try's task ended: its lease goes back; a try whose worker or node died is tried again or its slot
        set aside. Raises the driver's own failure (a refused staging write), not the task's."""
        exc = fut.exception()
        if exc is not None and not isinstance(exc, ray.exceptions.RayError):
            raise exc  # the try stays in flight: the finally below ends its task with the others
        one = in_flight.pop(fut)
        release(one)
        if exc is None:
            return
        dispatch.forget_retrying(one.slot.slot_id)  # its retrying calls ended with it
        cause = getattr(exc, "cause", None) or exc
        why = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
        failed = f"its Ray task failed {one.tries} time(s), the last ({type(cause).__name__}): {why}"
        if not isinstance(exc, ray.exceptions.RayTaskError) and one.tries <= MAX_RETRIES:
            refused = dispatch.refusal(one.slot)  # a retry is a new start: the cap and the stop hold for it
            if refused is None:
                submit(one.slot, one.attempt + one.started, one.tries + 1)
                return
            failed += f"; not tried again: {refused}"
        dispatch.set_aside(one.slot.slot_id, failed)

    try:
        fill()
        while in_flight:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                settle(fut)
            fill()  # after a try that failed (a run that ended took its next slot in _follow)
    finally:  # the driver failed or was interrupted: its tasks end with it, also on a cluster it did not start
        for fut, one in in_flight.items():
            fut.cancel()
            # Killed with its worker, as on a lost node (its started marker, if staged, keeps it as an
            # interrupted attempt; the next task on the node removes its scratch shard). Not Ray's gentle
            # cancel: that ends a generator task between its events but leaves its run's thread running on.
            ray.cancel(one.stream, force=True)
            release(one)
