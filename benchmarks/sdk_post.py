"""CPU per model request through each provider SDK and HTTP transport (issue 14's SDK path, in isolation).

Run: ``PYTHONPATH=$PWD python benchmarks/sdk_post.py [--posts 1500] [--reps 3]``

For ``openai-chat``, ``openai-responses`` and ``anthropic``, each with ``retry.http_client = "aiohttp"``
(the default) and ``"httpx"``, it sends ``--posts`` requests of a 10 KB body through the model's own
``post`` (``RemoteModel.post_json``: the SDK's request path, its auth, headers and error types), 16 at a
time, to the loopback server of benchmarks/overhead.py in a separate process. It prints one JSON object:
per protocol and transport the harness process's CPU ms per request (best and median over repetitions),
and the httpx / aiohttp ratio. No run, tool or archive work is included: overhead.py measures the whole
call (target: <= 2.0 ms per openai-chat model call); this shows the part the SDK and its transport take.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from typing import Any

from machine import describe
from overhead import serve_chat

from draligned.models import ModelDeclaration, get_model
from draligned.models.remote import RemoteModel

BODY = {"model": "bench-1", "messages": [{"role": "user", "content": "x" * 2000}] * 5}
CONCURRENCY = 16
PROTOCOLS = ("openai-chat", "openai-responses", "anthropic")
CLIENTS = ("aiohttp", "httpx")


async def cpu_ms_per_post(protocol: str, client: str, port: int, posts: int) -> float:
    """CPU ms per request of ``posts`` requests (after 50 to open the connections)."""
    base = f"http://127.0.0.1:{port}" + ("" if protocol == "anthropic" else "/v1")
    model = get_model(ModelDeclaration(name="bench", protocol=protocol, model="bench-1", base_url=base,
                                       retry={"http_client": client}))
    assert isinstance(model, RemoteModel)
    sdk_client, gate = model.client(), asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with gate:
            await model.post(sdk_client, BODY, 60.0)
    await asyncio.gather(*[one() for _ in range(50)])
    start = time.process_time()
    await asyncio.gather(*[one() for _ in range(posts)])
    return 1000 * (time.process_time() - start) / posts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--posts", type=int, default=1500)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve_chat, args=(ports,), daemon=True)
    server.start()
    port = ports.get(timeout=30)
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for protocol in PROTOCOLS:
            for client in CLIENTS:
                figures.setdefault((protocol, client), []).append(
                    asyncio.run(cpu_ms_per_post(protocol, client, port, args.posts)))
    server.terminate()
    out: dict[str, Any] = {
        "workload": f"{args.posts} requests of {len(json.dumps(BODY))} bytes per protocol and transport, "
                    f"{CONCURRENCY} in flight, loopback server in another process, {args.reps} repetitions",
        "machine": describe(),
        "cpu_ms_per_request": "the harness process's CPU time per request through RemoteModel.post (SDK + transport)"}
    for protocol in PROTOCOLS:
        row = {client: {"best": round(min(figures[protocol, client]), 3),
                        "median": round(statistics.median(figures[protocol, client]), 3)} for client in CLIENTS}
        row["httpx_to_aiohttp"] = round(row["httpx"]["best"] / row["aiohttp"]["best"], 2)
        out[protocol] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn", force=True)
    main()
