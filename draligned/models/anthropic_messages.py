"""``protocol = "anthropic"``: the Anthropic messages API (``base_url`` is the host root).

Generic request fields map as: ``max_output_tokens`` → ``max_tokens``, ``temperature`` as
is, ``parallel_tool_calls = false`` → ``tool_choice = {type = "auto",
disable_parallel_tool_use = true}`` (a declared ``tool_choice`` wins). System messages go
to the top-level ``system`` field. ``thinking`` and any other declared field are sent
verbatim. With extended thinking (``thinking = {type = "enabled", budget_tokens = N}``) the
reply's thinking and redacted_thinking blocks, signatures included, are kept on the assistant
turn and sent back unchanged at the start of that turn, as tool use with thinking requires.
"""

from __future__ import annotations

from typing import Any

import anthropic

from draligned.models import wire
from draligned.models.remote import Posted, RemoteModel
from draligned.records import Message, ReasoningState, ToolSpec, Usage

PROTOCOL = "anthropic"
THINKING = ("thinking", "redacted_thinking")


def anthropic_messages(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system text, messages): consecutive tool results become one user turn of tool_result blocks."""
    system = "\n\n".join(m.content or "" for m in messages if m.role == "system") or None
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content or ""}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = (list(m.reasoning.items) if m.reasoning is not None
                                            and m.reasoning.protocol == PROTOCOL else [])
            blocks += [{"type": "text", "text": m.content}] if m.content else []
            # Unparseable arguments cannot be sent back as an input object; the tool error says why.
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments or {}}
                       for c in m.tool_calls]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": "user", "content": m.content or ""})
    return system, out


class AnthropicMessages(RemoteModel):
    """The messages API through the official ``anthropic`` SDK."""

    sdk = anthropic

    def make_client(self, api_key: str) -> Any:
        return anthropic.AsyncAnthropic(api_key=api_key, base_url=self.declaration.base_url, max_retries=0,
                                        http_client=self.http_client())

    def build_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        fields = self.declaration.request_fields()
        system, msgs = anthropic_messages(messages)
        body: dict[str, Any] = {"model": self.declaration.model, "messages": msgs}
        if system is not None:
            body["system"] = system
        if "max_output_tokens" in fields:
            body["max_tokens"] = fields.pop("max_output_tokens")
        parallel = fields.pop("parallel_tool_calls", None)
        if tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                             for t in tools]
            if parallel is False:
                body["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
        return body | fields

    async def post(self, client: Any, body: dict[str, Any], timeout: float) -> Posted:
        return await self.post_json(client, "/v1/messages", body, timeout)

    def read_reply(self, data: dict[str, Any]) -> dict[str, Any]:
        anomalies: list[str] = []
        texts, calls, thinking = [], [], []
        for block in wire.as_list(data.get("content")):
            kind = wire.get(block, "type")
            if kind in THINKING:
                thinking.append(block)
            elif kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use":
                calls.append(wire.tool_call(block.get("id"), block.get("name"), block.get("input")))
        calls = wire.merge_fragments(calls, anomalies, "a later content block")
        finish = wire.finish(data.get("stop_reason"))
        wire.dropped_check(finish, calls, anomalies)
        text = "\n".join(texts) or None
        refusal = (text or "stop_reason refusal") if finish == "refusal" else None
        u = data.get("usage")
        cached = wire.count(u, "cache_read_input_tokens")
        usage = Usage(
            input_tokens=wire.count(u, "input_tokens") + cached + wire.count(u, "cache_creation_input_tokens"),
            output_tokens=wire.count(u, "output_tokens"),
            reasoning_tokens=(wire.count(u, "output_tokens_details", "reasoning_tokens")
                              or wire.count(u, "output_tokens_details", "thinking_tokens")),
            cached_tokens=cached,
        )
        return {"text": text, "tool_calls": calls, "finish_reason": finish, "refusal": refusal,
                "usage": usage, "model_echo": wire.echo(data), "anomalies": anomalies,
                "reasoning": ReasoningState(protocol=PROTOCOL, items=thinking) if thinking else None}
