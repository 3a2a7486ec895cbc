"""Latency-bound throughput through the ``openai-chat`` SDK path, with ``--workers 1`` and ``--workers 2``.

Run: ``python benchmarks/bench_latency.py [--latency-ms 100] [--inflight 64 256] [--workers 1 2]`` (from the
checkout). A loopback chat-completions server in its own process (asyncio, HTTP/1.1 keep-alive) holds
every request ``L`` ms, then answers: four ``search`` calls, then ``submit_report`` (5 model calls and 4
tool calls per run, full archiving). For each C (runs in flight: the study's ``concurrency`` and the
model's ``max_connections``) and each worker count, a study of ``--runs-per-slot`` × C runs is timed from
``run_study`` to its end (worker start and the final reindex included) and one JSON line printed:
model calls per second from the first request to the last reply (what the runs sustain; the figure with
study start, worker start and the final reindex is printed next to it), efficiency against the
ideal C / L, and the CPU per model call of the parent, the workers and the server (what bounds calls/s on
a machine's cores: cores / total CPU per call). Targets (issue 14, 2 cores):
>= 576 calls/s (0.9 of C/L) at C = 64, >= 1,000 calls/s at C = 256.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from draligned.runner import run_study
from draligned.study import load_study
from draligned.workers import in_workers, run_loop

REPO = Path(__file__).resolve().parent.parent
SEARCHES = 4
TARGETS = {64: 576.0, 256: 1000.0}


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
    parsed from the bytes received (its head's ``content-length``, its JSON body's messages), held
    ``latency_s`` by a timer on the loop (no task per request) and answered by its turn."""

    def __init__(self, latency_s: float, served: Any, first: Any, last: Any) -> None:
        self.latency_s, self.served, self.first, self.last = latency_s, served, first, last
        self.buffer, self.transport = b"", cast(asyncio.Transport, None)

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
            if self.first.value == 0.0:
                self.first.value = time.time()
            done = sum(1 for m in json.loads(body)["messages"] if m["role"] == "tool")
            asyncio.get_running_loop().call_later(self.latency_s, self.answer, done)

    def answer(self, done: int) -> None:
        if not self.transport.is_closing():
            self.served.value += 1
            self.transport.write(_reply(done, self.served.value))
            self.last.value = time.time()


def serve(sock: socket.socket, latency_s: float, served: Any, first: Any, last: Any) -> None:
    """The loopback server process: counts the replies and keeps the times of the first request and the last
    reply (in shared values only it writes)."""

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(
            lambda: ChatServer(latency_s, served, first, last), sock=sock, backlog=1024)
        served.value = 0  # started (its imports done): its CPU from now on is the requests'
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


def _cpu(server_pid: int | None) -> dict[str, float]:
    """CPU seconds (user + system) so far of this process (the study's parent, the final reindex included),
    of its ended children (the worker processes, their start included) and of the loopback server."""
    own, ended = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks = Path(f"/proc/{server_pid}/stat").read_text().rpartition(")")[2].split()[11:13]  # utime, stime
    return {"parent": own.ru_utime + own.ru_stime, "workers": ended.ru_utime + ended.ru_stime,
            "server": sum(int(t) for t in ticks) / os.sysconf("SC_CLK_TCK")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--inflight", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs-per-slot", type=int, default=4, help="runs per lane (study size = this x C)")
    args = ap.parse_args()
    context = multiprocessing.get_context("spawn")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    served, first, last = context.RawValue("q", -1), context.RawValue("d", 0.0), context.RawValue("d", 0.0)
    server = context.Process(target=serve, args=(sock, args.latency_ms / 1000, served, first, last), daemon=True)
    server.start()
    while served.value < 0:  # until it serves
        time.sleep(0.05)
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    print(json.dumps({"machine": f"{os.cpu_count()} cores", "load_avg_1m": os.getloadavg()[0]}))
    try:
        for inflight in args.inflight:
            for workers in args.workers:
                with tempfile.TemporaryDirectory() as tmp:
                    study = load_study(study_file(Path(tmp), base_url, inflight, args.runs_per_slot * inflight))
                    before, first.value = served.value, 0.0
                    cpu0 = _cpu(server.pid)
                    t0 = time.perf_counter()
                    result = run_loop(run_study(study, execute=in_workers(workers)))
                    wall = time.perf_counter() - t0
                    calls = served.value - before
                    cpu = {role: (after - cpu0[role]) * 1000 / calls for role, after in _cpu(server.pid).items()}
                ideal, steady = inflight / (args.latency_ms / 1000), calls / (last.value - first.value)
                print(json.dumps({
                    "inflight": inflight, "workers": workers, "runs": len(result.runs),
                    "failed": result.statuses.get("failed", 0), "model_calls": calls, "wall_s": round(wall, 2),
                    "calls_per_s": round(steady, 1), "efficiency": round(steady / ideal, 3),
                    "target_calls_per_s": TARGETS.get(inflight), "ideal_calls_per_s": ideal,
                    "calls_per_s_incl_start_and_reindex": round(calls / wall, 1),
                    "cpu_ms_per_call": {role: round(ms, 2) for role, ms in cpu.items()},
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                }), flush=True)
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
