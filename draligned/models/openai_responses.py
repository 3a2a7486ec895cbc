"""``protocol = "openai-responses"``: the OpenAI responses API.

Generic request fields keep their names here (``max_output_tokens``, ``temperature``,
``parallel_tool_calls``); family controls such as ``reasoning = { effort = "none" }`` are
sent verbatim. The context is sent in full every call (stateless, no previous_response_id).
"""

from __future__ import annotations

from typing import Any

import openai

from draligned.models import wire
from draligned.models.remote import RemoteModel
from draligned.records import Message, ToolSpec, Usage


def input_items(messages: list[Message]) -> list[dict[str, Any]]:
    """Provider-neutral messages as responses-API input items."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content or ""})
            continue
        if m.content or m.role != "assistant":
            out.append({"role": m.role, "content": m.content or ""})
        for c in m.tool_calls:
            out.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.raw_arguments})
    return out


class OpenAIResponses(RemoteModel):
    """The responses API through the official ``openai`` SDK."""

    sdk = openai

    def make_client(self, api_key: str) -> Any:
        return openai.AsyncOpenAI(api_key=api_key, base_url=self.declaration.base_url, max_retries=0)

    def build_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        fields = self.declaration.request_fields()
        body: dict[str, Any] = {"model": self.declaration.model, "input": input_items(messages)}
        if tools:
            body["tools"] = [{"type": "function", **t.model_dump(mode="json")} for t in tools]
        else:
            fields.pop("parallel_tool_calls", None)
        return body | fields

    async def post(self, client: Any, body: dict[str, Any], timeout: float) -> tuple[bytes, str]:
        rest = {k: v for k, v in body.items() if k not in ("model", "input")}
        raw = await client.responses.with_raw_response.create(
            model=body["model"], input=body["input"], extra_body=rest, timeout=timeout)
        return raw.http_request.content, raw.text

    def read_reply(self, data: dict[str, Any]) -> dict[str, Any]:
        anomalies: list[str] = []
        texts, refusals, calls = [], [], []
        messages = 0
        for item in wire.as_list(data.get("output")):
            kind = wire.get(item, "type")
            if kind == "message":
                messages += 1
                for part in wire.as_list(item.get("content")):
                    if wire.get(part, "type") == "refusal":
                        refusals.append(str(part.get("refusal") or ""))
                    elif isinstance(wire.get(part, "text"), str):
                        texts.append(part["text"])
            elif kind == "function_call":
                calls.append(wire.tool_call(item.get("call_id"), item.get("name"), item.get("arguments")))
        if messages > 1:
            anomalies.append(f"split reply: {messages} message items merged in order")
        calls = wire.merge_fragments(calls, anomalies, "a later output item")
        status = data.get("status")
        if status == "incomplete":
            finish = wire.finish(wire.get(data, "incomplete_details", "reason") or "length")
        elif status in ("failed", "cancelled"):
            finish = str(status)
        else:
            finish = "refusal" if refusals and not texts and not calls else ("tool_calls" if calls else "stop")
        u = data.get("usage")
        usage = Usage(
            input_tokens=wire.count(u, "input_tokens"),
            output_tokens=wire.count(u, "output_tokens"),
            reasoning_tokens=wire.count(u, "output_tokens_details", "reasoning_tokens"),
            cached_tokens=wire.count(u, "input_tokens_details", "cached_tokens"),
        )
        return {"text": "\n".join(texts) or None, "tool_calls": calls, "finish_reason": finish,
                "refusal": "\n".join(refusals) or None, "usage": usage,
                "model_echo": wire.echo(data),
                "anomalies": anomalies}
