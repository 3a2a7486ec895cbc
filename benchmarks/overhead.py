"""Per-call harness overhead at zero model latency (issue 14), side by side with inspect_ai.

Run: ``PYTHONPATH=$PWD python benchmarks/overhead.py [--runs 200] [--reps 3] [--profile FILE]``
(from the checkout; ``pip install -e '.[bench]'`` brings inspect_ai 0.3.285 for the comparison;
without it the inspect rows are skipped and say so).

The workload is issue 14's: runs of 5 model calls and 4 tool calls each (search, read, write_report,
search, then a text-only final), an in-process zero-latency scripted model, full archiving (H00).
Every repetition runs, in turn: draligned with the scripted model; draligned ``openai-chat`` through
the official ``openai`` SDK on its default transport here (``retry.http_client = "aiohttp"``) against a
loopback chat-completions server in a separate process (its CPU is not counted); with
``--only openai-chat-httpx``, the same on the SDK's httpx transport; inspect_ai with its default logging;
inspect_ai with minimised logging; then, when an ``openai-chat`` study ran, ``benchmarks/bare_sdk.py``
in a process of its own (no draligned imported): the bare SDK with the bodies that study sent, against the
same server (``bare_sdk_create``: ``chat.completions.create``; ``bare_sdk_post``: the lower-level request path
draligned uses), with the calls/s 2 cores could carry for the SDK and the server alone: the floor under any
harness on this SDK. The studies run as ``draligned run`` runs them (``run_loop``). It prints one JSON
object: per system the harness ms per model call (from the first model request to the last model reply, as
the model saw them, over calls - 1: the study's fixed setup and final reindex, or inspect's log finish,
are not per-call costs) and end to end (the whole ``run_study`` or ``eval`` over calls), the best and
median over repetitions, the targets next to them and the ratios inspect / draligned.

Targets (2 cores): draligned scripted <= 1.0 ms per model call, draligned openai-chat <= 2.0 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from machine import describe

from draligned.models import ModelAPI
from draligned.models.base import PROTOCOLS
from draligned.models.options import OPTIONS, NoOptions
from draligned.records import Message, ModelCallEvent, ModelReply, ToolCall, ToolSpec, Usage
from draligned.runner import RunProgress, run_study
from draligned.study import load_study
from draligned.workers import run_loop

REPO = Path(__file__).resolve().parent.parent
CARD = REPO / "factor_cards/travel_budget_en.json"
CORPUS = REPO / "corpora/demo/corpus.jsonl"
URL = json.loads(CORPUS.read_text().splitlines()[0])["url"]
CALLS_PER_RUN = 5
CONCURRENCY = 16
TARGETS_MS = {"draligned_scripted": 1.0, "draligned_openai_chat": 2.0, "draligned_openai_chat_httpx": 2.0}


def script(turn: int) -> tuple[str | None, list[tuple[str, dict[str, str]]]]:
    """The scripted agent's reply at ``turn``: (text, [(tool, arguments)]); 4 tool calls, then a final."""
    calls: list[list[tuple[str, dict[str, str]]]] = [
        [("search", {"query": "japan budget trip for two"})],
        [("read", {"url": URL})],
        [("write_report", {"text": "Draft: Kansai for a week on the budget."})],
        [("search", {"query": "kyoto cheap hotels"})],
    ]
    if turn < len(calls):
        return None, calls[turn]
    return "Final report: a week in Kansai (Osaka, Kyoto, Nara) fits the budget.", []


STAMPS: list[float] = []
"""perf_counter at every call of the scripted model (the harness-time window)."""


class ScriptedAgent(ModelAPI):
    """A zero-latency in-process model (benchmark only): the script above, answered from the context length."""

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        STAMPS.append(time.perf_counter())
        turn = sum(m.role == "assistant" for m in messages)
        text, calls = script(turn)
        tool_calls = [ToolCall(id=f"call_{turn}_{i}", name=n, arguments=a, raw_arguments=json.dumps(a))
                      for i, (n, a) in enumerate(calls)]
        body = {"model": self.declaration.model, "messages": [m.model_dump(mode="json") for m in messages],
                "tools": [t.model_dump(mode="json") for t in tools]}
        raw = json.dumps({"text": text, "calls": [[n, a] for n, a in calls]})
        return ModelReply(text=text, tool_calls=tool_calls, finish_reason="tool_calls" if calls else "stop",
                          usage=Usage(input_tokens=100, output_tokens=20), model_echo=self.declaration.model,
                          request_body=body, raw_response=raw)


PROTOCOLS["bench-scripted"] = f"{__name__}:ScriptedAgent"
OPTIONS["bench-scripted"] = NoOptions


