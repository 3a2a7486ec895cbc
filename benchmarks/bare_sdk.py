"""The floor under every harness on the ``openai`` SDK: the bare SDK's CPU per chat completions call (issue 14).

Run by ``benchmarks/overhead.py`` (its ``bare_sdk`` rows) in a process of its own that imports no draligned:
``python benchmarks/bare_sdk.py --port P --bodies FILE [--concurrency 16]``. ``FILE`` holds a JSON list of
request bodies (overhead.py writes the bodies its ``openai-chat`` study sent: the same growing contexts).
Each body is sent once, ``--concurrency`` at a time, against the loopback server of overhead.py, through
``AsyncOpenAI(..., http_client=DefaultAioHttpClient())`` (the SDK's aiohttp transport, as draligned's
default), two ways:

- ``create``: ``client.chat.completions.create(**body)``, as an application calls it (the SDK's transform
  of the typed parameters, its response parsed into a ``ChatCompletion``);
- ``post``: ``client.post("/chat/completions", content=<the JSON bytes>)`` returning the raw response
  (the SDK's lower-level request path that draligned uses: its auth, headers, timeout and error types,
  no transform, the reply's text decoded with ``json.loads``).

It prints one JSON object: the CPU ms (user + system) per call of this process over each pass (the
connections opened by a warm-up first) and of the server over the same pass, and the calls/s that 2 cores
could carry if they did nothing but this SDK and this server: 2000 / (SDK ms + server ms).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import time
from pathlib import Path
from typing import Any

import openai
from cpu_all import live_cpu_s


def create_kwargs(body: dict[str, Any], params: set[str]) -> dict[str, Any]:
    """``body`` as ``create``'s keyword arguments: the fields it names, the others in ``extra_body``."""
    known = {k: v for k, v in body.items() if k in params}
    extra = {k: v for k, v in body.items() if k not in params}
    return known | ({"extra_body": extra} if extra else {})


async def run(port: int, bodies: list[dict[str, Any]], concurrency: int, server_pid: int | None) -> dict[str, Any]:
    client = openai.AsyncOpenAI(api_key="bench-key", base_url=f"http://127.0.0.1:{port}/v1",
                                http_client=openai.DefaultAioHttpClient())
    params = set(inspect.signature(client.chat.completions.create).parameters)
    gate = asyncio.Semaphore(concurrency)
    headers = {"Content-Type": "application/json", "X-Stainless-Raw-Response": "true"}

    async def create(body: dict[str, Any]) -> None:
        async with gate:
            reply = await client.chat.completions.create(**create_kwargs(body, params))
            assert reply.choices, reply

    async def post(body: dict[str, Any]) -> None:
        async with gate:
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            raw = await client.post("/chat/completions", cast_to=object, content=content,
                                    options={"headers": headers})
            assert json.loads(raw.text)["choices"], raw.text

    out: dict[str, Any] = {}
    for name, one in (("create", create), ("post", post)):
        await asyncio.gather(*[one(b) for b in bodies[:50]])  # the connections opened, the code paths warm
        own, server, t0 = time.process_time(), live_cpu_s(server_pid) if server_pid else 0.0, time.perf_counter()
        await asyncio.gather(*[one(b) for b in bodies])
        wall = time.perf_counter() - t0
        sdk_ms = 1000 * (time.process_time() - own) / len(bodies)
        server_ms = 1000 * (live_cpu_s(server_pid) - server) / len(bodies) if server_pid else None
        out[name] = {"cpu_ms_per_call": round(sdk_ms, 3), "wall_ms_per_call": round(1000 * wall / len(bodies), 3),
                     "server_cpu_ms_per_call": None if server_ms is None else round(server_ms, 3),
                     "ceiling_calls_per_s_2_cores": round(2000 / (sdk_ms + (server_ms or 0.0)), 1)}
    await client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bodies", required=True, help="a JSON list of chat completions request bodies")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--server-pid", type=int, help="the loopback server's process id (its CPU per call)")
    args = ap.parse_args()
    bodies = json.loads(Path(args.bodies).read_text())
    print(json.dumps(asyncio.run(run(args.port, bodies, args.concurrency, args.server_pid))))


if __name__ == "__main__":
    main()
