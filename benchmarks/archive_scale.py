"""The archive at scale (issue 14): verify, reindex, a no-op read and a no-op report at 1,000 to 4,000 runs.

Run: ``python benchmarks/archive_scale.py [--dir DIR] [--runs 4000] [--only-verify | --noop-only]`` (from the
checkout). The archive is made once (the ``sim`` agents under H00, ``studies/demo.toml`` with many seeds, run at
concurrency 64 in stages of 1/4, 1/2 and all runs so reindex can be timed at each size) and kept under ``--dir``
(default a fixed temp directory), each stage read once with the SIMULATOR evaluator; a rerun reuses it. Every command
is run as the user runs it (``draligned ...`` in a subprocess) and timed by wall clock: verify, reindex per size, and
the read and report with nothing new per size (best of ``--repeat``; the first call of new code does the whole work
once, and ``--first`` also times a read and a report with every mark removed). Verify's CPU time (its workers'
included) is printed beside its wall time, which on a shared machine says more. Prints one JSON object: each figure
next to its target. Targets (2 cores): verify >= 200 MB/s or <= 20 us per file; reindex linear in runs; ``read`` with
nothing left to read and ``report`` with nothing new <= 2 s at 4,000 runs.
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

from machine import describe

REPO = Path(__file__).resolve().parent.parent
SIM = REPO / "evaluators/sim.toml"
ARMS_PER_SEED = 20
"""Slots per seed of the demo study under H00: 10 arms of the demo cards x 2 simulated agents."""


def draligned(*args: str | Path) -> float:
    """Run ``draligned ARGS`` as the user would; return its wall time (s); exit on failure."""
    return timed(*args)[0]


def timed(*args: str | Path) -> tuple[float, float]:
    """Run ``draligned ARGS`` as the user would; return its wall time and its CPU time (s: user + system, of
    the process and the workers it waited for); exit on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "draligned.cli", *map(str, args)], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"draligned {' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def write_study(path: Path, seeds: int, archive: Path) -> None:
    """The demo study under H00 only, ``seeds`` replicates, concurrency 64, into ``archive``."""
    text = (REPO / "studies/demo.toml").read_text().replace('"../', f'"{REPO}/')
    text = text.replace("seeds = 2", f"seeds = {seeds}").replace("concurrency = 4", "concurrency = 64")
    text = text.replace(f'"{REPO}/archive/demo"', json.dumps(str(archive)))
    start = text.index("harnesses = [")
    path.write_text(text[:start] + 'harnesses = ["H00"]' + text[text.index("]", start) + 1:])


