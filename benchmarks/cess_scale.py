"""CESS on a million trajectories and the cluster bootstrap (issue 14).

Run: ``python benchmarks/cess_scale.py`` from the checkout (``--trajectories N`` for fewer;
``--in-memory`` for the estimators and the bootstrap alone, without writing any file). It
generates N trajectories (default 10^6; N = 20 documents, K = 10 rounds; fixed seed; full-precision
softmax probabilities, stop probability 0.02 after round 1 so some runs stop early, 1% of trajectories with
a zero-probability document: support intervals), writes them as JSON Lines and as Parquet (`cess
export`'s format) to a temporary directory, and times:

- the estimators on the in-memory columns (target ≤ 1 s);
- ``draligned cess estimate F.jsonl --json`` end to end in a subprocess, wall time and peak RSS
  (targets ≤ 10 s, ≤ 2 GB), and the same from F.parquet (target ≤ 2 s); each also without ``--json``, the
  table the command prints by default (``*_table``);
- the steps of the Parquet run, in CPU µs per trajectory (decode, numpy checks, estimators, JSON text) in
  one thread, and the command's start-up; and its timeline (the serial start-up and end, the row groups'
  span and how many cores they kept busy);
- the same from a JSON Lines file whose every line the simdjson parse declines (the first 10^5 lines,
  each after a space: every line takes orjson's parse and its shape checks, in one worker process per
  core; ``jsonl-exact``);
- the question-level cluster bootstrap, 10,000 resamples × 200 questions (target ≤ 2 s);
- the per-trajectory path it replaces (``load_trajectories`` + ``trajectory_estimates``) on the first
  ``--baseline`` trajectories, extrapolated to N (CPU time).

Wall and CPU seconds are both printed: on a machine shared with other jobs the wall time measures them.
``--dir DIR`` keeps the two files there and reuses them when they exist (generating them takes minutes;
the in-memory columns are then read back from the Parquet file; ``parquet_layout`` says which layout a
reused file has: ``flat-2`` as ``cess export`` writes now; a reused file of an older layout, ``flat-1`` or
``nested``, is exported again from the JSON Lines file first, about a minute); ``--only`` runs some parts.

Prints one JSON object: every figure next to its target.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
from machine import describe

from draligned.cess.column_estimators import estimate_columns
from draligned.cess.columns import NEVER, ColumnBuilder, TrajectoryColumns
from draligned.cess.estimators import trajectory_estimates
from draligned.cess.metrics import cluster_ci
from draligned.cess.parquet import DICTIONARIES, load_parquet, write_parquet
from draligned.cess.parquet_flat import FLAT_BINARY, LAYOUT_KEY
from draligned.cess.trajectory import load_trajectories

N_DOCS, BUDGET, STOP, SEED, CHUNK = 20, 10, 0.02, 14, 20_000
PARTS = ("estimators", "jsonl", "jsonl-exact", "parquet", "bootstrap", "baseline")
WARM_GROUPS = 4
"""Row groups the step timer decodes before it measures: a binary column's buffer grows by doubling, so the
first groups touch fresh pages (measured: decode 1.8 µs a trajectory after one group, 1.2 after four;
the command's 107 groups spread that)."""
EXACT_LINES = 100_000
"""Lines of the ``jsonl-exact`` file: each after a space, so that every line takes orjson's parse."""


def generate(n: int, jsonl: Path | None) -> TrajectoryColumns:
    """Write ``n`` trajectories to ``jsonl`` (unless None) in chunks and return their columns (built
    without the file)."""
    rng = np.random.default_rng(SEED)
    ids = [f"d{j:02d}" for j in range(N_DOCS)]
    builder = ColumnBuilder()
    with open(os.devnull if jsonl is None else jsonl, "wb") as fh:
        for start in range(0, n, CHUNK):
            b = min(CHUNK, n - start)
            logits = rng.normal(0.0, 1.0, (b, BUDGET, N_DOCS))
            probs = np.exp(logits) / np.exp(logits).sum(axis=2, keepdims=True)
            zero = rng.random(b) < 0.01  # support varies: document 0 unreachable in round 1
            probs[zero, 0, 0] = 0.0
            probs[zero, 0] /= probs[zero, 0].sum(axis=1, keepdims=True)
            cdf = probs.cumsum(axis=2)
            chosen = np.minimum((cdf < rng.random((b, BUDGET, 1)) * cdf[..., -1:]).sum(axis=2), N_DOCS - 1)
            stops = 1 + (rng.random((b, BUDGET - 1)) >= STOP).cumprod(axis=1).sum(axis=1)  # T: first sampled stop
            y, m = rng.uniform(-1, 1, (b, N_DOCS)), rng.uniform(-0.5, 0.5, (b, N_DOCS))
            stop = np.where(np.arange(BUDGET) == 0, 0.0, STOP)
            lines = []
            for i in range(b if jsonl else 0):
                t = int(stops[i])
                lines.append(orjson.dumps({
                    "trajectory_id": f"t{start + i:07d}", "task_id": f"q{(start + i) % 200:03d}",
                    "ranking": ("original", "pro", "anti")[i % 3], "budget": BUDGET,
                    "pool": {"doc_ids": ids, "y": y[i], "m": m[i]},
                    "rounds": [{"probs": probs[i, k], "chosen": ids[chosen[i, k]], "stop_prob": stop[k]}
                               for k in range(t)]}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            fh.write(b"".join(lines))
            mask = np.arange(BUDGET) < stops[:, None]
            rows, rounds = np.nonzero(mask)
            first = np.zeros((b, N_DOCS), np.int64)
            first[zero, 0] = np.where(stops[zero] > 1, 1, NEVER)
            builder.extend([f"t{start + i:07d}" for i in range(b)], [f"q{(start + i) % 200:03d}" for i in range(b)],
                           budget=np.full(b, float(BUDGET)), n_docs=np.full(b, N_DOCS), doc_m=m.ravel(),
                           doc_y=y.ravel(), first_support=first.ravel(), n_rounds=stops,
                           chosen=chosen[rows, rounds], y=y[rows, chosen[rows, rounds]],
                           p=probs[rows, rounds, chosen[rows, rounds]], stop=stop[rounds],
                           full_support=(probs[rows, rounds] > 0).all(axis=1))
    return builder.build()


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (MB; shared pages counted in each: an upper bound)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # it has just exited
        return 0.0
    own = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0) / 1024
    return own + sum(_rss_mb(int(child)) for child in children)


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_cli(path: Path, *output: str) -> dict[str, float]:
    """Wall time, CPU time (workers included: on a shared machine the wall time says more about the
    other jobs) and peak RSS (polled every 20 ms, workers included) of ``cess estimate PATH --json`` (with
    ``output`` ``()``: the table the command prints without it)."""
    start, peak, cpu = time.perf_counter(), 0.0, _cpu_children()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "draligned.cli", "cess", "estimate", str(path), *output],
                                stdout=sink, stderr=subprocess.PIPE)
        while proc.poll() is None:
            peak = max(peak, _rss_mb(proc.pid))
            time.sleep(0.02)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"cess estimate {path} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return {"seconds": round(seconds, 2), "cpu_seconds": round(_cpu_children() - cpu, 2),
            "peak_rss_mb": round(peak, 1)}


