"""Pipeline throughput: a simulated study of many runs, then verify and reindex.

Run: ``python benchmarks/bench_pipeline.py [--seeds 20] [--harnesses H00 H-W H-D]`` (from the
checkout). Prints one JSON object with wall-clock seconds, runs per second, archive size and peak
memory. Targets (2 cores): the demo under 60 s; >= 10 runs/s for the simulator under H00 (H-W/H-D
start one bubblewrap sandbox per shell call and are slower); verify and reindex under 10 s for
200 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

from draligned.indexing import rebuild, verify
from draligned.runner import run_study
from draligned.study import load_study

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=20, help="replicates per arm (10 arms per seed)")
    ap.add_argument("--harnesses", nargs="+", default=["H00"], help="harnesses to run (default H00)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "bench.toml"
        study.write_text((REPO / "studies/demo.toml").read_text()
                         .replace('"../', f'"{REPO}/').replace("seeds = 2", f"seeds = {args.seeds}")
                         .replace(f'"{REPO}/archive/demo"', f'"{tmp}/archive"'))
        text = study.read_text()
        start = text.index("harnesses = [")
        end = text.index("]", start) + 1
        study.write_text(text[:start] + "harnesses = " + json.dumps(args.harnesses) + text[end:])
        t0 = time.perf_counter()
        result = asyncio.run(run_study(load_study(study)))
        t_run = time.perf_counter() - t0
        t0 = time.perf_counter()
        problems = verify(result.archive)
        t_verify = time.perf_counter() - t0
        t0 = time.perf_counter()
        rebuild(result.archive)
        t_index = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in result.archive.root.rglob("*") if p.is_file())
    print(json.dumps({
        "runs": len(result.runs), "run_s": round(t_run, 2),
        "runs_per_s": round(len(result.runs) / t_run, 1), "verify_s": round(t_verify, 2),
        "verify_problems": len(problems), "reindex_s": round(t_index, 2),
        "archive_mb": round(size / 2**20, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
