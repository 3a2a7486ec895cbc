"""Loopback servers for the two batch APIs (standard library only), written from the public API references.

``OpenAIBatchServer``: ``POST /v1/files`` (multipart, purpose ``batch``), ``POST /v1/batches``,
``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``, ``GET /v1/files/{id}/content``; the input
file is validated line by line (JSON object, unique string ``custom_id``, ``method`` POST, ``url`` equal
to the batch endpoint, ``body`` with a ``model``), a bad line fails the batch with
``errors.data[{code, line, message, param}]`` (1-based line). Statuses: validating → in_progress →
finalizing → completed (or expired; cancelling → cancelled). Output lines ``{id, custom_id, response:
{status_code, request_id, body}, error}``; the error file holds errored lines (status 4xx/5xx or
``error.code`` ``batch_expired`` / ``batch_cancelled``). Synchronous ``POST /v1/chat/completions`` and
``/v1/responses`` answer the same way, so a batch and a synchronous read of one packet can be compared.

``AnthropicBatchServer``: ``POST /v1/messages/batches`` (``requests[{custom_id, params}]``; a bad request
is a 400 ``invalid_request_error`` naming ``requests.N``), ``GET .../{id}`` (``processing_status``
in_progress, canceling, ended; ``request_counts``; ``results_url`` once ended), ``POST .../{id}/cancel``,
``GET .../{id}/results`` (JSONL in reverse order: results are not in request order); synchronous
``POST /v1/messages``.

The "model" behind both answers each packet with the lexical simulator's answer to its prompt, so
reads ingest; ``plan`` maps a 0-based line index to ``errored`` / ``expired`` / ``garbage`` (a 200 whose
text is not JSON). ``hold`` keeps a batch in progress until ``release()``; ``expire`` ends it as expired
after the first ``done_before_expiry`` lines. ``creates`` counts batch creations, ``retrieved`` is set
on every poll.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from draligned.evaluator.sim import answer

ECHO = "batch-echo-model"
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _prompt(body: dict[str, Any]) -> str:
    items = body.get("messages") or body.get("input") or []
    return "".join(m["content"] for m in items if isinstance(m, dict) and m.get("role") == "user"
                   and isinstance(m.get("content"), str))


def model_text(body: dict[str, Any], kind: str) -> str:
    return "this is not JSON" if kind == "garbage" else json.dumps(answer(_prompt(body)))


def chat_body(body: dict[str, Any], kind: str, n: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1, "model": ECHO,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": model_text(body, kind)}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}}


def responses_body(body: dict[str, Any], kind: str, n: int) -> dict[str, Any]:
    return {"id": f"resp_{n}", "object": "response", "created_at": 1, "model": ECHO, "status": "completed",
            "output": [{"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": model_text(body, kind), "annotations": []}]}],
            "usage": {"input_tokens": 50, "output_tokens": 9, "total_tokens": 59}}


def message_body(body: dict[str, Any], kind: str, n: int) -> dict[str, Any]:
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": ECHO,
            "content": [{"type": "text", "text": model_text(body, kind)}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 50, "output_tokens": 9}}


class _Server:
    """Shared HTTP plumbing: routes by method and path; ``log`` keeps (method, path, raw body)."""

    def __init__(self, plan: dict[int, str] | None = None, hold: bool = False, expire: bool = False,
                 done_before_expiry: int = 0) -> None:
        self.plan = plan or {}
        self.held = threading.Event()
        if not hold:
            self.held.set()
        self.expire, self.done_before_expiry = expire, done_before_expiry
        self.log: list[tuple[str, str, bytes]] = []
        self.creates = 0
        self.retrieved = threading.Event()
        self.lock = threading.Lock()
        self.batches: dict[str, dict[str, Any]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _route(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
                with server.lock:
                    server.log.append((method, self.path, raw))
                    status, payload, ctype = server.handle(method, self.path.split("?")[0], raw, self.headers)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def release(self) -> None:
        """Let held batches finish."""
        self.held.set()

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, method: str, path: str, raw: bytes, headers: Any) -> tuple[int, Any, str]:
        raise NotImplementedError

    def outcomes(self, n_lines: int, cancelled: bool) -> list[str]:
        """Per line: ok / errored / garbage / expired / canceled, when the batch ends now."""
        out = []
        for i in range(n_lines):
            kind = self.plan.get(i, "ok")
            if self.expire and i >= self.done_before_expiry:
                kind = "expired"
            elif cancelled and i >= self.done_before_expiry:
                kind = "canceled"
            out.append(kind)
        return out


class OpenAIBatchServer(_Server):
    """The OpenAI Files + Batch API (see module docstring); ``base_url`` includes /v1."""

    files: dict[str, bytes]

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    def handle(self, method: str, path: str, raw: bytes, headers: Any) -> tuple[int, Any, str]:
        self.files = getattr(self, "files", {})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/responses"):
            body = json.loads(raw)
            make = chat_body if path.endswith("completions") else responses_body
            return 200, make(body, "ok", len(self.log)), "application/json"
        if method == "POST" and path == "/v1/files":
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"content-type: " + headers["content-type"].encode() + b"\r\n\r\n" + raw)
            parts = {p.get_param("name", header="content-disposition"): p for p in msg.iter_parts()}
            if parts["purpose"].get_content().strip() != "batch":
                return 400, {"error": {"message": "purpose must be batch", "type": "invalid_request_error"}}, \
                    "application/json"
            fid = f"file-{len(self.files) + 1}"
            self.files[fid] = parts["file"].get_payload(decode=True)
            return 200, {"id": fid, "object": "file", "bytes": len(self.files[fid]), "created_at": 1,
                         "filename": "input.jsonl", "purpose": "batch", "status": "processed"}, "application/json"
        if method == "POST" and path == "/v1/batches":
            req = json.loads(raw)
            self.creates += 1
            bid = f"batch_{self.creates}"
            self.batches[bid] = {"id": bid, "object": "batch", "endpoint": req["endpoint"], "errors": None,
                                 "input_file_id": req["input_file_id"], "completion_window": req["completion_window"],
                                 "status": "validating", "output_file_id": None, "error_file_id": None,
                                 "created_at": 1, "request_counts": {"total": 0, "completed": 0, "failed": 0}}
            return 200, self.batches[bid], "application/json"
        if m := re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", path):
            batch = self.batches.get(m.group(1))
            if batch is None:
                return 404, {"error": {"message": "no such batch", "type": "invalid_request_error"}}, "application/json"
            if m.group(2):
                if batch["status"] in ("validating", "in_progress", "finalizing"):
                    batch["status"] = "cancelling"
            else:
                self.retrieved.set()
                self._advance(batch)
            return 200, batch, "application/json"
        if m := re.fullmatch(r"/v1/files/([^/]+)/content", path):
            return 200, self.files[m.group(1)], "application/octet-stream"
        return 404, {"error": {"message": f"no route {method} {path}"}}, "application/json"

    def _lines(self, batch: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The input lines, or the first validation error."""
        lines, seen = [], set()
        for n, text in enumerate(self.files[batch["input_file_id"]].decode().splitlines(), 1):
            try:
                line = json.loads(text)
            except ValueError:
                return [], {"code": "invalid_json_line", "line": n, "message": "not JSON", "param": None}
            for field, ok in (("custom_id", isinstance(line.get("custom_id"), str) and line["custom_id"] not in seen),
                              ("method", line.get("method") == "POST"), ("url", line.get("url") == batch["endpoint"]),
                              ("body", isinstance(line.get("body"), dict) and "model" in line["body"]
                               and self.plan.get(n - 1) != "invalid")):
                if not ok:
                    return [], {"code": "invalid_request", "line": n, "param": field,
                                "message": f"line {n}: {field} is missing or invalid"}
            seen.add(line["custom_id"])
            lines.append(line)
        return lines, None

    def _advance(self, batch: dict[str, Any]) -> None:
        status = batch["status"]
        if status == "validating":
            lines, error = self._lines(batch)
            if error:
                batch |= {"status": "failed", "errors": {"object": "list", "data": [error]}}
            else:
                batch["status"] = "in_progress"
                batch["request_counts"]["total"] = len(lines)
        elif status == "in_progress" and self.held.is_set():
            batch["status"] = "finalizing"
        elif status == "finalizing" or status == "cancelling" or (status == "in_progress" and self.expire):
            self._finish(batch, cancelled=status == "cancelling")

    def _finish(self, batch: dict[str, Any], cancelled: bool) -> None:
        lines, _ = self._lines(batch)
        out, err = [], []
        make = chat_body if batch["endpoint"] == "/v1/chat/completions" else responses_body
        for n, (line, kind) in enumerate(zip(lines, self.outcomes(len(lines), cancelled), strict=True)):
            rid = f"batch_req_{batch['id']}_{n}"
            if kind in ("ok", "garbage"):
                out.append({"id": rid, "custom_id": line["custom_id"], "error": None,
                            "response": {"status_code": 200, "request_id": f"req_{n}",
                                         "body": make(line["body"], kind, n)}})
            elif kind == "errored":
                err.append({"id": rid, "custom_id": line["custom_id"], "error": None,
                            "response": {"status_code": 400, "request_id": f"req_{n}", "body": {"error": {
                                "message": "Invalid value for temperature", "type": "invalid_request_error"}}}})
            else:
                code = "batch_expired" if kind == "expired" else "batch_cancelled"
                err.append({"id": rid, "custom_id": line["custom_id"], "response": None,
                            "error": {"code": code, "message": f"request {kind} before it ran"}})
        for key, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = f"file-{len(self.files) + 1}"
                self.files[fid] = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
                batch[key] = fid
        batch["status"] = "cancelled" if cancelled else "expired" if self.expire else "completed"
        batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}


