"""Studies on a local two-node Ray cluster (issue 14), started once for the module: the study's cost cap and
the stop after consecutive connection failures hold across the tasks, and a later run resumes; a run's
retrying model call shows in the driver's progress; a slot whose worker dies on every try stays unfinished,
its tries archived as interrupted attempts, until a rerun finishes it; a driver that fails ends its tasks;
one node is removed mid-study (last: the cluster keeps only its head), and the merged archive verifies, has
the slots of a single-process run and exactly one finished run per slot."""

from __future__ import annotations

import importlib.util
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pytest

from draligned.archive import Archive, ArchiveError
from draligned.cli import main
from draligned.indexing import verify
from draligned.records import FINISHED, ModelAttemptEvent
from draligned.runner import RunProgress
from draligned.study import load_study
from draligned.workflow import run_study_file
from tests import independent_provider
from tests.independent_provider import State, serve
from tests.study_helpers import write_study
from tests.test_gateway import study as provider_study

pytestmark = [
    pytest.mark.xdist_group("ray"),  # one worker starts the module's cluster
    pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                       reason="Ray is the optional extra draligned[ray] (in the test extra)"),
]

KEY = "sk-ray-9d41-SECRET"
"""The provider key of the studies (``GW_KEY``): in the environment the cluster's nodes start with."""
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}
#: The head without what these studies do not use (each a Python process to start): the dashboard, the
#: autoscaler's monitor, the log monitor (the driver takes no worker logs).
HEAD = {**NODE, "include_dashboard": False, "no_monitor": True, "include_log_monitor": False}
#: Each priced run: 2 calls of 120 input + 30 output tokens at $1 / $2 per million.
RUN_COST = 0.00036