def _spaced(jsonl: Path, out: Path) -> Path:
    """The first EXACT_LINES lines of ``jsonl``, each after a space (same records: the simdjson parse
    declines a line that does not start with ``{``, so every line takes orjson's parse)."""
    if not out.exists():
        with jsonl.open("rb") as src, out.open("wb") as dst:
            for line in islice(src, EXACT_LINES):
                dst.write(b" " + line)
    return out


def _bootstrap() -> float:
    """Seconds of a 10,000-resample cluster bootstrap over 200 questions (50 runs each)."""
    rng = np.random.default_rng(SEED)
    values, questions = rng.normal(size=200 * 50), np.repeat(np.arange(200), 50)
    start = time.perf_counter()
    cluster_ci(values, questions, n_resamples=10_000)
    return time.perf_counter() - start


def _baseline(jsonl: Path, n: int, total: int, tmp: Path) -> dict[str, float]:
    """The per-trajectory path (pydantic objects, padded batch) on the first ``n`` lines, extrapolated."""
    head = tmp / "head.jsonl"
    with jsonl.open("rb") as src:
        head.write_bytes(b"".join(islice(src, n)))
    start = time.process_time()
    reports = trajectory_estimates(load_trajectories(head), 0.5)
    lines = [r.model_dump_json() for r in reports]
    seconds = time.process_time() - start
    return {"trajectories": len(lines), "cpu_seconds": round(seconds, 2),
            "extrapolated_cpu_seconds": round(seconds * total / len(lines), 1)}


def _estimators(cols: TrajectoryColumns) -> dict[str, float]:
    """Wall and CPU seconds of the estimators on the in-memory columns (target ≤ 1 s)."""
    start, cpu = time.perf_counter(), time.process_time()
    estimate_columns(cols, 0.5)
    return {"seconds": round(time.perf_counter() - start, 3), "cpu_seconds": round(time.process_time() - cpu, 3),
            "target_seconds": 1.0}


