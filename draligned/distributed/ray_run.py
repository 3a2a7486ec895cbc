"""``draligned run STUDY --ray ADDRESS|local``: every unfinished slot of a study as one Ray task.

The driver is an ordinary ``run_study`` (draligned.runner) whose ``Execute`` submits Ray tasks: it holds the
archive's run lock, plans, archives the provenance files, and its ``Dispatch`` hands out each slot that may
start (the study's cost cap and the stop-after-connection-failures rule, as with ``--workers``) and counts
each run that ended. At most the study's ``concurrency`` tasks are in flight; each runs its one slot with the
runner's lanes into a fresh node-local archive shard and returns the shard's files and the run's outcome. The
driver stages the files under ``ARCHIVE/.ray-shards/`` as they arrive, tells ``Dispatch`` the outcome, and at
the end merges the staged shards into the study's archive (draligned.shards.merge_locked). A task lost with
its node is retried on another (``max_retries``), so a lost node costs only its in-flight runs; a rerun first
merges the shards a killed driver staged, then skips every finished slot. A named actor
(draligned.distributed.ray_limits) admits at most ``max_connections`` runs of each model at once across the
cluster (a lease a dead node held is given back).
Ray is imported only here (``pip install 'draligned[ray]'``).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from draligned.archive import Archive
from draligned.archive.merge import archive_files
from draligned.archive.store import write_once
from draligned.distributed.ray_limits import ModelLimits
from draligned.models import ModelAPI
from draligned.records import Slot
from draligned.runner import (
    Dispatch,
    Execute,
    ProgressCallback,
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
"""How often Ray reruns a slot's task whose worker or node died."""
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


def run_slot(study: Study, slot: Slot, attempt: int, limits: Any, token: str, lease: str) -> dict[str, Any]:
    """The Ray task: run attempt ``attempt`` of ``slot`` into a node-local shard under a lease ``lease`` of the
    limits actor (for the model of the study run ``token``); returns the shard's files and the run's
    RunOutcome."""
    ray = _ray()
    node = ray.get_runtime_context().get_node_id()
    key, limit = f"{token}/{slot.model}", _limit(study)[slot.model]
    while not ray.get(limits.try_acquire.remote(key, limit, lease, node)):
        time.sleep(LEASE_POLL_S)
    scratch = Path(tempfile.mkdtemp(prefix="draligned-shard-"))
    try:
        outcome = asyncio.run(_run_one(study.model_copy(update={"archive_root": scratch}), slot, attempt))
        return {"files": {rel: (scratch / rel).read_bytes() for rel in archive_files(Archive(scratch))},
                "outcome": outcome}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        ray.get(limits.release.remote(key, lease))


async def _run_one(study: Study, slot: Slot, attempt: int) -> RunOutcome:
    """One run of ``slot`` on one lane of the runner (the driver's Dispatch decided it may start)."""
    given: list[tuple[Slot, int]] = [(slot, attempt)]
    ended: list[RunOutcome] = []

    async def take(running: float) -> tuple[Slot, int] | None:
        return given.pop() if given else None

    async def end(outcome: RunOutcome, running: float) -> None:
        ended.append(outcome)

    archive = Archive(study.archive_root)
    put_provenance(study, archive)  # a shard verifies on its own before it is merged
    search = open_study_search(study)
    try:
        await run_slots(study, archive, search, prepare_models(study, {slot.model}), take, end, 1)
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
                  verify: bool = True, max_retries: int = MAX_RETRIES) -> StudyResult:
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
    return asyncio.run(run_study(study, progress, verify, in_ray(address, max_retries)))


def in_ray(address: str, max_retries: int = MAX_RETRIES) -> Execute:
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
            await _run_tasks(ray, study, dispatch, max_retries)
        finally:
            if started:
                ray.shutdown()
        _merge_staged(dispatch.result.archive)
    return execute


async def _run_tasks(ray: Any, study: Study, dispatch: Dispatch, max_retries: int) -> None:
    """Keep up to the study's ``concurrency`` tasks in flight, each with the next slot ``dispatch`` lets start
    (it applies the cost cap and the connection-failure stop); stage each returned shard and tell
    ``dispatch`` its run's outcome. The driver does not see a running task's cost: the cap counts ended runs."""
    limits = _limits_actor(ray)
    task = ray.remote(num_cpus=1, max_retries=max_retries)(run_slot)
    token, numbers = secrets.token_hex(4), itertools.count()
    in_flight: dict[asyncio.Future[Any], tuple[Slot, str]] = {}

    def fill() -> None:
        while len(in_flight) < study.spec.concurrency and (got := dispatch.take()) is not None:
            lease = f"{token}-{next(numbers):06d}"
            ref = task.remote(study, got[0], got[1], limits, token, lease)
            in_flight[asyncio.wrap_future(ref.future())] = (got[0], lease)

    fill()
    while in_flight:
        done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        for fut in done:
            slot, lease = in_flight.pop(fut)
            try:
                out = fut.result()
            except ray.exceptions.RayError as exc:  # its nodes died too often, or it raised: the slot stays unfinished
                cause = getattr(exc, "cause", None) or exc
                why = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
                dispatch.result.not_started[slot.slot_id] = f"Ray task failed ({type(cause).__name__}): {why}"
                dispatch.tell()
            else:
                for rel, data in out["files"].items():
                    write_once(dispatch.result.archive.root / STAGING / lease / rel, data)
                dispatch.end(out["outcome"])
            fill()  # after each run, as a lane of --workers takes its next slot when its run ends
