"""Studies on a local two-node Ray cluster (issue 14), started once for the module: the study's cost cap and
the stop after consecutive connection failures hold across the tasks, and a later run resumes; one node is
removed mid-study (last: the cluster keeps only its head), and the merged archive verifies, has the slots of
a single-process run and exactly one finished run per slot."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.indexing import verify
from draligned.records import FINISHED
from draligned.study import load_study
from draligned.workflow import run_study_file
from tests import independent_provider
from tests.independent_provider import State, serve
from tests.study_helpers import write_study
from tests.test_gateway import study as provider_study

ray = pytest.importorskip("ray", reason="Ray is the optional extra draligned[ray] (in the test extra)")

pytestmark = pytest.mark.xdist_group("ray")  # one worker starts the module's cluster

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
    worker_tmp: Path

    @property
    def address(self) -> str:
        return self.cluster.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A head and one worker node on 127.0.0.1, this process connected as the driver. Each node's tasks
    keep their scratch shards in a folder of its own (TMPDIR; on the session's RAM disk when it has one)."""
    from ray.cluster_utils import Cluster

    head_tmp, worker_tmp = tmp_path_factory.mktemp("ray-head"), tmp_path_factory.mktemp("ray-worker")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every node on 127.0.0.1: loopback only
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("GW_KEY", KEY)  # the nodes' task workers inherit it
        started = Cluster(initialize_head=True, head_node_args={**HEAD, "env_vars": {"TMPDIR": str(head_tmp)}})
        try:
            worker = started.add_node(**NODE, env_vars={"TMPDIR": str(worker_tmp)})
            ray.init(address=started.address, log_to_driver=False)
            yield RayCluster(started, worker, worker_tmp)
        finally:
            ray.shutdown()
            started.shutdown()


@contextmanager
def provider() -> Iterator[str]:
    """The independent loopback provider (tests/independent_provider.py): its base URL."""
    server = serve(State())
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_rerun_first_merges_the_shards_a_killed_driver_staged(tmp_path: Path):
    """A driver killed after its tasks returned left their shards staged: the next run merges them and finds
    nothing left to run (so it starts no Ray at all; first in the module, before the cluster starts)."""
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
    starts; the second to end spends the cap, so none of the other three starts. A cap per task (each task
    its own archive) would have run all six."""
    with provider() as url:
        path = provider_study(tmp_path, "openai-chat", url, model="m-x", arms='"all"',
                              extra="seeds = 3\nconcurrency = 2\nmax_cost_usd = 0.0005",
                              model_extra="price = { input = 1.0, output = 2.0 }")
        assert main(["run", str(path), "--ray", cluster.address]) == 1
        out = capsys.readouterr().out
        archive = Archive(tmp_path / "archive")
        assert [r.counters.cost_usd for r in archive.records()] == [RUN_COST] * 3
        assert f"spent: ${3 * RUN_COST:.4f} of max_cost_usd $0.0005" in out
        assert "not started: 3 slot(s): study cost cap reached" in out
        path.write_text(path.read_text().replace("max_cost_usd = 0.0005", "max_cost_usd = 1.0"))
        assert main(["run", str(path), "--ray", cluster.address]) == 0
    assert _finished_per_slot(archive) == Counter(dict.fromkeys(_finished_per_slot(archive), 1))
    assert len(archive.records()) == 6 and verify(archive) == []


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
def test_a_node_lost_mid_study_costs_only_its_in_flight_runs(tmp_path: Path, cluster: RayCluster,
                                                              monkeypatch: pytest.MonkeyPatch):
    """Every model reply waits until the worker node is killed, which happens as soon as a run has started
    there (its started marker is in the node's scratch shard): that run is in flight, and its task is rerun
    on the head. Last in the module: the cluster keeps only its head."""
    from draligned.distributed.ray_run import STAGING, run_study_ray

    replies = threading.Event()

    def held(state: State, body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
        replies.wait(timeout=60)
        return independent_provider.chat(state, body, n)

    monkeypatch.setitem(independent_provider.ROUTES, "/v1/chat/completions", held)
    lost: list[str] = []
    ended = threading.Event()

    def kill_the_worker_node_mid_run() -> None:
        while not ended.wait(0.005):
            if started := list(cluster.worker_tmp.glob("draligned-shard-*/runs/*.started.json")):
                cluster.cluster.remove_node(cluster.worker, allow_graceful=False)
                lost.append(started[0].name.removesuffix(".started.json"))
                break
        replies.set()

    assert not list(cluster.worker_tmp.iterdir())  # the earlier tests' tasks removed their scratch shards
    with provider() as url:
        study = provider_study(tmp_path, "openai-chat", url, "m-x", arms='"all"', extra="seeds = 2\nconcurrency = 3")
        replies.set()
        single = run_study_file(study, tmp_path / "single")
        replies.clear()
        watcher = threading.Thread(target=kill_the_worker_node_mid_run)
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
    assert result.statuses["completed"] == single.slots == 4 and not result.not_started
    assert len(lost) == 1 and lost[0] not in {r.run_id for r in merged.records()}  # in flight, then rerun
    assert not (merged.root / STAGING).exists()
    again = run_study_ray(load_study(study, tmp_path / "ray"), cluster.address)
    assert again.skipped == 4 and again.runs == [] and not again.not_started  # resume: nothing to run