class RayCluster(NamedTuple):
    """The module's cluster, its worker node, and where that node's tasks make their scratch shards."""

    cluster: Any
    worker: Any
    head_tmp: Path
    worker_tmp: Path

    @property
    def address(self) -> str:
        return self.cluster.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A head and one worker node on 127.0.0.1, this process connected as the driver. Each node's tasks
    keep their scratch shards in a folder of its own (TMPDIR; on the session's RAM disk when it has one)."""
    import ray  # here, not at collection: only the worker running this module pays the import
    from ray.cluster_utils import Cluster

    head_tmp, worker_tmp = tmp_path_factory.mktemp("ray-head"), tmp_path_factory.mktemp("ray-worker")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every node on 127.0.0.1: loopback only
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("GW_KEY", KEY)  # the nodes' task workers inherit it
        # Ray starts its task workers at niceness 15: beside the suite's other workers, which keep both cores
        # busy, they got a few percent of a core, and this module took 110 s instead of 10 (two CPU burners).
        mp.setenv("RAY_worker_niceness", "0")
        started = Cluster(initialize_head=True, head_node_args={**HEAD, "env_vars": {"TMPDIR": str(head_tmp)}})
        try:
            worker = started.add_node(**NODE, env_vars={"TMPDIR": str(worker_tmp)})
            ray.init(address=started.address, log_to_driver=False)
            yield RayCluster(started, worker, head_tmp, worker_tmp)
        finally:
            ray.shutdown()
            started.shutdown()


@contextmanager
def provider(state: State | None = None) -> Iterator[str]:
    """The independent loopback provider (tests/independent_provider.py): its base URL."""
    server = serve(state or State())
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_rerun_first_merges_the_shards_a_killed_driver_staged(tmp_path: Path):
    """A driver killed after its tasks returned left their shards staged: the next run merges them and finds
    nothing left to run (so it starts no Ray at all; first in the module, before the cluster starts)."""
    import ray

    from draligned.distributed.ray_run import STAGING, run_study_ray

    study = write_study(tmp_path, ["travel_budget_en.json"])
    done = run_study_file(study, tmp_path / "done")
    archive = tmp_path / "ray"
    (archive / "runs").mkdir(parents=True)
    shutil.copytree(done.archive.root, archive / STAGING / "t-000000", ignore=shutil.ignore_patterns("index.duckdb"))
    result = run_study_ray(load_study(study, archive), "local")
    assert result.skipped == result.slots == 2 and not ray.is_initialized()
    assert sorted(p.name for p in Archive(archive).record_paths()) == sorted(
        p.name for p in done.archive.record_paths())
    assert verify(Archive(archive)) == [] and not (archive / STAGING).exists()


def _finished_per_slot(archive: Archive) -> Counter[str]:
    return Counter(r.slot_id for r in archive.records() if r.status in FINISHED)


@pytest.mark.slow
def test_the_study_cost_cap_holds_across_ray_tasks_and_a_later_run_resumes(tmp_path, cluster, capsys):
    """Two tasks in flight, $0.00036 a run, cap $0.0005: the first to end leaves $0.00036 spent, so one more
    starts; the second to end spends the cap, so the fourth slot does not start. A cap per task (each task
    its own archive) would have run all four."""
    with provider() as url:
        path = provider_study(tmp_path, "openai-chat", url, model="m-x", arms='"all"',
                              extra="seeds = 2\nconcurrency = 2\nmax_cost_usd = 0.0005",
                              model_extra="price = { input = 1.0, output = 2.0 }")
        assert main(["run", str(path), "--ray", cluster.address]) == 1
        out = capsys.readouterr().out
        archive = Archive(tmp_path / "archive")
        assert [r.counters.cost_usd for r in archive.records()] == [RUN_COST] * 3
        assert f"spent: ${3 * RUN_COST:.4f} of max_cost_usd $0.0005" in out
        assert "not started: 1 slot(s): study cost cap reached" in out
        path.write_text(path.read_text().replace("max_cost_usd = 0.0005", "max_cost_usd = 1.0"))
        assert main(["run", str(path), "--ray", cluster.address]) == 0
    assert _finished_per_slot(archive) == Counter(dict.fromkeys(_finished_per_slot(archive), 1))
    assert len(archive.records()) == 4 and verify(archive) == []


def test_the_limits_actor_admits_at_most_a_models_limit_until_a_lease_is_given_back():
    """The actor's rules, on the class itself (the tasks call them remotely): ``limit`` leases per study
    model, a lease asked for again is still held, a given-back one frees its place, models do not share."""
    from draligned.distributed.ray_limits import ModelLimits

    limits = ModelLimits()
    assert [limits.try_acquire("s/m", 2, lease) for lease in ("a", "b", "c", "a")] == [True, True, False, True]
    assert limits.try_acquire("s/other", 1, "c")
    limits.release("s/m", "a")
    limits.release("s/m", "a")  # given back twice: nothing more is freed
    assert [limits.try_acquire("s/m", 2, lease) for lease in ("c", "d")] == [True, False]
    limits.release("s/m", "b")
    limits.release("s/m", "c")
    assert limits.holders == {"s/other": {"c"}}


@pytest.mark.slow
def test_an_unreachable_model_stops_a_ray_study_after_consecutive_connection_failures(tmp_path, cluster, capsys):
    path = provider_study(tmp_path, "openai-chat", "http://127.0.0.1:9/v1", "m-x", arms='"all"',
                          extra="seeds = 3\nconcurrency = 1",
                          model_extra="retry = { max_attempts = 1, stop_after_connection_failures = 2 }")
    address = cluster.address
    assert main(["run", str(path), "--ray", address]) == 1
    out = capsys.readouterr().out
    records = Archive(tmp_path / "archive").records()
    assert len(records) == 2 and all("(cause: connection refused: [Errno 111]" in r.status_reason for r in records)
    assert "not started: 4 slot(s): model 'm' unreachable: 2 consecutive runs failed to connect" in out
    assert main(["run", str(path), "--ray", address]) == 1  # a later run starts the unstarted slots again
    assert len(Archive(tmp_path / "archive").records()) == 4


@pytest.mark.slow
def test_a_ray_runs_retrying_model_call_shows_in_the_drivers_progress(tmp_path: Path, cluster: RayCluster):
    """The provider's first reply is a 429: the task's run retries that call, and the driver's progress
    counts it retrying (told by the task as it happens), then not once the call succeeded."""
    from draligned.distributed.ray_run import run_study_ray

    events: list[RunProgress] = []
    with provider(State(fail_first=1, fail_status=429)) as url:
        study = provider_study(tmp_path, "openai-chat", url, "m-x", model_extra="retry = { initial_wait_s = 0 }")
        result = run_study_ray(load_study(study, tmp_path / "archive"), cluster.address, events.append)
    assert [e.retrying for e in events] == [0, 1, 0, 0] and events[-1].completed == 1
    (record,) = Archive(tmp_path / "archive").records()
    attempts = [e.attempt.error for e in record.events if isinstance(e, ModelAttemptEvent)]
    assert attempts == ["RateLimitError"] and result.statuses == Counter(completed=1)


def _staged_markers(archive: Path) -> set[str]:
    """The run ids whose started markers the driver of ``archive`` has staged."""
    from draligned.distributed.ray_run import STAGING

    return {p.name.removesuffix(".started.json") for p in (archive / STAGING).glob("*/runs/*.started.json")}


def _kill(processes: list[psutil.Process]) -> None:
    for process in processes:
        with suppress(psutil.NoSuchProcess):
            process.kill()


def _running_slot_tasks() -> list[psutil.Process]:
    """This test process's Ray workers now running a ``run_slot`` task (Ray titles a worker by its task)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        with suppress(psutil.Error):  # one that ended meanwhile
            if process.cmdline()[:1] and process.cmdline()[0].startswith("ray::run_slot"):
                found.append(process)
    return found


@contextmanager
def held_replies(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The loopback provider's chat replies wait until the event is set (at most 60 s)."""
    replies = threading.Event()

    def held(state: State, body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
        replies.wait(timeout=60)
        return independent_provider.chat(state, body, n)

    monkeypatch.setitem(independent_provider.ROUTES, "/v1/chat/completions", held)
    yield replies


@pytest.mark.slow
def test_a_slot_whose_worker_dies_on_every_try_stays_unfinished_until_a_rerun(tmp_path: Path, cluster: RayCluster,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]):
    """One retry (two tries): the worker running the slot is killed as soon as its started marker reached
    the driver, on both tries. The slot stays unfinished with both attempts archived as interrupted runs
    (as a killed local run is), the study exits 1 saying why; the next run, the fault gone, finishes it as
    attempt 3. The killed workers' scratch shards are left for the next task on their node to remove."""
    from draligned.distributed import ray_run, ray_shard

    monkeypatch.setattr(ray_run, "MAX_RETRIES", 1)
    archive, stop = tmp_path / "archive", threading.Event()
    nodes = (cluster.head_tmp, cluster.worker_tmp)
    ran_on: list[tuple[str, Path]] = []  # each killed try's run and the node (its TMPDIR) it ran on

    def kill_each_try_once_started() -> None:
        while not stop.wait(0.005):
            for run_id in sorted(_staged_markers(archive) - {r for r, _ in ran_on}):
                _kill(_running_slot_tasks())
                ran_on.extend((run_id, t) for t in nodes if list(t.glob(f"*/runs/{run_id}.started.json")))

    with provider() as url, held_replies(monkeypatch) as replies:
        study = provider_study(tmp_path, "openai-chat", url, "m-x", extra="concurrency = 1")
        killer = threading.Thread(target=kill_each_try_once_started)
        killer.start()
        try:
            assert main(["run", str(study), "--ray", cluster.address]) == 1
        finally:
            stop.set()
            killer.join()
        out = capsys.readouterr().out
        interrupted = Archive(archive).started()
        by_id = {r.run_id: r for r in interrupted}
        assert Archive(archive).records() == [] and sorted(r.attempt for r in interrupted) == [1, 2]
        assert ("not started: 1 slot(s): its Ray task failed 2 time(s), the last (WorkerCrashedError): The worker "
                "died unexpectedly while executing this task.") in out
        assert verify(Archive(archive)) == [] and not (archive / ray_run.STAGING).exists()
        assert sorted(r for r, _ in ran_on) == sorted(r.run_id for r in interrupted)
        # the second try removed the first's scratch shard if it ran on the same node; nothing removed its own
        (first, first_node), (second, second_node) = sorted(ran_on, key=lambda r: by_id[r[0]].attempt)
        left = {p.name.removesuffix(".started.json") for t in nodes for p in t.glob("*/runs/*.started.json")}
        assert left == ({second} if first_node == second_node else {first, second})
        assert sum(ray_shard.remove_dead_scratch(t) for t in nodes) == len(left) and not any(
            list(t.iterdir()) for t in nodes)
        replies.set()
        assert main(["run", str(study), "--ray", cluster.address]) == 0
    finished = Archive(archive).records()
    assert [(r.attempt, r.status) for r in finished] == [(3, "completed")]
    assert len(Archive(archive).started()) == 3 and main(["archive", "verify", str(archive)]) == 0


@pytest.mark.slow
def test_a_driver_that_fails_stops_its_tasks_on_a_cluster_it_did_not_start(tmp_path: Path, cluster: RayCluster,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """Ray was started by the caller (here the module), so the driver does not shut it down. When the driver
    fails (its staging write of a run's started marker refused), it ends the tasks it has in flight: their runs
    stop while their model replies are still held, instead of running on unseen. No process holds a scratch
    shard's lock after (Ray's gentle cancel left a run's thread going in an idle worker), so the next task's
    sweep removes them. A rerun resumes the study to one finished run per slot."""
    from draligned.distributed import ray_run, ray_shard

    staged = ray_run.write_once

    def refuse_started_markers(path: Path, body: bytes) -> None:
        if path.name.endswith(".started.json"):
            raise ArchiveError(f"{path}: No space left on device")
        staged(path, body)

    nodes = (cluster.head_tmp, cluster.worker_tmp)
    with provider() as url, held_replies(monkeypatch) as replies:
        study = provider_study(tmp_path, "openai-chat", url, "m-x", arms='"all"', extra="concurrency = 2")
        monkeypatch.setattr(ray_run, "write_once", refuse_started_markers)
        with pytest.raises(ArchiveError, match="No space left on device"):
            run_study_file(study, tmp_path / "ray", ray=cluster.address)
        scratch = {p for t in nodes for p in t.glob(f"{ray_shard.SCRATCH_PREFIX}*")}
        assert scratch  # the refused run's task had started
        deadline = time.monotonic() + 30  # a guard against a hang, not a timing: the kill takes well under 1 s
        while scratch and time.monotonic() < deadline:
            for node in nodes:
                ray_shard.remove_dead_scratch(node)  # only a shard whose task's process is gone
            scratch = {p for p in scratch if p.exists()}
            time.sleep(0.05)
        assert scratch == set() and _running_slot_tasks() == [] and not replies.is_set()
        monkeypatch.setattr(ray_run, "write_once", staged)
        replies.set()
        assert main(["run", str(study), "--archive", str(tmp_path / "ray"), "--ray", cluster.address]) == 0
    assert set(_finished_per_slot(Archive(tmp_path / "ray")).values()) == {1}
    assert verify(Archive(tmp_path / "ray")) == []


@pytest.mark.slow
def test_a_node_lost_mid_study_costs_only_its_in_flight_runs(tmp_path: Path, cluster: RayCluster,
                                                              monkeypatch: pytest.MonkeyPatch):
    """Every model reply waits until the worker node is lost (its worker processes killed, then the node
    removed), which happens as soon as a run started there and its started marker reached the driver: that
    run is archived as interrupted and its slot is run again on the head as the next attempt. Last in the
    module: the cluster keeps only its head."""
    from draligned.distributed.ray_run import STAGING, run_study_ray

    lost: list[str] = []
    ended = threading.Event()
    raylet = psutil.Process(cluster.worker.all_processes["raylet"][0].process.pid)

    def lose_the_worker_node_mid_run() -> None:
        while not ended.wait(0.005):
            there = {p.name.removesuffix(".started.json")
                     for p in cluster.worker_tmp.glob("draligned-shard-*/runs/*.started.json")}
            if started := there & _staged_markers(tmp_path / "ray"):
                _kill(raylet.children(recursive=True))
                cluster.cluster.remove_node(cluster.worker, allow_graceful=False)
                lost.extend(started)
                break
        replies.set()

    assert not list(cluster.worker_tmp.iterdir())  # the earlier tests' tasks removed their scratch shards
    with provider() as url, held_replies(monkeypatch) as replies:
        study = provider_study(tmp_path, "openai-chat", url, "m-x", arms='"all"', extra="concurrency = 3")
        replies.set()
        single = run_study_file(study, tmp_path / "single")
        replies.clear()
        watcher = threading.Thread(target=lose_the_worker_node_mid_run)
        watcher.start()
        try:
            result = run_study_ray(load_study(study, tmp_path / "ray"), cluster.address)
        finally:
            ended.set()
            watcher.join()
    merged = Archive(tmp_path / "ray")
    assert verify(merged) == []
    finished = _finished_per_slot(merged)
    assert finished == Counter(dict.fromkeys((r.slot_id for r in Archive(single.archive.root).records()), 1))
    assert result.statuses["completed"] == single.slots == 2 and not result.not_started
    assert len(lost) == 1 and lost[0] not in {r.run_id for r in merged.records()}  # in flight: interrupted
    again = {r.run_id: r for r in merged.started()}
    rerun = next(r for r in merged.records() if r.slot_id == again[lost[0]].slot_id)
    assert (again[lost[0]].attempt, rerun.attempt) == (1, 2) and len(again) == 3
    assert not (merged.root / STAGING).exists()
    resumed = run_study_ray(load_study(study, tmp_path / "ray"), cluster.address)
    assert resumed.skipped == 2 and resumed.runs == [] and not resumed.not_started  # resume: nothing to run