def _parquet_stages(parquet: Path, groups: int = 16) -> dict[str, float]:
    """CPU µs per trajectory of each step of ``cess estimate F.parquet --json`` (draligned/cess/parquet_lines.py),
    in one thread over ``groups`` row groups after WARM_GROUPS unmeasured (the pipeline runs them one thread per
    core), and the CPU seconds of the command's start-up (imports, then a file that does not exist). The steps
    mirror ``parquet_lines._group`` and ``_lines`` one by one, so that each can be timed: keep them in step."""
    import duckdb

    from draligned.cess.json_lines import json_lines
    from draligned.cess.parquet import BESIDE_PROBS, group_probs
    from draligned.cess.parquet_flat import FLAT_BINARY_SCHEMA, check_flat_batch, compiled_check

    file = pq.ParquetFile(parquet, memory_map=True, read_dictionary=DICTIONARIES)
    con, rows = duckdb.connect(config={"threads": 1}), 0
    spent = dict.fromkeys(("decode", "check", "estimate", "json"), 0.0)
    for group in range(min(groups + WARM_GROUPS, file.metadata.num_row_groups)):
        laps = [time.process_time()]
        probs = group_probs(parquet, file.metadata, group)  # parquet._checked_in_place, else the whole group
        table = file.read_row_group(group, columns=FLAT_BINARY_SCHEMA.names if probs is None else BESIDE_PROBS,
                                    use_threads=False)
        laps.append(time.process_time())
        for batch in table.combine_chunks().to_batches() if probs is not None else table.to_batches():
            _, arrays, ids, tasks = (probs is not None and compiled_check(batch, probs)) or check_flat_batch(batch)
            laps.append(time.process_time())
            builder = ColumnBuilder()
            builder.extend(ids, tasks, **arrays)
            cols = builder.build()
            est = estimate_columns(cols, 0.5)
            laps.append(time.process_time())
            sum(len(piece) for piece in json_lines(cols, est, con))
            laps.append(time.process_time())
            rows += len(ids) if group >= WARM_GROUPS else 0
        if group >= WARM_GROUPS:  # the first groups warm the allocators up
            spent["decode"] += laps[1] - laps[0]
            for at in range(1, len(laps) - 1, 3):
                for k, step in enumerate(("check", "estimate", "json")):
                    spent[step] += laps[at + k + 1] - laps[at + k]
    start = _cpu_children()
    subprocess.run([sys.executable, "-m", "draligned.cli", "cess", "estimate", str(parquet.with_name("absent.parquet")),
                    "--json"], capture_output=True, check=False)
    return {**{f"{step}_cpu_us_per_row": round(cpu * 1e6 / rows, 2) for step, cpu in spent.items()},
            "startup_cpu_seconds": round(_cpu_children() - start, 2), "rows_measured": rows}


_TIMELINE = """
import json, os, sys, threading, time
start = time.perf_counter()
from draligned.cess.heap import keep_freed_memory
keep_freed_memory()
from draligned.cess import parquet, parquet_lines
spans, checked, group, finish = [], [], parquet_lines._group, parquet.RowChecks.finish
def timed_group(*args, **kw):
    begun = time.perf_counter()
    try:
        return group(*args, **kw)
    finally:
        spans.append((begun, time.perf_counter()))
def timed_finish(self, read):
    begun = time.perf_counter()
    finish(self, read)
    checked.append((begun, time.perf_counter()))
parquet_lines._group, parquet.RowChecks.finish = timed_group, timed_finish
lines = parquet_lines.parquet_lines(sys.argv[1], 0.0)
with open(os.devnull, "wb") as sink:
    for piece in lines:
        sink.write(piece)
end, first, last = time.perf_counter(), min(b for b, _ in spans), max(e for _, e in spans)
print(json.dumps({"startup_seconds": first - start, "groups_seconds": last - first,
                  "groups_cores_busy": sum(e - b for b, e in spans) / (last - first),
                  "between_seconds": checked[0][0] - last, "final_check_seconds": checked[0][1] - checked[0][0],
                  "output_seconds": end - checked[0][1], "total_seconds": end - start, "groups": len(spans)}))
"""


def _parquet_timeline(parquet: Path) -> dict[str, float]:
    """Where the wall time of the ``--json`` pipeline goes, in one child process (draligned/cess/parquet_lines.py):
    the start-up until the first row group starts, the span of the row groups and how many cores they kept
    busy on average, the serial check at the end, and the output: the lines made, one thread per core, and
    written (to /dev/null). It wraps
    ``parquet_lines._group`` and ``RowChecks.finish``: keep it in step with them."""
    done = subprocess.run([sys.executable, "-c", _TIMELINE, str(parquet)], capture_output=True, text=True, check=True)
    return {name: round(value, 3) for name, value in json.loads(done.stdout).items()}


