"""``draligned run STUDY --ray ADDRESS|local``: every unfinished slot of a study as one Ray task.

A task runs its slot with the ordinary runner into a fresh node-local archive shard and returns the shard's
files to the driver, which stages them under ``ARCHIVE/.ray-shards/`` as they arrive and, at the end,
merges the staged shards into the study's archive (draligned.shards.merge_locked) and reindexes. A task
lost with its node is retried on another (``max_retries``), so a lost node costs only its in-flight runs;
a rerun first merges the shards a killed driver staged, then skips every finished slot. A named actor
admits at most ``max_connections`` runs of each model at once across the cluster (a lease a dead node
held is given back). Ray is imported only here (``pip install 'draligned[ray]'``).
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from draligned.archive import Archive
from draligned.archive.merge import archive_files
from draligned.archive.store import write_once
from draligned.guards import check_intact
from draligned.indexing import refresh
from draligned.records import FINISHED, Slot
from draligned.runner import (
    ProgressCallback,
    RunProgress,
    StudyResult,
    open_study_search,
    plan_resume,
    run_study,
)
from draligned.shards import SlotSet, lock_whole, merge_locked
from draligned.study import Study, StudyError

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


class ModelLimits:
    """The named actor: at most ``limits[model]`` runs of a model hold a lease at once, cluster-wide."""

    def __init__(self, limits: dict[str, int]) -> None:
        self.limits = limits
        self.holders: dict[str, dict[str, str]] = {m: {} for m in limits}  # model -> lease -> node id

    def try_acquire(self, model: str, lease: str, node: str) -> bool:
        held = self.holders[model]
        if len(held) >= self.limits[model] and lease not in held:
            alive = {n["NodeID"] for n in _ray().nodes() if n["Alive"]}
            for dead in [k for k, v in held.items() if v not in alive]:  # a lost node's leases come back
                del held[dead]
        if lease in held or len(held) < self.limits[model]:
            held[lease] = node
            return True
        return False

    def release(self, model: str, lease: str) -> None:
        self.holders[model].pop(lease, None)


def run_slots(study: Study, slot_ids: list[str], model: str, limits: Any, lease: str) -> dict[str, Any]:
    """The Ray task: run ``slot_ids`` of ``study`` (all of ``model``) into a node-local shard under a lease of
    the limits actor; returns the shard's files and the runs' statuses and outcomes."""
    ray = _ray()
    node = ray.get_runtime_context().get_node_id()
    while not ray.get(limits.try_acquire.remote(model, lease, node)):
        time.sleep(LEASE_POLL_S)
    scratch = Path(tempfile.mkdtemp(prefix="draligned-shard-"))
    try:
        local = study.model_copy(update={"archive_root": scratch})
        part = SlotSet(frozenset(slot_ids), group="ray", name=lease)
        result = asyncio.run(run_study(local, verify=False, part=part))
        shard = Archive(scratch)
        return {"files": {rel: (scratch / rel).read_bytes() for rel in archive_files(shard)},
                "statuses": dict(result.statuses), "not_started": result.not_started, "runs": result.runs}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        ray.get(limits.release.remote(model, lease))


async def _study_slots(study: Study) -> list[Slot]:
    search = open_study_search(study)
    try:
        return study.slots(search.sha256)
    finally:
        await search.aclose()


def _limit(study: Study) -> dict[str, int]:
    return {m.name: m.retry.max_connections if isinstance(m.retry.max_connections, int) else m.retry.auto_max
            for m in study.spec.models}


def _merge_staged(archive: Archive) -> None:
    """Merge every shard staged under the archive into it, then remove them."""
    staged = sorted(p for p in (archive.root / STAGING).glob("*") if p.is_dir())
    if staged:
        merge_locked([Archive(p) for p in staged], archive)
        shutil.rmtree(archive.root / STAGING)


def run_study_ray(study: Study, address: str, progress: ProgressCallback | None = None,
                  verify: bool = True, max_retries: int = MAX_RETRIES) -> StudyResult:
    """Run every unfinished slot of ``study`` as a Ray task on the cluster at ``address`` (``local``: start one
    on this machine) and merge the shards into the study's archive. Raises StudyError or ArchiveError."""
    ray = _ray()
    if study.spec.search.is_web and not study.spec.search.store_dir:
        raise StudyError(f"{study.path}: field search.store_dir: a web study on Ray needs --acquisition-store on a "
                         f"filesystem every node shares (one web per study: its first writer wins there)")
    slots = asyncio.run(_study_slots(study))
    archive = Archive(study.archive_root)
    archive.runs_dir.mkdir(parents=True, exist_ok=True)
    with lock_whole(archive, "a Ray study run"):
        _merge_staged(archive)  # what a killed driver had received: finished runs count
        check_intact(archive, verify, records_only=True)
        todo, _ = plan_resume(archive, slots)
        result = StudyResult(archive=archive, slots=len(slots), skipped=len(slots) - len(todo))
        if todo:
            _run_tasks(ray, study, address, todo, result, progress, max_retries)
            _merge_staged(archive)
        refresh(archive)  # the merges rebuilt it; refresh builds only what is stale
    return result


def _run_tasks(ray: Any, study: Study, address: str, todo: list[Slot], result: StudyResult,
               progress: ProgressCallback | None, max_retries: int) -> None:
    """Submit one task per slot, stage each returned shard, count what ended."""
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = ({"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
                                  if address == "local" else {"address": address})
        ray.init(**kwargs, log_to_driver=False)
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        limits = ray.remote(num_cpus=0)(ModelLimits).options(
            name=f"draligned-limits-{secrets.token_hex(4)}", scheduling_strategy=here).remote(_limit(study))
        task = ray.remote(num_cpus=1, max_retries=max_retries)(run_slots)
        token = secrets.token_hex(4)
        pending = {task.remote(study, [s.slot_id], s.model, limits, f"{token}-{i}"): (i, s)
                   for i, s in enumerate(todo)}
        statuses: Counter[str] = Counter()

        def tell() -> None:
            if progress is not None:
                progress(RunProgress(study=study.spec.name, total=len(todo), done=sum(statuses.values()),
                                     completed=sum(n for s, n in statuses.items() if s in FINISHED),
                                     failed=statuses["failed"], not_started=len(result.not_started)))
        tell()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i, slot = pending.pop(done[0])
            try:
                out = ray.get(done[0])
            except ray.exceptions.RayError as exc:  # its nodes died too often, or it raised: the slot stays unfinished
                cause = getattr(exc, "cause", None) or exc
                why = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
                result.not_started[slot.slot_id] = f"Ray task failed ({type(cause).__name__}): {why}"
                tell()
                continue
            shard = result.archive.root / STAGING / f"{token}-{i:06d}"
            for rel, data in out["files"].items():
                write_once(shard / rel, data)
            statuses.update(out["statuses"])
            result.runs.extend(out["runs"])
            result.not_started.update(out["not_started"])
            tell()
        result.statuses.update(statuses)
    finally:
        if started:
            ray.shutdown()
