"""Independent loopback stand-ins for a gateway and for the reasoning rules of the real APIs (stdlib only).

Written from the public documentation, not from the provider code:

- ``LiteLLMProxy``: a LiteLLM-like proxy in front of an upstream server. It forwards the body with the
  alias replaced by the upstream model, retries upstream 5xx itself (``num_retries``, or the request's
  ``x-litellm-num-retries`` header), echoes the *alias* in the reply body as a proxy does, and sends its
  documented response headers (``x-litellm-model-name`` ``provider/model``, ``x-litellm-model-api-base``,
  ``x-litellm-attempted-retries``, ``x-litellm-response-cost``, ``llm_provider-*``) plus a ``set-cookie``.
- ``ReasoningServer``: the responses API or the Anthropic messages API with reasoning on. Every reply
  carries a reasoning item (``encrypted_content`` when ``include`` asks for it) or a signed thinking
  block; a follow-up that does not send it back unchanged is refused with HTTP 400, as the real APIs
  refuse a function call without its reasoning item or a tool-use turn without its thinking block.
  ``store = true`` replies are kept and may be named by ``previous_response_id``.

Only the start/stop of the server thread is shared with ``tests/loopback_wire.py``.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback_wire import Loopback


class _Server(Loopback):
    """A threaded loopback HTTP server whose handler calls ``self.answer(path, headers, body)``."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                body = json.loads(raw or b"{}")
                with server.lock:
                    server.log.append({"path": self.path, "headers": headers, "body": body})
                status, payload, extra = server.answer(self.path, headers, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        raise NotImplementedError

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


class LiteLLMProxy(_Server):
    """``model_list``: one alias routed to ``upstream_model`` at ``upstream`` (an OpenAI-style base URL)."""

    def __init__(self, alias: str, upstream: str, upstream_model: str, num_retries: int = 2,
                 cost: float = 0.00042) -> None:
        super().__init__()
        self.alias, self.upstream, self.upstream_model = alias, upstream, upstream_model
        self.num_retries, self.cost = num_retries, cost

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    def answer(self, path, headers, body):
        if body.get("model") != self.alias:
            return 400, {"error": {"message": f"Invalid model name passed in model={body.get('model')}"}}, {}
        retries = int(headers.get("x-litellm-num-retries", self.num_retries))
        forwarded = json.dumps(body | {"model": self.upstream_model}).encode()
        tried = 0
        while True:
            request = urllib.request.Request(self.upstream + path.removeprefix("/v1"), data=forwarded,
                                             headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
                    status, payload, upstream_headers = resp.status, json.loads(resp.read()), resp.headers
                break
            except urllib.error.HTTPError as exc:
                if exc.code < 500 or tried >= retries:
                    return exc.code, json.loads(exc.read() or b"{}"), {"x-litellm-attempted-retries": str(tried)}
                tried += 1
        payload["model"] = self.alias  # a proxy echoes the name it was asked for
        return status, payload, {
            "x-litellm-model-name": f"openai/{self.upstream_model}",
            "x-litellm-model-group": self.alias,
            "x-litellm-model-api-base": self.upstream,
            "x-litellm-attempted-retries": str(tried),
            "x-litellm-response-cost": str(self.cost),
            "llm_provider-x-request-id": upstream_headers.get("x-request-id", "req-1"),
            "set-cookie": "litellm_session=abc123; Path=/",
        }


Step = tuple[str, dict[str, Any]] | str
"""One turn of a script: a tool call (name, arguments) or a text-only reply."""

#: Turn plans per harness, by how many tool results the context carries. An H-D worker (its assignment
#: contains WORKER) searches and then answers in text, so its own follow-up must carry its reasoning too.
SCRIPTS: dict[str, dict[str, list[Step]]] = {
    "H00": {"root": [("search", {"query": "travel budget"}),
                     ("submit_report", {"content": "Final report after thinking."})]},
    "H-W": {"root": [("write_file", {"path": "report.md", "content": "Final report after thinking."}),
                     ("submit_file", {"path": "report.md"})]},
    "H-D": {"root": [("delegate_batch", {"tasks": [{"assignment": "WORKER: find the budget facts.",
                                                    "input_files": []}]}),
                     ("write_file", {"path": "report.md", "content": "Final report after thinking."}),
                     ("submit_file", {"path": "report.md"})],
            "worker": [("search", {"query": "budget facts"}), "The budget facts."]},
}


class ReasoningServer(_Server):
    """``protocol`` is ``openai-responses`` or ``anthropic``; the turns follow ``SCRIPTS[harness]``."""

    def __init__(self, protocol: str, harness: str = "H00") -> None:
        super().__init__()
        self.protocol, self.script = protocol, SCRIPTS[harness]
        self.issued: dict[str, dict[str, Any]] = {}  # call id -> the reasoning item / thinking block sent with it
        self.stored: dict[str, list[dict[str, Any]]] = {}  # response id -> its output (store = true)
        self.refused: list[str] = []

    @property
    def base_url(self) -> str:
        return self.root + ("/v1" if self.protocol == "openai-responses" else "")

    def answer(self, path, headers, body):
        problem = self._check(body)
        if problem is not None:
            self.refused.append(problem)
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": problem}}, {}
        number = len(self.log) - 1  # this request's own number, from 0
        first_user = next((m.get("content") for m in body.get("messages", body.get("input", []))
                           if m.get("role") == "user"), "")
        plan = self.script["worker" if "WORKER" in json.dumps(first_user) and "worker" in self.script else "root"]
        step = plan[min(self._results(body), len(plan) - 1)]
        cid = f"call_{number}"
        if self.protocol == "anthropic":
            block = {"type": "thinking", "thinking": f"I should do step {number}.", "signature": f"sig-{number}-opaque"}
            self.issued[cid] = block
            content = [block, {"type": "text", "text": step} if isinstance(step, str) else
                       {"type": "tool_use", "id": cid, "name": step[0], "input": step[1]}]
            return 200, {"id": f"msg_{number}", "type": "message", "role": "assistant", "model": "claude-x",
                         "content": content, "stop_reason": "end_turn" if isinstance(step, str) else "tool_use",
                         "stop_sequence": None, "usage": {"input_tokens": 50, "output_tokens": 30}}, {}
        item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{number}", "summary": []}
        if "reasoning.encrypted_content" in (body.get("include") or []):
            item["encrypted_content"] = f"gAAAA-encrypted-{number}"
        self.issued[cid] = item
        output = [item, {"type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": step, "annotations": []}]}
                  if isinstance(step, str) else
                  {"type": "function_call", "id": f"fc_{number}", "call_id": cid, "name": step[0],
                   "arguments": json.dumps(step[1]), "status": "completed"}]
        rid = f"resp_{number}"
        if body.get("store", True):  # the API's default is to store
            self.stored[rid] = output
        return 200, {"id": rid, "object": "response", "created_at": 1, "model": "o-x", "status": "completed",
                     "output": output, "usage": {"input_tokens": 50, "output_tokens": 30,
                                                 "output_tokens_details": {"reasoning_tokens": 20}}}, {}

    def _results(self, body: dict[str, Any]) -> int:
        if self.protocol == "anthropic":
            return sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                       for b in m["content"] if b.get("type") == "tool_result")
        return sum(1 for i in body.get("input", []) if i.get("type") == "function_call_output")

    def _check(self, body: dict[str, Any]) -> str | None:
        if self.protocol == "anthropic":
            for m in body.get("messages", []):
                blocks = m.get("content") if m.get("role") == "assistant" else None
                if not isinstance(blocks, list):
                    continue
                uses = [b for b in blocks if b.get("type") == "tool_use"]
                if uses and blocks[0].get("type") not in ("thinking", "redacted_thinking"):
                    return ("messages: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When "
                            "`thinking` is enabled, a final `assistant` message must start with a thinking block")
                if uses and blocks[0] != self.issued.get(uses[0]["id"]):
                    return "messages: thinking block signature does not match (blocks must be passed back unchanged)"
            return None
        items = list(body.get("input", []))
        previous = body.get("previous_response_id")
        if previous is not None:
            if previous not in self.stored:
                return f"Previous response with id '{previous}' not found."
            items = self.stored[previous] + items
        for i, it in enumerate(items):
            if it.get("type") == "reasoning" and not body.get("store", True) and "encrypted_content" not in it \
                    and previous is None:
                return (f"Item with id '{it.get('id')}' not found. Items are not persisted when `store` is set "
                        f"to false. Try again with `store` set to true, or remove this item from your input.")
            if it.get("type") == "function_call":
                want = self.issued.get(it["call_id"])
                before = items[i - 1] if i else {}
                if want is not None and before != want:
                    return (f"Item 'fc_{it['call_id']}' of type 'function_call' was provided without its "
                            f"required 'reasoning' item: '{want['id']}'.")
        return None
