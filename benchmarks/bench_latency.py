"""Latency-bound throughput through the ``openai-chat`` SDK path, with ``--workers 1`` and ``--workers 2``.

Run: ``python benchmarks/bench_latency.py [--latency-ms 100] [--inflight 64 256] [--workers 1 2]`` (from the
checkout). A loopback chat-completions server in its own process (asyncio, HTTP/1.1 keep-alive) holds
every request ``L`` ms, then answers: four ``search`` calls, then ``submit_report`` (5 model calls and 4
tool calls per run, full archiving). For each C (runs in flight: the study's ``concurrency`` and the
model's ``max_connections``) and each worker count, a study of ``--runs-per-slot`` × C runs is timed from
``run_study`` to its end (worker start and the final reindex included) and one JSON line printed:
model calls per second from the first request to the last reply (what the runs sustain; the figure with
study start, worker start and the final reindex is printed next to it), and efficiency against the
ideal C / L. Targets (issue 14, 2 cores):
>= 576 calls/s (0.9 of C/L) at C = 64, >= 1,000 calls/s at C = 256.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from draligned.runner import run_study
from draligned.study import load_study
from draligned.workers import in_workers

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


def serve(sock: socket.socket, latency_s: float, served: Any, first: Any, last: Any) -> None:
    """The loopback server process: each request is held ``latency_s``, then answered by its turn; counts the
    replies and keeps the times of the first request and the last reply."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = json.loads(await reader.readexactly(length))
                if first.value == 0.0:
                    first.value = time.time()
                done = sum(1 for m in body["messages"] if m["role"] == "tool")
                await asyncio.sleep(latency_s)
                with served.get_lock():
                    served.value += 1
                    number = served.value
                writer.write(_reply(done, number))
                last.value = time.time()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock, backlog=1024)
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
    served, first, last = context.Value("q", 0), context.Value("d", 0.0), context.Value("d", 0.0)
    server = context.Process(target=serve, args=(sock, args.latency_ms / 1000, served, first, last), daemon=True)
    server.start()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    print(json.dumps({"machine": f"{os.cpu_count()} cores", "load_avg_1m": os.getloadavg()[0]}))
    try:
        for inflight in args.inflight:
            for workers in args.workers:
                with tempfile.TemporaryDirectory() as tmp:
                    study = load_study(study_file(Path(tmp), base_url, inflight, args.runs_per_slot * inflight))
                    before, first.value = served.value, 0.0
                    t0 = time.perf_counter()
                    result = asyncio.run(run_study(study, execute=in_workers(workers)))
                    wall = time.perf_counter() - t0
                    calls = served.value - before
                ideal, steady = inflight / (args.latency_ms / 1000), calls / (last.value - first.value)
                print(json.dumps({
                    "inflight": inflight, "workers": workers, "runs": len(result.runs),
                    "failed": result.statuses.get("failed", 0), "model_calls": calls, "wall_s": round(wall, 2),
                    "calls_per_s": round(steady, 1), "efficiency": round(steady / ideal, 3),
                    "target_calls_per_s": TARGETS.get(inflight), "ideal_calls_per_s": ideal,
                    "calls_per_s_incl_start_and_reindex": round(calls / wall, 1),
                }), flush=True)
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
