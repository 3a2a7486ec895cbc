"""Loopback HTTP servers speaking enough of three wire formats to drive the real SDKs.

``FakeProvider(protocol)`` serves OpenAI chat completions (``/v1/chat/completions``),
OpenAI responses (``/v1/responses``) or Anthropic messages (``/v1/messages``). Each
request first takes the next item of ``script`` (an HTTP error, a slow answer, a raw body
or a reply built with ``Wire``); when the script is empty a small deterministic H00 agent
answers: search (words of the user message), read the first result, save a draft,
submit. Every request is logged with its headers and JSON body.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

Call = tuple[str, str, str]  # (id, name, raw argument text)


@dataclass
class Error:
    """An HTTP error answer."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "injected error"


@dataclass
class Slow:
    """Answer only after ``seconds`` (longer than the client timeout: a timeout)."""

    seconds: float


@dataclass
class Raw:
    """A 200 answer with exactly this body text."""

    text: str


class Wire:
    """Reply bodies and request readers for one protocol."""

    def __init__(self, protocol: str, model_echo: str) -> None:
        self.protocol = protocol
        self.echo = model_echo

    # ------------------------------------------------------------------ replies
    def usage(self, inp: int = 100, out: int = 20, reasoning: int = 0, cached: int = 0) -> dict:
        if self.protocol == "openai-chat":
            return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
                    "prompt_tokens_details": {"cached_tokens": cached},
                    "completion_tokens_details": {"reasoning_tokens": reasoning}}
        if self.protocol == "openai-responses":
            return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                    "input_tokens_details": {"cached_tokens": cached},
                    "output_tokens_details": {"reasoning_tokens": reasoning}}
        return {"input_tokens": inp - cached, "cache_read_input_tokens": cached, "output_tokens": out,
                "output_tokens_details": {"reasoning_tokens": reasoning}}

    def reply(self, text: str | None = None, calls: list[Call] = (), finish: str | None = None,
              usage: dict | None = None, split: bool = False) -> dict:
        """A reply; ``split`` spreads text and calls over several choices/blocks/items as a gateway might."""
        usage = usage or self.usage()
        calls = list(calls)
        if self.protocol == "openai-chat":
            def choice(i: int, content: str | None, cs: list[Call], fin: str | None) -> dict:
                msg: dict[str, Any] = {"role": "assistant", "content": content}
                if cs:
                    msg["tool_calls"] = [{"id": c[0], "type": "function",
                                          "function": {"name": c[1], "arguments": c[2]}} for c in cs]
                return {"index": i, "message": msg, "finish_reason": fin}
            fin = finish or ("tool_calls" if calls else "stop")
            if split:
                parts = [choice(0, text, [], "stop")] + [choice(i + 1, None, [c], fin) for i, c in enumerate(calls)]
            else:
                parts = [choice(0, text, calls, fin)]
            return {"id": "chatcmpl-1", "object": "chat.completion", "model": self.echo, "choices": parts,
                    "usage": usage}
        if self.protocol == "openai-responses":
            msgs = [text] if not split or text is None else [text[: len(text) // 2], text[len(text) // 2:]]
            out: list[dict] = [{"type": "reasoning", "id": "rs_1", "summary": []}]
            out += [{"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": t, "annotations": []}]}
                    for i, t in enumerate(msgs) if t is not None]
            out += [{"type": "function_call", "id": f"fc_{c[0]}", "call_id": c[0], "name": c[1],
                     "arguments": c[2], "status": "completed"} for c in calls]
            body = {"id": "resp_1", "object": "response", "model": self.echo, "output": out, "usage": usage,
                    "status": "completed"}
            if finish == "length":
                body.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
            return body
        blocks: list[dict] = [{"type": "text", "text": text}] if text else []
        for c in calls:
            try:
                blocks.append({"type": "tool_use", "id": c[0], "name": c[1], "input": json.loads(c[2])})
            except json.JSONDecodeError:  # what a gateway passes on: the raw argument text
                blocks.append({"type": "tool_use", "id": c[0], "name": c[1], "input": c[2]})
        stop = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}.get(
            finish or ("tool_calls" if calls else "stop"), finish)
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": self.echo, "content": blocks,
                "stop_reason": stop, "usage": usage}

    def fragments(self, call_id: str, name: str, pieces: list[str]) -> dict:
        """A reply whose single tool call arrives as an id/name part followed by argument fragments."""
        if self.protocol == "anthropic":
            blocks = [{"type": "tool_use", "id": call_id, "name": name, "input": pieces[0]}]
            blocks += [{"type": "tool_use", "input": p} for p in pieces[1:]]
            return {"id": "msg_1", "type": "message", "role": "assistant", "model": self.echo,
                    "content": blocks, "stop_reason": "tool_use", "usage": self.usage()}
        choices = [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": pieces[0]}}]},
            "finish_reason": None}]
        choices += [{"index": i + 1, "message": {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"arguments": p}}]}, "finish_reason": "tool_calls"}
            for i, p in enumerate(pieces[1:])]
        return {"id": "chatcmpl-1", "model": self.echo, "choices": choices, "usage": self.usage()}

    # ------------------------------------------------------------------ requests
    def turns(self, body: dict) -> tuple[str, int, str]:
        """(user message, tool results so far, last tool result text) of a request body."""
        if self.protocol == "openai-chat":
            msgs = body["messages"]
            user = next(m["content"] for m in msgs if m["role"] == "user")
            results = [m["content"] for m in msgs if m["role"] == "tool"]
        elif self.protocol == "openai-responses":
            items = body["input"]
            user = next(i["content"] for i in items if i.get("role") == "user")
            results = [i["output"] for i in items if i.get("type") == "function_call_output"]
        else:
            user = body["messages"][0]["content"]
            results = [b["content"] for m in body["messages"] if isinstance(m["content"], list)
                       for b in m["content"] if b.get("type") == "tool_result"]
        return user, len(results), results[-1] if results else ""

    def agent(self, body: dict) -> dict:
        """The scripted H00 agent: search, read, write_report, submit_report."""
        user, step, last = self.turns(body)
        if step == 0:
            words = re.findall(r"\w+", user.split("\n\n")[-1])[:6]
            return self.reply(calls=[("call_s", "search", json.dumps({"query": " ".join(words)}))])
        if step == 1:
            url = (re.findall(r"URL: (\S+)", last) or ["https://none.example/"])[0]
            return self.reply(text="Reading the top result.", calls=[("call_r", "read", json.dumps({"url": url}))])
        report = f"Report for: {user[-120:]}\nBased on: {last[:80]}"
        if step == 2:
            return self.reply(calls=[("call_w", "write_report", json.dumps({"content": "Draft. " + report}))])
        return self.reply(calls=[("call_f", "submit_report", json.dumps({"content": "Final. " + report}))],
                          usage=self.usage(reasoning=0, cached=40))


