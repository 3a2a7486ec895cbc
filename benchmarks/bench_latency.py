"""Latency-bound throughput through the ``openai-chat`` SDK path, with ``--workers 1`` and ``--workers 2``.

Run: ``python benchmarks/bench_latency.py [--latency-ms 100] [--inflight 64 256] [--workers 1 2]`` (from the
checkout). A loopback chat-completions server in its own process (asyncio, HTTP/1.1 keep-alive) holds
every request ``L`` ms, then answers: four ``search`` calls, then ``submit_report`` (5 model calls and 4
tool calls per run, full archiving). For each C (runs in flight: the study's ``concurrency`` and the
model's ``max_connections``) and each worker count, a study of ``--runs-per-slot`` × C runs is timed from
``run_study`` to its end (worker start and the final reindex included) and one JSON line printed. A warm-up
study of a few runs comes first (its wall and CPU seconds printed): the process's one-time start (the SDK's
import, the fork server's, about 1-2 CPU-s) is paid once per ``draligned run``, not per call, and would
otherwise be most of a 2-second study; ``--no-warmup`` leaves it in the first study. Each line has:
model calls per second from the first request to the last reply (what the runs sustain; the figure with
study start, worker start and the final reindex is printed next to it), efficiency against the
ideal C / L, the runs each process ended (``runs_ended_by``), and the CPU per model call of the parent, the
workers and the server (what bounds calls/s on a machine's cores: cores / total CPU per call), over the
whole study and (``steady_5_to_95pct``) over the
middle of it, where every process is running and neither the study start nor the parent's final reindex
counts. ``turnaround_ms``: the server's view of the harness, the time from each reply to the next request on
its connection (p50, p90, mean; L excluded: what each call cycle adds to L, so efficiency ~ L / (L + it)),
``turnaround_in_run_ms``, the same from a reply to the same run's next request (exact), ``boundary_gap_ms``, the
mean gap on a lane from a run's last reply to its next run's first request, and ``replies_in_busiest_5ms``, how
bunched the replies come (runs in lockstep answer together). The archive
goes to the temporary directory: ``TMPDIR=/dev/shm`` puts it on tmpfs, which takes the
disk's ``syncfs`` out of the figures. Targets (issue 14, 2 cores):
>= 576 calls/s (0.9 of C/L) at C = 64, >= 1,000 calls/s at C = 256.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import socket
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from cpu_all import live_cpu_s, proc_stat
from machine import describe

from draligned.models import ModelAPI
from draligned.runner import Dispatch, Execute, RunOutcome, run_study
from draligned.study import Study, load_study
from draligned.tools.pool_search import StudySearch
from draligned.workers import in_workers, run_loop

REPO = Path(__file__).resolve().parent.parent
SEARCHES = 4
TARGETS = {64: 576.0, 256: 1000.0}
TOOL_MESSAGE = b'"role":"tool"'
"""How a tool result starts in the SDK's compact JSON of the request: the server counts them in the bytes (a
quote inside a string is escaped, so no text matches), where parsing the growing body cost it about as much
CPU again as the rest of its reply (benchmarks/README.md)."""
TURNAROUND_BINS = 2000
"""1 ms bins of the server's turnaround histograms (the last one: that long or longer)."""
LAST_CALL = b'"tool_call_id":"call_'
"""Where a request names the tool call it answers: the last one in the body is the reply just sent to the same
run (each reply's call id, ``call_<n>``, is unique), so the turnaround inside a run is exact whichever pooled
connection the run's next request takes."""


def _reply(searches_done: int, number: int) -> bytes:
    if searches_done < SEARCHES:
        name, args = "search", json.dumps({"query": f"travel budget {searches_done}"})
    else:
        name, args = "submit_report", json.dumps({"content": "Benchmark final report."})
    body = {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 1, "model": "bench-model",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": f"call_{number}", "type": "function",
                                "function": {"name": name, "arguments": args}}]}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
    data = json.dumps(body).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + str(len(data)).encode()
            + b"\r\n\r\n" + data)


