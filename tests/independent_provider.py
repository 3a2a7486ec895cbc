"""An independent fake LLM provider on loopback, written from the public wire formats (stdlib only).

It speaks OpenAI chat completions (``POST /v1/chat/completions``), the OpenAI responses API
(``POST /v1/responses``) and Anthropic messages (``POST /v1/messages``), enough for a draligned H00
run (``search``, then ``submit_report``) and an evaluator read (a JSON answer). It is the upstream
behind the real LiteLLM proxy in ``benchmarks/gateway_litellm.py``; it shares no code with
``tests/loopback_*.py`` or ``tests/fake_providers.py``.

The responses endpoint behaves as the API documents for ``store = false``: nothing is kept, so an
``item_reference`` or a ``previous_response_id`` is "not found" (404), a reasoning item comes back
with ``encrypted_content`` only when ``include`` asks for ``reasoning.encrypted_content``, a
reasoning item passed back without it is "not found" (404), and a ``function_call`` passed back
without the reasoning item that preceded it is refused (400).

``State.headers`` adds response headers to every reply (a gateway's, from its documentation).
``--fail-first N`` answers the first N requests with HTTP 500 (``State.fail_status``, e.g. 429) and
``--fail-every K`` every K-th one, so a gateway's own retries show up. Every request is kept in
``State.requests`` and, with ``--log``, appended to a file as one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPORT = "A short report: the budget option fits; sources p001 and p002."


class State:
    """Counters, the issued reasoning items and stored responses, shared by the handler threads."""

    def __init__(self, fail_first: int = 0, fail_every: int = 0, log: str | None = None,
                 model: str | None = None, sealed: bool = True, fail_status: int = 500,
                 headers: list[tuple[str, str]] | None = None) -> None:
        self.fail_first, self.fail_every, self.log, self.model = fail_first, fail_every, log, model
        self.fail_status = fail_status  # 429 for a burst of rate limits (sent with retry-after: 0)
        self.headers = headers or []  # extra response headers, e.g. a gateway's documented ones
        self.sealed = sealed  # False: reasoning items come without encrypted_content, as through a gateway
        self.requests: list[dict[str, Any]] = []
        self.count = itertools.count()
        self.lock = threading.Lock()
        self.issued: dict[str, str] = {}  # reasoning id -> encrypted_content
        self.calls: dict[str, str] = {}  # function_call call_id -> reasoning id that preceded it
        self.stored: set[str] = set()


def wants_json(body: dict[str, Any]) -> dict[str, Any]:
    """The evaluator's answer: its prompt names ``labels`` (request read) or ``items`` (document read)."""
    return {"labels": []} if "request_id" in json.dumps(body) else {"items": []}