def build(root: Path, runs: int) -> dict[int, Path]:
    """Archives of runs/4, runs/2 and runs runs under ``root`` (each stage a hard-linked copy of the previous,
    extended by resuming a study with more seeds: archived files are write-once), each read once with the
    SIMULATOR evaluator. Returns each size's archive; stages already built are reused."""
    stages: dict[int, Path] = {}
    previous: Path | None = None
    for size in (runs // 4, runs // 2, runs):
        archive = root / f"archive-{size}"
        stages[size] = archive
        built = root / f"archive-{size}.built"
        if not built.exists():
            if archive.exists():
                shutil.rmtree(archive)
            if previous is not None:
                subprocess.run(["cp", "-al", str(previous), str(archive)], check=True)
            study = root / f"study-{size}.toml"
            write_study(study, max(1, size // ARMS_PER_SEED), archive)
            print(f"building {archive} ...", file=sys.stderr)
            draligned("run", study)
            built.write_text("")
        previous = archive
    for size, archive in stages.items():  # read after every stage is built: a read adds files to its stage only
        read_once = root / f"archive-{size}.read"
        if not read_once.exists():
            print(f"reading {archive} once ...", file=sys.stderr)
            draligned("read", archive, "--evaluator", SIM)
            read_once.write_text("")
    return stages


def archive_files(archive: Path) -> tuple[int, int]:
    """How many files verify hashes and their bytes (the index, locks and markers excluded)."""
    count = size = 0
    for sub in ("blobs", "runs", "reads", "reviews"):
        for dirpath, _, names in os.walk(archive / sub):
            for name in names:
                count += 1
                size += os.stat(os.path.join(dirpath, name)).st_size
    return count, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "draligned-archive-scale",
                    help="where the archives are made and kept for reuse")
    ap.add_argument("--runs", type=int, default=4000, help="runs in the largest archive (multiple of 80)")
    ap.add_argument("--repeat", type=int, default=3, help="timings per command (the best is reported)")
    ap.add_argument("--only-verify", action="store_true",
                    help="time archive verify only (the reindex, read and report timings take minutes)")
    ap.add_argument("--noop-only", action="store_true",
                    help="time only the read and the report with nothing new, per size (no verify, no reindex)")
    ap.add_argument("--first", action="store_true",
                    help="also time a read and a report with no marks (they verify, build every packet and "
                         "the whole report: minutes at 4,000 runs)")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    stages = build(args.dir, args.runs)
    archive = stages[args.runs]
    files, size = archive_files(archive)

    def best(*cmd: str | Path) -> float:
        return min(draligned(*cmd) for _ in range(args.repeat))

    def report_dir(runs: int) -> Path:
        return args.dir / ("report" if runs == args.runs else f"report-{runs}")

    load_at_start = round(os.getloadavg()[0], 2)
    first: dict[str, float] = {}
    if args.first:  # a read and a report that find nothing remembered (the marks and the report removed)
        (archive / ".marks.json").unlink(missing_ok=True)
        shutil.rmtree(report_dir(args.runs), ignore_errors=True)
        first = {"read_first_s": round(draligned("read", archive, "--evaluator", SIM), 2),
                 "report_first_s": round(draligned("report", archive, "--out", report_dir(args.runs)), 2)}
    sizes = {"runs": args.runs, "files": files, "archive_mb": round(size / 2**20, 1)}
    scale: dict[str, object] = {}
    if not args.noop_only:
        verify_s, verify_cpu_s = min(timed("archive", "verify", archive) for _ in range(args.repeat))
        scale = {
            "verify_s": round(verify_s, 2),
            "verify_mb_per_s": round(size / 2**20 / verify_s, 1), "verify_target_mb_per_s": ">= 200",
            "verify_us_per_file": round(verify_s / files * 1e6, 1), "verify_target_us_per_file": "<= 20",
            "verify_cpu_s": round(verify_cpu_s, 2), "verify_cpu_us_per_file": round(verify_cpu_s / files * 1e6, 1),
        }
        if args.only_verify:
            print(json.dumps({**sizes, "machine": describe(), **scale}, indent=1))
            return
        reindex = {n: round(best("archive", "reindex", a), 2) for n, a in stages.items()}
        smallest, largest = min(reindex), max(reindex)
        scale |= {
            "reindex_s": reindex,
            "reindex_s_per_1000_runs": {n: round(s / n * 1000, 2) for n, s in reindex.items()},
            "reindex_growth": round(reindex[largest] / reindex[smallest], 2),
            "reindex_target": f"linear: growth <= {largest // smallest} for {largest // smallest}x the runs",
        }
    # The first read and report of new code find no mark it made and do the whole work once: reported in
    # the *_all_s lists, the best is the one with nothing new to do.
    read_all = {n: [round(draligned("read", a, "--evaluator", SIM), 2) for _ in range(args.repeat)]
                for n, a in stages.items()}
    report_all = {n: [round(draligned("report", a, "--out", report_dir(n)), 2) for _ in range(args.repeat)]
                  for n, a in stages.items()}
    startup_s = best("--version")
    print(json.dumps({
        **sizes, "machine": describe(), "load_avg_1m_at_start": load_at_start,
        **scale,
        "read_noop_s": min(read_all[args.runs]), "read_target_s": f"<= 2 at {args.runs} runs",
        "report_noop_s": min(report_all[args.runs]), "report_target_s": f"<= 2 at {args.runs} runs",
        "read_noop_s_by_runs": {n: min(t) for n, t in read_all.items()},
        "report_noop_s_by_runs": {n: min(t) for n, t in report_all.items()},
        "read_all_s": read_all, "report_all_s": report_all, **first,
        "cli_startup_s": round(startup_s, 2),
    }, indent=1))


if __name__ == "__main__":
    main()
