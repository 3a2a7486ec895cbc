"""Resident memory of a study as its runs finish: peak RSS of the parent and of its workers.

Run: ``python benchmarks/bench_memory.py [--runs 2000 20000] [--workers 2]`` (from the checkout). Each size
runs in a fresh process: a study of the zero-latency ``sim`` agent under H00 (one card, two arms, as many
seeds as it takes; ``--max-model-calls`` 2 keeps each run small, so 20,000 runs take minutes, not hours),
then a second ``run`` of the same study, which plans over the full archive and starts nothing. One JSON
line per size: the parent's resident memory sampled every 100 ended runs (first, last, largest sample), its
peak RSS over the whole run (the final index rebuild included), the largest worker's peak, the time of the
resume, and the parent's peak in each phase (``VmHWM``, restarted between phases): while the runs end, in the
final index step, in the resume. Target (issue 14): <= 300 MB at 20,000 runs, and not growing with the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe

REPO = Path(__file__).resolve().parent.parent


def study_file(tmp: Path, runs: int, max_model_calls: int) -> Path:
    path = tmp / "memory.toml"
    path.write_text(f"""name = "memory"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
seeds = {runs // 2}
concurrency = 16
archive = "{tmp / 'archive'}"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"

[budget]
max_model_calls = {max_model_calls}
max_tool_calls = 40

[[models]]
name = "sim-agent"
protocol = "sim"
model = "sim-agent-v1"
""")
    return path


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmHWM``: its peak since the last :func:`reset_peak`; Linux)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(f"{field}:"))
    return round(int(line.split()[1]) / 1024, 1)


def reset_peak() -> None:
    """Start a new peak (``VmHWM``) from the resident memory now (Linux ``clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def child(runs: int, workers: int, max_model_calls: int) -> None:
    """One size in this process: run, then resume; print the peaks."""
    import draligned.indexing as indexing
    from draligned.runner import RunProgress, run_study
    from draligned.study import load_study
    from draligned.workers import in_workers

    def mb(kb: int) -> float:
        return round(kb / 1024, 1)

    during: list[float] = []
    phases: dict[str, float] = {}  # the parent's peak per phase: runs, then its final index step
    refresh = indexing.refresh  # the runner imports it from draligned.indexing when the runs have ended

    def timed_refresh(archive: object, files: str | None = None) -> object:
        phases.setdefault("runs", rss_mb("VmHWM"))
        reset_peak()
        t0 = time.perf_counter()
        path = refresh(archive, files)  # type: ignore[arg-type]
        phases.setdefault("final_reindex_s", round(time.perf_counter() - t0, 1))
        phases.setdefault("final_reindex", rss_mb("VmHWM"))
        return path

    indexing.refresh = timed_refresh  # type: ignore[assignment]

    def sample(event: RunProgress) -> None:  # the parent's resident memory every 100 ended runs
        if event.done % 100 == 0 and event.run is not None:
            during.append(rss_mb())

    with tempfile.TemporaryDirectory() as tmp:
        study = study_file(Path(tmp), runs, max_model_calls)
        t0 = time.perf_counter()
        result = asyncio.run(run_study(load_study(study), sample, execute=in_workers(workers)))
        run_s = time.perf_counter() - t0
        parent = mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        workers_peak = mb(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        reset_peak()
        t0 = time.perf_counter()
        again = asyncio.run(run_study(load_study(study), execute=in_workers(workers)))
        resume_s = time.perf_counter() - t0
        resume_peak = rss_mb("VmHWM")
        records_mb = sum(p.stat().st_size for p in (Path(tmp) / "archive" / "runs").iterdir()) / 2**20
    print(json.dumps({
        "runs": len(result.runs), "workers": workers, "run_s": round(run_s, 1),
        "rss_parent_during_runs_mb": {"first": during[0], "last": during[-1], "max": max(during)},
        "peak_rss_parent_mb": parent, "peak_rss_parent_runs_mb": phases["runs"],
        "peak_rss_parent_final_reindex_mb": phases["final_reindex"], "final_reindex_s": phases["final_reindex_s"],
        "peak_rss_worker_mb": workers_peak, "resume_skipped": again.skipped, "resume_s": round(resume_s, 1),
        "peak_rss_parent_resume_mb": resume_peak,
        "run_records_on_disk_mb": round(records_mb, 1), "target_mb": 300,
    }), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-model-calls", type=int, default=2)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.workers, args.max_model_calls)
        return
    print(json.dumps({"machine": describe()}), flush=True)
    for runs in args.runs:
        subprocess.run([sys.executable, __file__, "--child", str(runs), "--workers", str(args.workers),
                        "--max-model-calls", str(args.max_model_calls)], check=True)


if __name__ == "__main__":
    main()
