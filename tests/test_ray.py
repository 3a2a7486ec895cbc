"""A study on a local two-node Ray cluster (issue 14): one node is removed mid-study; the merged archive
verifies, has the slots of a single-process run and exactly one finished run per slot."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.indexing import verify
from draligned.records import FINISHED
from draligned.runner import RunProgress
from draligned.study import load_study
from draligned.workflow import run_study_file
from tests.study_helpers import write_study

ray = pytest.importorskip("ray", reason="Ray is the optional extra draligned[ray] (in the test extra)")

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}
#: The head without what this study does not use (each a Python process to start): the dashboard, the
#: autoscaler's monitor, the log monitor (the driver takes no worker logs).
HEAD = {**NODE, "include_dashboard": False, "no_monitor": True, "include_log_monitor": False}


@pytest.mark.slow
def test_a_node_lost_mid_study_costs_only_its_in_flight_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ray.cluster_utils import Cluster

    from draligned.distributed.ray_run import STAGING, run_study_ray

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every node on 127.0.0.1: loopback only
    study = write_study(tmp_path, ["travel_budget_en.json", "career_mobility_en.json"], latency_s=0.05)
    single = run_study_file(study, tmp_path / "single")
    cluster = Cluster(initialize_head=True, head_node_args=HEAD)
    worker = cluster.add_node(**NODE)
    removed: list[int] = []

    def progress(event: RunProgress) -> None:
        if event.done == 1 and not removed:  # the other node's task is in flight
            cluster.remove_node(worker)
            removed.append(event.done)

    try:
        ray.init(address=cluster.address, log_to_driver=False)
        result = run_study_ray(load_study(study, tmp_path / "ray"), cluster.address, progress)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert removed == [1]
    merged = Archive(tmp_path / "ray")
    assert verify(merged) == []
    finished = Counter(r.slot_id for r in merged.records() if r.status in FINISHED)
    assert finished == Counter(dict.fromkeys((r.slot_id for r in Archive(single.archive.root).records()), 1))
    assert result.statuses["completed"] == single.slots == 4 and not result.not_started
    assert not (merged.root / STAGING).exists()
    again = run_study_ray(load_study(study, tmp_path / "ray"), "local")  # resume: nothing to run, Ray not started
    assert again.skipped == 4 and not ray.is_initialized()


def test_a_rerun_first_merges_the_shards_a_killed_driver_staged(tmp_path: Path):
    """A driver killed after its tasks returned left their shards staged: the next run merges them and finds
    nothing left to run (so it starts no Ray at all)."""
    import shutil

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