def write_study(tmp: Path, runs: int, protocol: str, base_url: str | None = None, http_client: str = "aiohttp") -> Path:
    """A study of ``runs`` H00 runs (one card, arms P and Q, runs/2 seeds) of the given protocol (a remote one
    at ``base_url`` through the SDK's ``http_client`` transport)."""
    archive = tmp / f"archive-{protocol}-{time.monotonic_ns()}"
    model = (f'base_url = "{base_url}"\napi_key_env = "BENCH_KEY"\nretry = {{ http_client = "{http_client}" }}\n'
             if base_url else "")
    path = tmp / f"{protocol}.toml"
    path.write_text(f"""name = "overhead"
cards = ["{CARD}"]
arms = ["P", "Q"]
harnesses = ["H00"]
seeds = {runs // 2}
concurrency = {CONCURRENCY}
archive = "{archive}"
corpus = "{CORPUS}"

[budget]
max_model_calls = 10
max_tool_calls = 10

[[models]]
name = "bench"
protocol = "{protocol}"
model = "bench-1"
{model}""")
    return path


def chat_reply(request: dict[str, Any]) -> bytes:
    """The loopback server's chat completion for ``request``: the same script, by assistant turns so far."""
    turn = sum(m.get("role") == "assistant" for m in request["messages"])
    text, calls = script(turn)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": f"call_{turn}_{i}", "type": "function",
                                  "function": {"name": n, "arguments": json.dumps(a)}}
                                 for i, (n, a) in enumerate(calls)]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return json.dumps({"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": request["model"],
                       "choices": [choice],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()


def serve_chat(port_out: Any) -> None:
    """A minimal HTTP/1.1 keep-alive chat-completions server (its own process: its CPU is not the harness's).
    ``GET /stats`` returns and resets [first request time, last reply time, requests] (CLOCK_MONOTONIC,
    which the harness process shares)."""
    stats: list[float] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                now = time.monotonic()
                length = next((int(h.split(":", 1)[1]) for h in head[1:] if h.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(length)
                if head[0].startswith("GET /stats"):
                    out = json.dumps(stats[:1] + stats[-1:] + [len(stats) // 2]).encode()
                    stats.clear()
                else:
                    out = chat_reply(json.loads(body))
                    stats.append(now)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(out), out))
                await writer.drain()
                if not head[0].startswith("GET"):
                    stats.append(time.monotonic())
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_out.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()
    asyncio.run(main())


def server_window(port: int) -> tuple[float, int]:
    """(seconds from the first request to the last reply, requests) since the last look."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as r:  # noqa: S310 - loopback
        first, last, n = json.loads(r.read())
    return last - first, int(n)


def time_draligned(study_path: Path, window: Callable[[], tuple[float, int]] | None,
                   profile: cProfile.Profile | None = None, bodies: list[Any] | None = None) -> dict[str, float]:
    """Run the study: harness ms per model call over the model-call window (first request to last reply, as
    the model saw them; ``window`` None: the scripted model's stamps), the harness process's CPU ms per call
    from the first run's start to the last run's end, and wall ms per call end to end (study setup and the
    final reindex included). ``bodies``, when given, receives every archived request body."""
    study = load_study(study_path)
    marks: list[float] = []

    def progress(p: RunProgress) -> None:  # the CPU window: first run started to last ended
        if p.done in (0, p.total):
            marks.append(time.process_time())
    STAMPS.clear()
    t0 = time.perf_counter()
    if profile is not None:
        profile.enable()
    result = run_loop(run_study(study, progress, verify=False))  # as `draligned run` runs it (the collector set)
    if profile is not None:
        profile.disable()
    wall = time.perf_counter() - t0
    records = [result.archive.find_run(run.run_id) for run in result.runs]  # read after the timing
    calls = sum(r.counters.model_calls for r in records)
    bad = [r.status_reason for r in records if r.status != "completed"]
    if bad or calls != CALLS_PER_RUN * len(records):
        raise SystemExit(f"benchmark study did not run as scripted: {calls} calls, failures {bad[:3]}")
    if bodies is not None:
        bodies.extend(json.loads(result.archive.get_blob(e.request_blob))
                      for r in records for e in r.events if isinstance(e, ModelCallEvent))
    span, seen = (STAMPS[-1] - STAMPS[0], len(STAMPS)) if window is None else window()
    cpu = marks[-1] - marks[0]
    assert seen == calls, (seen, calls)
    return {"ms_per_call": 1000 * span / (calls - 1), "cpu_ms_per_call": 1000 * cpu / (calls - 1),
            "end_to_end_ms_per_call": 1000 * wall / calls}


def time_inspect(runs: int, log_dir: Path, minimised: bool) -> dict[str, float]:
    from overhead_inspect import CPU, run_inspect
    from overhead_inspect import STAMPS as INSPECT_STAMPS
    wall, calls = run_inspect(runs, log_dir, minimised, CONCURRENCY)
    span, cpu = INSPECT_STAMPS[-1] - INSPECT_STAMPS[0], CPU[-1] - CPU[0]
    return {"ms_per_call": 1000 * span / (calls - 1), "cpu_ms_per_call": 1000 * cpu / (calls - 1),
            "end_to_end_ms_per_call": 1000 * wall / calls}


def time_bare_sdk(port: int, server_pid: int | None, bodies_file: Path) -> dict[str, dict[str, float]]:
    """benchmarks/bare_sdk.py in a process of its own (no draligned imported): the bare SDK's CPU per call with
    the same bodies against the same server, ``create`` and the lower-level ``post``."""
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("bare_sdk.py")), "--port", str(port),
                          "--bodies", str(bodies_file), "--concurrency", str(CONCURRENCY),
                          *(["--server-pid", str(server_pid)] if server_pid else [])],
                         capture_output=True, text=True, check=True)
    return cast(dict[str, dict[str, float]], json.loads(out.stdout))


def summary(reps: list[dict[str, float]], target: float | None) -> dict[str, float | None]:
    per_call = [r["ms_per_call"] for r in reps]
    return {"ms_per_call_best": round(min(per_call), 3), "ms_per_call_median": round(statistics.median(per_call), 3),
            "target_ms": target, "cpu_ms_per_call_best": round(min(r["cpu_ms_per_call"] for r in reps), 3),
            "end_to_end_ms_per_call_best": round(min(r["end_to_end_ms_per_call"] for r in reps), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3, help="repetitions; the systems alternate within each")
    ap.add_argument("--only", choices=["scripted", "openai-chat", "openai-chat-httpx", "inspect"], action="append",
                    help="run only these systems (repeatable; openai-chat-httpx, the SDK's httpx transport "
                         "declared with retry.http_client, runs only when named)")
    ap.add_argument("--profile", help="write a cProfile of the draligned runs (with --only: that system) here")
    args = ap.parse_args()
    only = set(args.only or ["scripted", "openai-chat", "inspect"])
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        print("inspect_ai is not installed (pip install -e '.[bench]'): its rows are skipped", file=sys.stderr)
        only.discard("inspect")
    figures: dict[str, list[dict[str, float]]] = {}
    prof = cProfile.Profile() if args.profile else None
    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve_chat, args=(ports,), daemon=True)
    server.start()
    port = ports.get(timeout=30)
    os.environ["BENCH_KEY"] = "bench-key"
    bare: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bodies_file = root / "bodies.json"
        for rep in range(args.reps):
            if "scripted" in only:
                figures.setdefault("draligned_scripted", []).append(
                    time_draligned(write_study(root, args.runs, "bench-scripted"), None, prof))
            for system, name, client in (("openai-chat", "draligned_openai_chat", "aiohttp"),
                                         ("openai-chat-httpx", "draligned_openai_chat_httpx", "httpx")):
                if system in only:
                    sent: list[Any] | None = [] if system == "openai-chat" and not bodies_file.exists() else None
                    figures.setdefault(name, []).append(time_draligned(
                        write_study(root, args.runs, "openai-chat", f"http://127.0.0.1:{port}/v1", client),
                        lambda: server_window(port), prof, sent))
                    if sent:
                        bodies_file.write_text(json.dumps(sent))
            if bodies_file.exists():  # the bare SDK with the bodies the openai-chat study sent
                for way, figure in time_bare_sdk(port, server.pid, bodies_file).items():
                    bare.setdefault(way, []).append(figure)
                server_window(port)  # its requests are not the next study's
            if "inspect" in only:
                for minimised, name in ((False, "inspect_default_logging"), (True, "inspect_minimised_logging")):
                    figures.setdefault(name, []).append(time_inspect(args.runs, root / f"logs-{name}-{rep}", minimised))
    server.terminate()
    if prof is not None:
        prof.dump_stats(args.profile)
    out: dict[str, Any] = {
        "workload": f"{args.runs} runs x {CALLS_PER_RUN} model calls and 4 tool calls, H00, full archiving, "
                    f"{CONCURRENCY} runs in flight, {args.reps} repetitions alternating the systems",
        "machine": describe(),
        "ms_per_call": "harness wall time per model call: first model request to last model reply, / (calls - 1)",
        "cpu_ms_per_call": "the harness process's CPU time from the first run's start to the last run's end "
                           "(inspect: first to last model call), / (calls - 1): what a loaded machine inflates least"}
    for name, reps in figures.items():
        out[name] = summary(reps, TARGETS_MS.get(name))
    for way, reps in bare.items():
        best = min(reps, key=lambda r: r["cpu_ms_per_call"])
        out[f"bare_sdk_{way}"] = {"cpu_ms_per_call_best": best["cpu_ms_per_call"],
                                  "cpu_ms_per_call_median": round(statistics.median(
                                      r["cpu_ms_per_call"] for r in reps), 3),
                                  "server_cpu_ms_per_call": best["server_cpu_ms_per_call"],
                                  "ceiling_calls_per_s_2_cores": best["ceiling_calls_per_s_2_cores"]}
    base = out.get("draligned_scripted")
    for name in ("inspect_default_logging", "inspect_minimised_logging"):
        if base and name in out:
            out[f"ratio_{name}_to_draligned_scripted"] = {
                k: round(out[name][k] / base[k], 2) for k in ("ms_per_call_best", "cpu_ms_per_call_best")}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn", force=True)
    main()