class ChatServer(asyncio.Protocol):
    """One keep-alive connection of the loopback server, as cheap as a minimal real server: the request is
    parsed from the bytes received (its head's ``content-length``, its body's tool results counted), held
    ``latency_s`` by a timer on the loop (no task per request) and answered by its turn."""

    def __init__(self, latency_s: float, shared: Shared, sent: dict[int, float]) -> None:
        self.latency_s, self.shared, self.sent = latency_s, shared, sent
        self.buffer, self.transport = b"", cast(asyncio.Transport, None)
        self.replied: float | None = None  # when this connection's last reply was sent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            at = head.index(b"content-length:") + len(b"content-length:")
            line_end = head.find(b"\r\n", at)
            length = int(head[at:] if line_end < 0 else head[at:line_end])
            if len(self.buffer) < end + 4 + length:
                return
            body, self.buffer = self.buffer[end + 4:end + 4 + length], self.buffer[end + 4 + length:]
            shared, now = self.shared, time.perf_counter()
            if shared.first.value == 0.0:
                shared.first.value = time.time()
            if self.replied is not None:  # the harness's turnaround on this connection
                gap = now - self.replied
                shared.turnaround[min(TURNAROUND_BINS - 1, int(gap * 1000))] += 1
                shared.gaps[0] += gap
                shared.gaps[1] += 1
            done = body.count(TOOL_MESSAGE)
            if (at := body.rfind(LAST_CALL)) >= 0:  # a run's next request: the turnaround inside the run
                number = int(body[at + len(LAST_CALL):body.index(b'"', at + len(LAST_CALL))])
                gap = now - self.sent.pop(number, now)
                shared.in_run[min(TURNAROUND_BINS - 1, int(gap * 1000))] += 1
                shared.gaps[2] += gap
                shared.gaps[3] += 1
            asyncio.get_running_loop().call_later(self.latency_s, self.answer, done)

    def answer(self, done: int) -> None:
        if not self.transport.is_closing():
            shared = self.shared
            shared.served.value += 1
            number = shared.served.value
            self.transport.write(_reply(done, number))
            shared.last.value = time.time()
            self.replied = now = time.perf_counter()
            if done < SEARCHES:  # the run asks again (a final reply ends the run)
                self.sent[number] = now
            bunched = shared.bunched
            window = int(now / 0.005)  # bunched: [current 5 ms window, replies in it, most in any window]
            bunched[1] = bunched[1] + 1 if window == bunched[0] else 1
            bunched[0], bunched[2] = window, max(bunched[2], bunched[1])


@dataclass(frozen=True)
class Shared:
    """What the server process writes and the benchmark reads (shared memory, one writer)."""

    served: Any
    """Replies sent (-1 until the server serves)."""
    first: Any
    """Time of the study's first request (0.0: none yet)."""
    last: Any
    """Time of the last reply."""
    turnaround: Any
    """Histogram (1 ms bins) of reply -> next request on the same connection."""
    in_run: Any
    """Histogram (1 ms bins) of reply -> the same run's next request (by the call id it answers)."""
    gaps: Any
    """Sums: seconds of every connection turnaround, their count, seconds inside runs, their count."""
    bunched: Any
    """[current 5 ms window, replies in it, most in any window]."""


def serve(sock: socket.socket, latency_s: float, shared: Shared) -> None:
    """The loopback server process: counts the replies, keeps the times of the first request and the last
    reply, the turnaround histograms and the replies' bunching (in shared values only it writes)."""

    async def main() -> None:
        sent: dict[int, float] = {}  # call number -> when its reply was sent, until the run's next request
        server = await asyncio.get_running_loop().create_server(
            lambda: ChatServer(latency_s, shared, sent), sock=sock, backlog=1024)
        shared.served.value = 0  # started (its imports done): its CPU from now on is the requests'
        await server.serve_forever()

    asyncio.run(main())


def study_file(tmp: Path, base_url: str, inflight: int, runs: int) -> Path:
    path = tmp / "bench.toml"
    path.write_text(f"""name = "latency"
cards = ["{REPO / 'factor_cards' / 'travel_budget_en.json'}"]
seeds = {runs // 2}
concurrency = {inflight}
archive = "{tmp / 'archive'}"
corpus = "{REPO / 'corpora' / 'demo' / 'corpus.jsonl'}"

[budget]
max_model_calls = 10
max_tool_calls = 10

[[models]]
name = "bench"
protocol = "openai-chat"
model = "bench-model"
base_url = "{base_url}"
retry = {{ max_connections = {inflight}, max_attempts = 1 }}
""")
    return path