class AnthropicBatchServer(_Server):
    """Anthropic Message Batches (see module docstring); ``base_url`` is the host root."""

    @property
    def base_url(self) -> str:
        return self.root

    def handle(self, method: str, path: str, raw: bytes, headers: Any) -> tuple[int, Any, str]:
        if method == "POST" and path == "/v1/messages":
            return 200, message_body(json.loads(raw), "ok", len(self.log)), "application/json"
        if method == "POST" and path == "/v1/messages/batches":
            requests = json.loads(raw).get("requests")
            seen: set[str] = set()
            for n, req in enumerate(requests or []):
                params = req.get("params") or {}
                bad = ("custom_id" if not _CUSTOM_ID.match(str(req.get("custom_id"))) or req["custom_id"] in seen
                       else "params.max_tokens" if not isinstance(params.get("max_tokens"), int)
                       else "params.messages" if not params.get("messages") or self.plan.get(n) == "invalid"
                       else None)
                if bad:
                    return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": f"requests.{n}.{bad}: invalid value"}}, \
                        "application/json"
                seen.add(req["custom_id"])
            self.creates += 1
            bid = f"msgbatch_{self.creates:04d}"
            self.batches[bid] = {"id": bid, "type": "message_batch", "processing_status": "in_progress",
                                 "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z",
                                 "ended_at": None, "archived_at": None, "cancel_initiated_at": None,
                                 "results_url": None, "requests": requests,
                                 "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0,
                                                    "canceled": 0, "expired": 0}}
            return 200, self._public(bid), "application/json"
        if m := re.fullmatch(r"/v1/messages/batches/([^/]+)(/cancel|/results)?", path):
            bid = m.group(1)
            batch = self.batches.get(bid)
            if batch is None:
                return 404, {"type": "error", "error": {"type": "not_found_error", "message": "no batch"}}, \
                    "application/json"
            if m.group(2) == "/cancel":
                if batch["processing_status"] == "in_progress":
                    batch |= {"processing_status": "canceling", "cancel_initiated_at": "2026-01-01T00:00:01Z"}
            elif m.group(2) == "/results":
                if batch["processing_status"] != "ended":
                    return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": "batch has not ended"}}, "application/json"
                return 200, batch["results"], "application/binary"
            else:
                self.retrieved.set()
                self._advance(bid)
            return 200, self._public(bid), "application/json"
        return 404, {"type": "error", "error": {"type": "not_found_error", "message": path}}, "application/json"

    def _public(self, bid: str) -> dict[str, Any]:
        return {k: v for k, v in self.batches[bid].items() if k not in ("requests", "results")}

    def _advance(self, bid: str) -> None:
        batch = self.batches[bid]
        cancelled = batch["processing_status"] == "canceling"
        if batch["processing_status"] == "ended" or not (cancelled or self.held.is_set() or self.expire):
            return
        rows, counts = [], {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for n, (req, kind) in enumerate(zip(batch["requests"], self.outcomes(len(batch["requests"]), cancelled),
                                            strict=True)):
            if kind in ("ok", "garbage"):
                result: dict[str, Any] = {"type": "succeeded", "message": message_body(req["params"], kind, n)}
            elif kind == "errored":
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "invalid_request_error", "message": "max_tokens: too large"}}}
            else:
                result = {"type": kind}
            counts[result["type"]] += 1
            rows.append({"custom_id": req["custom_id"], "result": result})
        batch |= {"processing_status": "ended", "ended_at": "2026-01-01T01:00:00Z", "request_counts": counts,
                  "results_url": f"{self.root}/v1/messages/batches/{bid}/results",
                  "results": b"".join(json.dumps(r).encode() + b"\n" for r in reversed(rows))}
