"""The whole offline demo (``draligned demo``), timed step by step: what a new user waits for first.

Run: ``python benchmarks/bench_demo.py [--out DIR]`` (from the checkout; without ``--out`` into a fresh
temporary directory, removed afterwards). Prints one JSON object: wall-clock and CPU seconds (this process
and the sandboxes it started) of the demo study's runs, of its read and report, of the pool-search part,
and in all, with the load average before and after (the cores may be shared). Target (2 idle cores): the
whole demo in about 20 s of wall clock, as the README's Quickstart says.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from machine import describe

from draligned.demo import DemoStage, run_demo
from draligned.runner import RunProgress

TARGET_S = 20.0
"""The Quickstart's figure for the whole demo on 2 idle cores."""


def cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (the sandboxed shell commands)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_demo(out: Path) -> dict[str, object]:
    """Run the demo into ``out``; the wall and CPU seconds of each of its three parts and in all."""
    marks: list[tuple[str, float, float]] = [("start", time.perf_counter(), cpu_s())]

    def progress(event: DemoStage | RunProgress) -> None:
        if isinstance(event, DemoStage):
            marks.append((event.stage, time.perf_counter(), cpu_s()))

    result = run_demo(out, progress)
    marks.append(("end", time.perf_counter(), cpu_s()))
    names = {"start": "demo study runs and verify", "read": "read and report",
             "pool": "pool study, estimates and report"}
    parts = {names[a[0]]: {"wall_s": round(b[1] - a[1], 2), "cpu_s": round(b[2] - a[2], 2)}
             for a, b in zip(marks, marks[1:], strict=False)}
    return {"parts": parts, "total_wall_s": round(marks[-1][1] - marks[0][1], 2),
            "total_cpu_s": round(marks[-1][2] - marks[0][2], 2), "target_wall_s": TARGET_S,
            "runs": len(result.study.runs), "problems": result.problems, "pool_error": result.pool_error}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, help="where the demo writes (default: a temporary directory)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    if args.out is not None:
        figures = timed_demo(args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
            figures = timed_demo(Path(tmp) / "demo")
    print(json.dumps({**figures, "load_before": load_before, "machine": describe()}, indent=1))


if __name__ == "__main__":
    main()
