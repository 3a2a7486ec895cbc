"""What a study costs before and around its model calls: a study's start in CPU seconds (user + system).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_study_start.py [--repeat 10]`` (from the checkout). Prints JSON
lines, each with the reference it is judged against:

- ``cli_run``: ``draligned run`` of a 2-run study of the offline ``sim`` agent (bench_memory.py's: H00, demo
  corpus; ``--workers 1``) in a fresh process: interpreter, imports, study load, corpus index, 2 runs, final index;
- ``study_in_process``: the same study run again and again in one warm process (what a test suite pays
  per small study): CPU per study;
- ``worker_start``: the worker processes' CPU (the fork server's included) of a 2-run ``openai-chat`` study
  with ``--workers 2`` against a loopback server answering at once: one worker, one run of 5 calls
  (about 15 ms of that), the rest its start; the first study of a process, then a second in the same
  process. Issue 14's reference: at C = 64 the benchmark's study costs about 3.8 CPU-s of calls, and a
  start of 1.8 CPU-s per worker made two workers slower than one (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_latency import _workers, start_server, study_file
from bench_memory import study_file as memory_study
from machine import describe

from draligned.runner import run_study
from draligned.study import load_study
from draligned.workers import in_workers, run_loop

REPO = Path(__file__).resolve().parent.parent


def sim_study(tmp: Path) -> Path:
    """bench_memory's study of the ``sim`` agent (H00, demo corpus), 2 runs."""
    tmp.mkdir(parents=True, exist_ok=True)
    return memory_study(tmp, runs=2, max_model_calls=24)


def cli_run(tmp: Path) -> dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "draligned.cli", "run", str(sim_study(tmp)), "--workers", "1"],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"figure": "cli_run", "cpu_s": round(cpu, 3), "wall_s": round(time.perf_counter() - t0, 2)}


def study_in_process(tmp: Path, repeat: int) -> dict[str, object]:
    path = sim_study(tmp)
    run_loop(run_study(load_study(path)))  # the imports, once
    t0 = time.process_time()
    for _ in range(repeat):
        shutil.rmtree(tmp / "archive")
        run_loop(run_study(load_study(path)))
    return {"figure": "study_in_process", "cpu_s_per_study": round((time.process_time() - t0) / repeat, 4),
            "studies": repeat}


def worker_start(tmp: Path) -> list[dict[str, object]]:
    server, base_url, _ = start_server(0.0)
    lines = []
    try:
        for n, which in enumerate(["first study of the process", "second study, same process"]):
            (tmp / str(n)).mkdir(parents=True)
            study = load_study(study_file(tmp / str(n), base_url, 2, 2))
            cpu0 = _workers(server.pid)
            result = run_loop(run_study(study, execute=in_workers(2)))
            assert result.statuses.get("completed") == 2, result.statuses
            lines.append({"figure": "worker_start", "study": which,
                          "workers_cpu_s": round(_workers(server.pid) - cpu0, 3),
                          "reference": "1.8 CPU-s per worker before (benchmarks/README.md, branch parentcpu)"})
    finally:
        server.terminate()
        server.join()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=10, help="studies run in one process for study_in_process")
    args = ap.parse_args()
    print(json.dumps({"machine": describe()}))
    with tempfile.TemporaryDirectory() as tmp:
        show(cli_run(Path(tmp) / "cli"))
        show(study_in_process(Path(tmp) / "warm", args.repeat))
        for line in worker_start(Path(tmp) / "workers"):
            show(line)


def show(line: dict[str, object]) -> None:
    print(json.dumps({**line, "load_avg_1m": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
