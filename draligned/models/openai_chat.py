"""``protocol = "openai-chat"``: the chat completions API (OpenAI, gateways, vLLM, Ollama, ...).

Generic request fields map to the wire as: ``max_output_tokens`` → ``max_completion_tokens``
(or the field named by ``options.max_tokens_field``, e.g. ``max_tokens`` for older
servers), ``temperature`` and ``parallel_tool_calls`` as is (the latter only with tools).
Every other declared field (``reasoning_effort``, DeepSeek's ``thinking``, ...) is sent
verbatim as an extra body field.
"""

from __future__ import annotations

from typing import Any

import openai

from draligned.models import wire
from draligned.models.base import ModelDeclaration
from draligned.models.options import ChatOptions
from draligned.models.remote import Posted, RemoteModel, sdk_security
from draligned.records import Message, ToolSpec, Usage


def chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Provider-neutral messages in the chat completions shape (tool arguments as received)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""})
        elif m.role == "assistant" and m.tool_calls:
            out.append({"role": "assistant", "content": m.content, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
                for c in m.tool_calls]})
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out


def request_fields(fields: dict[str, Any], has_tools: bool, max_tokens_field: str) -> dict[str, Any]:
    """Declared request fields with the generic names mapped for chat-style APIs."""
    out = dict(fields)
    if "max_output_tokens" in out:
        out[max_tokens_field] = out.pop("max_output_tokens")
    if not has_tools:
        out.pop("parallel_tool_calls", None)
    return out


class OpenAIChat(RemoteModel):
    """Chat completions through the official ``openai`` SDK."""

    sdk = openai
    raw_response_mode = "true"
    security = sdk_security(openai, {"bearer_auth": True})  # as its create method: never an admin key

    def __init__(self, declaration: ModelDeclaration) -> None:
        super().__init__(declaration)
        self._max_tokens_field = ChatOptions.model_validate(declaration.options).max_tokens_field
        self._tools: tuple[list[ToolSpec], list[dict[str, Any]]] = ([], [])

    def make_client(self, api_key: str) -> Any:
        return openai.AsyncOpenAI(api_key=api_key, base_url=self.declaration.base_url, max_retries=0,
                                  http_client=self.http_client())

    def build_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        d = self.declaration
        body: dict[str, Any] = {"model": d.model, "messages": chat_messages(messages)}
        if tools:
            body["tools"] = self.tool_entries(tools)
        return body | request_fields(d.request_fields(), bool(tools), self._max_tokens_field)

    def tool_entries(self, tools: list[ToolSpec]) -> list[dict[str, Any]]:
        """The ``tools`` of a body: dumped once while a run offers the same specs on every call (a run's tools
        are its contract's objects, never changed), again for other specs."""
        offered, entries = self._tools
        if len(offered) != len(tools) or any(a is not b for a, b in zip(offered, tools, strict=False)):
            entries = [{"type": "function", "function": t.model_dump(mode="json")} for t in tools]
            self._tools = (list(tools), entries)
        return list(entries)

    async def post(self, client: Any, body: dict[str, Any], timeout: float) -> Posted:
        return await self.post_json(client, "/chat/completions", body, timeout)

    def read_reply(self, data: dict[str, Any]) -> dict[str, Any]:
        anomalies: list[str] = []
        choices = [c for c in wire.as_list(data.get("choices")) if isinstance(c, dict)]
        choices.sort(key=lambda c: c["index"] if isinstance(c.get("index"), int) else 0)  # stable
        if len(choices) > 1:
            anomalies.append(f"split reply: {len(choices)} choices merged in order")
        texts, calls, refusals, reasons = [], [], [], []
        for choice in choices:
            msg = choice["message"] if isinstance(choice.get("message"), dict) else {}
            if text := wire.text_of(msg.get("content")):
                texts.append(text)
            if isinstance(msg.get("refusal"), str) and msg["refusal"]:
                refusals.append(msg["refusal"])
            for tc in wire.as_list(msg.get("tool_calls")):
                fn = wire.get(tc, "function") or {}
                calls.append(wire.tool_call(wire.get(tc, "id"), wire.get(fn, "name"), wire.get(fn, "arguments")))
            reasons.append(wire.finish(choice.get("finish_reason")))
        calls = wire.merge_fragments(calls, anomalies, "a later choice")
        # A split reply's finish: tool_calls if any part declared it, else the last part's reason.
        declared = [r for r in reasons if r]
        finish = "tool_calls" if "tool_calls" in declared else (declared[-1] if declared else None)
        wire.dropped_check(finish, calls, anomalies)
        if not choices:
            anomalies.append("reply has no choices")
        u = data.get("usage")
        usage = Usage(
            input_tokens=wire.count(u, "prompt_tokens"),
            output_tokens=wire.count(u, "completion_tokens"),
            reasoning_tokens=wire.count(u, "completion_tokens_details", "reasoning_tokens"),
            cached_tokens=(wire.count(u, "prompt_tokens_details", "cached_tokens")
                           or wire.count(u, "prompt_cache_hit_tokens")),
        )
        return {"text": "\n".join(texts) or None, "tool_calls": calls, "finish_reason": finish,
                "refusal": "\n".join(refusals) or None, "usage": usage,
                "model_echo": wire.echo(data),
                "anomalies": anomalies}
