"""A second, independently written set of loopback provider servers (standard library only).

Written from the public wire formats, not from ``tests/fake_providers.py`` nor from the
provider code, as a stand-in for the checker's servers: one ``WireServer`` speaks one
protocol (``openai-chat``, ``openai-responses`` or ``anthropic``) and answers from a
*fault plan* (by global request number: an HTTP error status whose message quotes the credential
sent, with extra headers such as Retry-After; 502, a proxy's HTML page; -1, a hang-up with no
response; or 0, a stall of ``{"seconds": s}`` before a normal answer) and a *turn plan* (what the
agent says, chosen by how many tool results the request already carries, so every run sees the same
conversation whatever the interleaving of concurrent runs).

Turn kinds: ``malformed`` (a search call whose arguments are ``{}""``), ``split`` (one search call
whose JSON arguments are spread over two choices / content blocks / output items, plus a text part),
``split_ids`` (a search call announced with no arguments in one part and repeated under the same id
with its arguments in the next), ``two`` (write_report and submit_report in one reply), ``submit``,
``dropped`` (a tool-call finish with no tool call), ``length`` (truncated by the output cap),
``empty`` (a "successful" reply with nothing in it), ``refusal``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

ECHO = "echo-model-7"


def _tool_results(protocol: str, body: dict[str, Any]) -> int:
    """How many tool results the request carries (the agent's progress)."""
    if protocol == "openai-chat":
        return sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    if protocol == "openai-responses":
        return sum(1 for i in body.get("input", []) if isinstance(i, dict)
                   and i.get("type") == "function_call_output")
    return sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
               for b in m["content"] if b.get("type") == "tool_result")


class Loopback:
    """Start and stop of a server thread on 127.0.0.1 (``httpd`` and ``thread`` set by the subclass)."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class WireServer(Loopback):
    """One protocol on 127.0.0.1; ``log`` keeps every request (path, headers, body)."""

    def __init__(self, protocol: str, turns: list[str], faults: dict[int, tuple[int, dict[str, str]]] | None = None,
                 always: tuple[int, dict[str, str]] | None = None) -> None:
        self.protocol, self.turns = protocol, turns
        self.faults, self.always = faults or {}, always
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                body = json.loads(raw or b"{}")
                with server.lock:
                    number = len(server.log)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    server.log.append({"path": self.path, "headers": headers, "body": body, "raw": raw})
                fault = server.always or server.faults.get(number)
                if fault is not None and fault[0] == 0:  # a stall: answer normally, but too late
                    time.sleep(float(fault[1]["seconds"]))
                elif fault is not None and fault[0] == -1:  # hang up without any response
                    self.close_connection = True
                    return
                elif fault is not None and fault[0] == 502:  # a proxy's HTML error page, not JSON
                    page = b"<html><body>502 Bad Gateway</body></html>"
                    self.send_response(502)
                    self.send_header("content-type", "text/html")
                    self.send_header("content-length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                    return
                elif fault is not None:
                    status, headers = fault
                    # Like some providers, quote the credential that was sent back in the error text.
                    sent = self.headers.get("authorization") or self.headers.get("x-api-key") or ""
                    self._send(status, {"error": {"type": "server_error",
                                                  "message": f"injected {status} for key {sent}"}}, headers)
                    return
                done = _tool_results(server.protocol, body)
                kind = server.turns[min(done, len(server.turns) - 1)]
                self._send(200, server.reply(kind, number))

            def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left (the stall fault)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True  # closing waits for no stalled handler (its client left already)
        # Polled often so that shutdown() returns at once instead of after up to half a second.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        return root if self.protocol == "anthropic" else root + "/v1"

    # ------------------------------------------------------------------ replies
    def reply(self, kind: str, number: int) -> dict[str, Any]:
        calls: list[list[tuple[str, str, str]]]  # parts; each part a list of (id, name, args)
        text: str | None = None
        finish = "tool_calls"
        cid = f"call_{number}"
        if kind == "malformed":
            calls = [[(cid, "search", '{}""')]]
        elif kind == "split":
            text = "Let me search."
            calls = [[(cid, "search", '{"query": "travel')], [("", "", ' budget"}')]]
        elif kind == "split_ids":  # announced with no arguments, repeated under its id with them
            calls = [[(cid, "search", "")], [(cid, "search", '{"query": "travel budget"}')]]
        elif kind == "two":
            calls = [[(cid + "a", "write_report", '{"content": "draft"}'),
                      (cid + "b", "submit_report", '{"content": "Independent final report."}')]]
        elif kind == "submit":
            calls = [[(cid, "submit_report", '{"content": "Independent final report."}')]]
        elif kind == "dropped":
            calls, text = [], "I will call a tool now."
        elif kind == "length":
            calls, text, finish = [], "This report is cut of", "length"
        elif kind == "empty":
            calls, finish = [], "stop"
        elif kind == "refusal":
            calls, finish = [], "refusal"
        else:
            raise ValueError(kind)
        return getattr(self, "_" + self.protocol.replace("-", "_"))(calls, text, finish, number)

    def _openai_chat(self, parts, text, finish, number) -> dict[str, Any]:
        choices = []
        for i, part in enumerate(parts or [[]]):
            msg: dict[str, Any] = {"role": "assistant", "content": text if i == 0 else None}
            if finish == "refusal":
                msg["refusal"], finish = "I can't help with that.", "stop"
            if part:
                msg["tool_calls"] = [{"id": c, "type": "function", "function": {"name": n, "arguments": a}}
                                     for c, n, a in part]
            choices.append({"index": i, "message": msg, "finish_reason": finish})
        return {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 1, "model": ECHO,
                "choices": choices,
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                          "completion_tokens_details": {"reasoning_tokens": 5},
                          "prompt_tokens_details": {"cached_tokens": 10}}}

    def _openai_responses(self, parts, text, finish, number) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if text is not None:
            output.append({"type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        if finish == "refusal":
            output.append({"type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed",
                           "content": [{"type": "refusal", "refusal": "I can't help with that."}]})
        for part in parts:
            output += [{"type": "function_call", "id": f"fc_{number}_{len(output)}", "call_id": c, "name": n,
                        "arguments": a, "status": "completed"} for c, n, a in part]
        payload: dict[str, Any] = {"id": f"resp_{number}", "object": "response", "created_at": 1, "model": ECHO,
                                   "status": "completed", "output": output,
                                   "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
                                             "output_tokens_details": {"reasoning_tokens": 5},
                                             "input_tokens_details": {"cached_tokens": 10}}}
        if finish == "length":
            payload |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
        return payload

    def _anthropic(self, parts, text, finish, number) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
        for part in parts:
            for c, n, a in part:
                try:  # a real input object where the arguments are one; a gateway's raw text otherwise
                    value: Any = json.loads(a) if a else {}
                except ValueError:
                    value = a
                content.append({"type": "tool_use", "id": c, "name": n,
                                "input": value if isinstance(value, dict) else a})
        stop = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn", "refusal": "refusal"}[finish]
        return {"id": f"msg_{number}", "type": "message", "role": "assistant", "model": ECHO, "content": content,
                "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": 90, "output_tokens": 20, "cache_read_input_tokens": 10}}