def _cpu(server_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of this process (the study's parent, the final reindex included),
    of the worker processes (their start included: the fork server's children and the fork server itself, whose
    imports are the workers' start, and multiprocessing's resource tracker) and of the loopback server."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"parent": own.ru_utime + own.ru_stime, "workers": _workers(server_pid), "server": live_cpu_s(server_pid)}


def _tree(pid: int) -> float:
    """CPU seconds of a live process, of the children it waited for and of its live descendants."""
    fields = proc_stat(pid)
    done = sum(int(t) for t in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime, stime, cutime, cstime
    return done + sum(_tree(child) for child in _children(pid))


def _workers(server_pid: int) -> float:
    """CPU seconds of every process this one started except the loopback server: those it waited for, and the
    live ones with their descendants (the fork server and the workers it forked)."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    for pid in _children(os.getpid()):
        if pid != server_pid:
            with contextlib.suppress(OSError, ValueError):  # one that just ended
                live += _tree(pid)
    return ended.ru_utime + ended.ru_stime + live


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    tasks = Path(f"/proc/{pid}/task")
    return [int(child) for task in tasks.iterdir() for child in (task / "children").read_text().split()]


class Steady(threading.Thread):
    """Samples, every 100 ms while a study runs, the replies served and the CPU of the parent (this process:
    its loop and its archive writer thread), of the live worker processes and of the server, so that the rate
    and the CPU per call of the middle of the study (from 5% to 95% of the replies) are told apart from its
    start (planning, the workers' interpreters starting) and end (the last commits, the final reindex, all in
    the parent), which the whole-study figures include."""

    def __init__(self, server_pid: int, served: Any) -> None:
        super().__init__(daemon=True)
        self.server_pid, self.served = server_pid, served
        self.samples: list[tuple[int, float, dict[str, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            with contextlib.suppress(OSError, ValueError):  # a worker that just ended
                self.samples.append((self.served.value, time.perf_counter(), _cpu(self.server_pid)))

    def figures(self, before: int, calls: int) -> dict[str, Any] | None:
        """Replies per second and CPU ms per reply between the samples at 5% and 95% of the study's replies
        (None for a study too short to sample twice in between)."""
        self.stop.set()
        self.join()
        inside = [s for s in self.samples if before + 0.05 * calls <= s[0] <= before + 0.95 * calls]
        if len(inside) < 2:
            return None
        (n0, t0, c0), (n1, t1, c1) = inside[0], inside[-1]
        return {"calls_per_s": round((n1 - n0) / max(t1 - t0, 1e-9), 1),
                "cpu_ms_per_call": {role: round((c1[role] - c0[role]) * 1000 / max(1, n1 - n0), 2) for role in c0}}


def percentiles(counts: list[int]) -> dict[str, float | None]:
    """p50, p90 and mean (ms) of a histogram of 1 ms bins, each taking a bin at its lower edge."""
    total = sum(counts)
    if not total:
        return {"p50": None, "p90": None, "mean": None}

    def at(share: float) -> float:
        seen = 0
        for ms, n in enumerate(counts):
            seen += n
            if seen >= share * total:
                return float(ms)
        return float(len(counts) - 1)
    return {"p50": at(0.5), "p90": at(0.9), "mean": round(sum(ms * n for ms, n in enumerate(counts)) / total, 1)}


def start_server(latency_s: float) -> tuple[Any, str, Shared]:
    """The loopback server process, started and serving: the process, its base URL and its shared values."""
    context = multiprocessing.get_context("spawn")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    shared = Shared(context.RawValue("q", -1), context.RawValue("d", 0.0), context.RawValue("d", 0.0),
                    context.RawArray("q", TURNAROUND_BINS), context.RawArray("q", TURNAROUND_BINS),
                    context.RawArray("d", 4), context.RawArray("q", 3))
    server = context.Process(target=serve, args=(sock, latency_s, shared), daemon=True)
    server.start()
    while shared.served.value < 0:  # until it serves
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}/v1", shared


def counting(workers: int, ended: Counter[str]) -> Execute:
    """``in_workers(workers)``, counting the runs each process ended (the parent's Dispatch sees their source)."""
    execute = in_workers(workers)

    async def counted(study: Study, search: StudySearch, models: dict[str, ModelAPI], dispatch: Dispatch) -> None:
        end = dispatch.end

        def end_counted(outcome: RunOutcome, source: int, running: float) -> None:
            ended["parent" if source == 0 else "workers"] += 1
            end(outcome, source, running)
        dispatch.end = end_counted  # type: ignore[method-assign]
        await execute(study, search, models, dispatch)
    return counted


def boundary_gap(gaps: list[float], runs: int) -> dict[str, float | None]:
    """The mean gap (ms) at a run's boundary, on a lane: its run's last reply -> its next run's first request
    (the sealed record queued, the take from the parent, the new run's start and first request). With as many
    connections as lanes, each connection is idle exactly when a lane is between requests, so the connections'
    idle time (``gaps[0]``, ``gaps[1]`` intervals) is the lanes' idle time; less the exact time inside runs
    (``gaps[2]``, ``gaps[3]``), what is left is at the boundaries, one per interval not inside a run."""
    at_boundary = gaps[1] - gaps[3]
    if at_boundary <= 0:
        return {"mean": None, "boundaries": 0, "runs": runs}
    return {"mean": round((gaps[0] - gaps[2]) * 1000 / at_boundary, 1), "boundaries": int(at_boundary),
            "runs": runs}


def measure(server: Any, base_url: str, shared: Shared, latency_ms: float, inflight: int, workers: int,
            runs: int) -> dict[str, Any]:
    """Run one study of ``runs`` runs, ``inflight`` at a time in ``workers`` processes; its figures."""
    served, first, last, bunched = shared.served, shared.first, shared.last, shared.bunched
    ended: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        study = load_study(study_file(Path(tmp), base_url, inflight, runs))
        before, first.value, bunched[2] = served.value, 0.0, 0
        turned, in_run, gaps = list(shared.turnaround), list(shared.in_run), list(shared.gaps)
        cpu0 = _cpu(server.pid)
        steady = Steady(server.pid, served)
        steady.start()
        t0 = time.perf_counter()
        result = run_loop(run_study(study, execute=counting(workers, ended)))
        wall = time.perf_counter() - t0
        calls = served.value - before
        if calls != runs * (SEARCHES + 1):  # the server counts the tool results in the request's bytes
            raise SystemExit(f"{calls} model calls for {runs} runs, not {SEARCHES + 1} each: the workload changed")
        cpu = {role: (after - cpu0[role]) * 1000 / calls for role, after in _cpu(server.pid).items()}
        middle = steady.figures(before, calls)
        turned = [n - was for n, was in zip(shared.turnaround, turned, strict=True)]
        in_run = [n - was for n, was in zip(shared.in_run, in_run, strict=True)]
        gaps = [n - was for n, was in zip(shared.gaps, gaps, strict=True)]
    ideal, rate = inflight / (latency_ms / 1000), calls / (last.value - first.value)
    return {
        "inflight": inflight, "workers": workers, "runs": len(result.runs),
        "failed": result.statuses.get("failed", 0), "model_calls": calls, "wall_s": round(wall, 2),
        "calls_per_s": round(rate, 1), "efficiency": round(rate / ideal, 3),
        "target_calls_per_s": TARGETS.get(inflight), "ideal_calls_per_s": ideal,
        "calls_per_s_incl_start_and_reindex": round(calls / wall, 1),
        "cpu_ms_per_call": {role: round(ms, 2) for role, ms in cpu.items()},
        "workers_cpu_s": round(cpu["workers"] * calls / 1000, 2), "runs_ended_by": dict(ended),
        "turnaround_ms": percentiles(turned), "turnaround_in_run_ms": percentiles(in_run),
        "boundary_gap_ms": boundary_gap(gaps, len(result.runs)), "replies_in_busiest_5ms": bunched[2],
        "steady_5_to_95pct": middle,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--inflight", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs-per-slot", type=int, default=4, help="runs per lane (study size = this x C)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="measure the process's first study cold (SDK import, fork server start) instead of "
                         "running a small warm-up study first")
    args = ap.parse_args()
    server, base_url, shared = start_server(args.latency_ms / 1000)
    print(json.dumps({"machine": describe()}))
    try:
        if not args.no_warmup:  # the process's one-time start: the SDK's import, the fork server's
            most = max(args.workers)
            warm = measure(server, base_url, shared, args.latency_ms, 2 * most, most, 2 * most)
            print(json.dumps({"warmup": True, "workers": most, "runs": warm["runs"], "wall_s": warm["wall_s"],
                              "cpu_s": round(sum(warm["cpu_ms_per_call"].values()) * warm["model_calls"] / 1000,
                                             2)}), flush=True)
        for inflight in args.inflight:
            for workers in args.workers:
                figures = measure(server, base_url, shared, args.latency_ms, inflight, workers,
                                  args.runs_per_slot * inflight)
                print(json.dumps(figures), flush=True)
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