def _stages_apart(parquet: Path) -> dict[str, float]:
    """:func:`_parquet_stages` in a child process that keeps freed memory before pyarrow loads, as the command
    does (this process imported pyarrow first, so mimalloc's purged pages inflated the decode)."""
    code = ("import json, sys; from pathlib import Path; from draligned.cess.heap import keep_freed_memory; "
            "keep_freed_memory(); sys.path.insert(0, sys.argv[2]); import cess_scale; "
            "print(json.dumps(cess_scale._parquet_stages(Path(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, str(parquet), str(Path(__file__).parent)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _layout(parquet: Path) -> str:
    return (pq.read_metadata(parquet).metadata or {}).get(LAYOUT_KEY, b"nested").decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trajectories", type=int, default=1_000_000, help="how many (10^6)")
    ap.add_argument("--baseline", type=int, default=5_000, help="trajectories timed on the old path (5000)")
    ap.add_argument("--in-memory", action="store_true",
                    help="only the estimators on the in-memory columns and the bootstrap: no files (under a minute)")
    ap.add_argument("--dir", type=Path, help="keep the files here and reuse them (default: a temporary directory)")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=PARTS, help="parts to run (all)")
    args = ap.parse_args()
    if args.in_memory:
        cols = generate(args.trajectories, None)
        print(json.dumps({"trajectories": args.trajectories, "docs": N_DOCS, "budget": BUDGET,
                          "estimators_in_memory": _estimators(cols),
                          "cluster_bootstrap_10000x200": {"seconds": round(_bootstrap(), 3), "target_seconds": 2.0},
                          "machine": describe()}, indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="cess-scale-") as tmp_name:
        tmp = args.dir or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        jsonl, parquet = tmp / f"t{args.trajectories}.jsonl", tmp / f"t{args.trajectories}.parquet"
        start, cols = time.perf_counter(), None
        if not (jsonl.exists() and parquet.exists()):
            cols = generate(args.trajectories, jsonl)
            write_parquet(jsonl, parquet)
        elif _layout(parquet) != FLAT_BINARY.decode():  # measure the layout cess export writes now
            write_parquet(jsonl, parquet)
        report: dict[str, Any] = {
            "trajectories": args.trajectories, "docs": N_DOCS, "budget": BUDGET,
            "jsonl_mb": round(jsonl.stat().st_size / 2**20), "parquet_mb": round(parquet.stat().st_size / 2**20),
            "parquet_layout": _layout(parquet),
            "setup_seconds": round(time.perf_counter() - start, 1)}
        if "estimators" in args.only:
            cols = cols or load_parquet(parquet)
            report["estimators_in_memory"] = _estimators(cols)
        del cols
        if "jsonl" in args.only:
            report["cess_estimate_jsonl"] = {**_timed_cli(jsonl, "--json"), "target_seconds": 10.0,
                                             "target_rss_mb": 2048}
            report["cess_estimate_jsonl_table"] = {**_timed_cli(jsonl), "target_seconds": 10.0, "target_rss_mb": 2048}
        if "jsonl-exact" in args.only:
            exact = _timed_cli(_spaced(jsonl, tmp / f"t{EXACT_LINES}-spaced.jsonl"), "--json")
            report["cess_estimate_jsonl_exact_path"] = {
                **exact, "lines": EXACT_LINES,
                "cpu_seconds_per_1e6": round(exact["cpu_seconds"] * 1e6 / EXACT_LINES, 1)}
        if "parquet" in args.only:
            report["cess_estimate_parquet"] = {**_timed_cli(parquet, "--json"), "target_seconds": 2.0}
            report["cess_estimate_parquet_table"] = {**_timed_cli(parquet), "target_seconds": 2.0}
            if report["parquet_layout"] != "nested":
                report["cess_estimate_parquet_steps"] = _stages_apart(parquet)
                report["cess_estimate_parquet_timeline"] = _parquet_timeline(parquet)
        if "bootstrap" in args.only:
            report["cluster_bootstrap_10000x200"] = {"seconds": round(_bootstrap(), 3), "target_seconds": 2.0}
        if "baseline" in args.only:
            report["before_per_trajectory_path"] = _baseline(jsonl, args.baseline, args.trajectories, tmp)
        report["machine"] = describe()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
