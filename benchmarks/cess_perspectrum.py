"""CESS on PERSPECTRUM v1.0 with non-LLM controllers (paper appendix F, Tables 7, 8, 10).

Run: ``python benchmarks/cess_perspectrum.py [--data ../shared/data/perspectrum] [--seeds 3]
[--budget 10] [--outcome mean|ridge] [--stop-rule one_sided|both_sides] [--shared drop|keep]
[--no-calibrate] [--json]`` from the checkout. Prints the benchmark tables (or one JSON object)
and the wall-clock time of loading and of the benchmark itself (calibration included).
Measured figures and the paper's are compared in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from draligned.cess.bench import run_bench
from draligned.cess.perspectrum import load_perspectrum
from draligned.cli.cess import add_bench_options, bench_settings, bench_text

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "perspectrum")
    ap.add_argument("--json", action="store_true")
    add_bench_options(ap)
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = load_perspectrum(args.data)
    t_load = time.perf_counter() - t0
    report = run_bench(data, bench_settings(args))
    print(report.model_dump_json(indent=1) if args.json else bench_text(report))
    print(f"timing: load {t_load:.1f} s, bench {report.seconds:.1f} s")


if __name__ == "__main__":
    main()