def next_tool(body: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """The agent's next tool call: ``search``, then ``submit_report`` after one tool result; None for a final."""
    if not body.get("tools"):
        return None
    text = json.dumps(body.get("messages") or body.get("input") or [])
    results = sum(text.count(k) for k in ('"role": "tool"', '"tool_result"', '"function_call_output"'))
    return [("search", {"query": "budget"}), ("submit_report", {"content": REPORT})][results] if results < 2 else None


def chat(state: State, body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
    model = state.model or body["model"]
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    if tool := next_tool(body):
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{n}", "type": "function", "function": {"name": tool[0], "arguments": json.dumps(tool[1])}}]}
        finish = "tool_calls"
    else:
        content = REPORT if body.get("tools") else json.dumps(wants_json(body))
        message, finish = {"role": "assistant", "content": content}, "stop"
    return 200, {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1767225600, "model": model,
                 "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                 "usage": usage}


def anthropic(state: State, body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
    model = state.model or body["model"]
    if tool := next_tool(body):
        content: list[dict[str, Any]] = [{"type": "tool_use", "id": f"toolu_{n}", "name": tool[0], "input": tool[1]}]
        stop = "tool_use"
    else:
        text = REPORT if body.get("tools") else json.dumps(wants_json(body))
        content, stop = [{"type": "text", "text": text}], "end_turn"
    return 200, {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
                 "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 120, "output_tokens": 30}}


def not_found(message: str) -> tuple[int, dict[str, Any]]:
    return 404, {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}


def responses(state: State, body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
    store = body.get("store", True)  # the API's default is to store
    previous = body.get("previous_response_id")
    if previous is not None and previous not in state.stored:
        return not_found(f"Previous response with id '{previous}' not found.")
    last_reasoning: str | None = None
    for item in body.get("input") if isinstance(body.get("input"), list) else []:
        kind = item.get("type")
        if kind == "item_reference" or (kind == "reasoning" and not item.get("encrypted_content")):
            if previous is None:  # nothing persisted to look the id up in
                return not_found(f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                                 "`store` is set to false. Try again with `store` set to true, or remove this "
                                 "item from your input.")
        if kind == "reasoning":
            if item.get("encrypted_content") and state.issued.get(item.get("id", "")) != item["encrypted_content"]:
                return 400, {"error": {"message": "The encrypted content could not be verified.",
                                       "type": "invalid_request_error", "param": "input", "code": None}}
            last_reasoning = item.get("id")
        if kind == "function_call":
            need = state.calls.get(item.get("call_id", ""))
            if need and last_reasoning != need and previous is None:
                return 400, {"error": {"message": f"Item '{item.get('id', item.get('call_id'))}' of type "
                                       f"'function_call' was provided without its required 'reasoning' item: "
                                       f"'{need}'.", "type": "invalid_request_error", "param": "input",
                                       "code": None}}
    rid, encrypted = f"rs_{n}", f"gAAAAB-{n}-sealed"
    reasoning: dict[str, Any] = {"type": "reasoning", "id": rid, "summary": []}
    if state.sealed and "reasoning.encrypted_content" in (body.get("include") or []):
        reasoning["encrypted_content"] = encrypted
    with state.lock:
        state.issued[rid] = encrypted
    if tool := next_tool(body):
        call = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": tool[0],
                "arguments": json.dumps(tool[1]), "status": "completed"}
        with state.lock:
            state.calls[f"call_{n}"] = rid
        output = [reasoning, call]
    else:
        text = REPORT if body.get("tools") else json.dumps(wants_json(body))
        output = [reasoning, {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    response_id = f"resp_{n}"
    if store:
        with state.lock:
            state.stored.add(response_id)
    return 200, {"id": response_id, "object": "response", "created_at": 1767225600, "status": "completed",
                 "model": state.model or body["model"], "output": output, "store": store,
                 "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0},
                           "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 12},
                           "total_tokens": 150}}


ROUTES = {"/v1/chat/completions": chat, "/chat/completions": chat, "/v1/messages": anthropic,
          "/v1/responses": responses, "/responses": responses}


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.loads(raw or b"{}")
            n = next(state.count)
            state.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
            if state.log:
                with state.lock, open(state.log, "a") as f:
                    f.write(json.dumps({"n": n, "path": self.path, "headers": dict(self.headers.items()),
                                        "body": body}) + "\n")
            route = ROUTES.get(self.path.split("?")[0])
            if route is None:
                status, reply = not_found(f"no route {self.path}")
            elif n < state.fail_first or (state.fail_every and n % state.fail_every == 0):
                status, reply = state.fail_status, {"error": {"message": "upstream overloaded",
                                                               "type": "server_error"}}
            else:
                status, reply = route(state, body, n)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("x-request-id", f"req_{n}")
            if status == 429:
                self.send_header("retry-after", "0")
            for name, value in state.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def serve(state: State, port: int = 0) -> ThreadingHTTPServer:
    """Start the provider on 127.0.0.1 in a daemon thread; the caller shuts it down."""
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(state))
    # Polled often so that shutdown() returns at once instead of after up to half a second.
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--log")
    p.add_argument("--model", help="model id to echo (default: the requested one)")
    a = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(State(a.fail_first, a.fail_every, a.log, a.model)))
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
