"""What `draligned report` costs in CPU over the demo's archives: the biggest single cost of the test suite.

Run: ``python benchmarks/bench_report.py [--demo DIR] [--reps N]`` (from the checkout). ``--demo`` names the
output of an earlier ``python benchmarks/bench_demo.py --out DIR`` (without it the demo is run first into a
temporary directory). Prints one JSON object: the CPU seconds of importing the report code (matplotlib,
DuckDB, pyarrow), and the best of ``--reps`` of: the demo archive's report into a fresh directory, the pool
archive's, and the demo report built again into its directory (its ``.report-inputs.json`` removed, so
nothing is kept but the figures whose inputs did not change). The load average before and after is printed
too (the cores may be shared). Target: as little as main's in the same minutes, or less (issues 10 and 14
set no absolute figure; the report is ~15 % of the suite's CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from machine import describe


def _cpu(step: Callable[[], object]) -> float:
    start = time.process_time()
    step()
    return time.process_time() - start


def measure(demo: Path, reps: int) -> dict[str, object]:
    """The report's CPU seconds over the demo output ``demo`` (archive/ and pool-archive/)."""
    import_s = _cpu(lambda: __import__("draligned.analysis.render"))
    from draligned.audit import make_report
    from draligned.demo import DEMO_PLAN

    def one_round(out: Path) -> dict[str, float]:
        fresh = _cpu(lambda: make_report(demo / "archive", DEMO_PLAN, None, out / "demo"))
        pool = _cpu(lambda: make_report(demo / "pool-archive", DEMO_PLAN, None, out / "pool"))
        (out / "demo" / ".report-inputs.json").unlink()
        again = _cpu(lambda: make_report(demo / "archive", DEMO_PLAN, None, out / "demo"))
        return {"demo_report_cpu_s": fresh, "pool_report_cpu_s": pool, "demo_report_built_again_cpu_s": again}

    best: dict[str, float] = {}
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
            for name, cpu_s in one_round(Path(tmp)).items():
                best[name] = min(best.get(name, float("inf")), cpu_s)
    return {"import_cpu_s": round(import_s, 2), **{k: round(v, 2) for k, v in best.items()}, "reps": reps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--demo", type=Path, help="an earlier `bench_demo.py --out DIR` (default: run the demo first)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions; the best is printed (default 3)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-report-demo-") as tmp:
        demo = args.demo
        if demo is None:
            from draligned.demo import run_demo

            demo = Path(tmp) / "demo"
            run_demo(demo, lambda event: None)
        figures = measure(demo, args.reps)
    print(json.dumps({**figures, "load_before": load_before, "machine": describe()}, indent=1))


if __name__ == "__main__":
    main()