class FakeProvider:
    """A threaded loopback server for one protocol (use as a context manager)."""

    PATHS = {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses",
             "anthropic": "/v1/messages"}

    def __init__(self, protocol: str, script: list | None = None, model_echo: str = "fake-model-2026-01-01",
                 delay_s: float = 0.0) -> None:
        self.protocol = protocol
        self.delay_s = delay_s
        self.in_flight = 0
        self.max_in_flight = 0
        self.wire = Wire(protocol, model_echo)
        self.script: list = list(script or [])
        self.log: list[dict] = []
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with provider._lock:
                    provider.log.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    item = provider.script.pop(0) if provider.script else None
                    provider.in_flight += 1
                    provider.max_in_flight = max(provider.max_in_flight, provider.in_flight)
                time.sleep(provider.delay_s)
                self._answer(body, item)

            def _answer(self, body: dict, item: Any) -> None:
                if self.path != provider.PATHS[provider.protocol]:
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if isinstance(item, Slow):
                    time.sleep(item.seconds)
                    item = None
                if isinstance(item, Error):
                    return self._send(item.status, {"error": {"type": "error", "message": item.message}},
                                      item.headers)
                if isinstance(item, Raw):
                    return self._send(200, item.text)
                return self._send(200, item if isinstance(item, dict) else provider.wire.agent(body))

            def _send(self, status: int, payload: Any, headers: dict | None = None) -> None:
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                with provider._lock:  # before writing: the client may send its next request at once
                    provider.in_flight -= 1
                try:
                    self.send_response(status)
                    for k, v in {"content-type": "application/json", **(headers or {})}.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def base_url(self) -> str:
        """What a model declaration's ``base_url`` must be (Anthropic: the host root)."""
        root = f"http://127.0.0.1:{self.server.server_address[1]}"
        return root if self.protocol == "anthropic" else root + "/v1"

    def __enter__(self) -> FakeProvider:
        # Polled often so that shutdown() returns at once instead of after up to half a second.
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def provider_study(tmp: Path, providers: dict[str, FakeProvider], cards: tuple[str, ...] = ("travel_budget_en.json",),
                   model_extra: str = "", study_extra: str = "", seeds: int = 1, key_env: str = "FAKE_PROVIDER_KEY",
                   retry: dict[str, float] | None = None) -> Path:
    """A study TOML over demo cards with one model per fake provider (named after its protocol)."""
    card_list = ", ".join(f'"{REPO / "factor_cards" / c}"' for c in cards)
    settings = ", ".join(f"{k} = {v}" for k, v in ({"initial_wait_s": 0.01, "timeout_s": 2.0} | (retry or {})).items())
    models = "".join(f"""
[[models]]
name = "{proto}"
protocol = "{proto}"
model = "fake-{proto}"
base_url = "{fp.base_url}"
api_key_env = "{key_env}"
retry = {{ {settings} }}
{model_extra}
""" for proto, fp in providers.items())
    path = tmp / "providers.toml"
    path.write_text(f"""name = "providers"
cards = [{card_list}]
seeds = {seeds}
concurrency = 4
archive = "archive"
corpus = "{REPO / 'corpora/demo/corpus.jsonl'}"
{study_extra}
[budget]
max_model_calls = 12
max_tool_calls = 12
{models}""")
    return path
