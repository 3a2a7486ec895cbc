"""``protocol = "openai-responses"``: the OpenAI responses API.

Generic request fields keep their names here (``max_output_tokens``, ``temperature``,
``parallel_tool_calls``); family controls such as ``reasoning = { effort = "none" }`` are
sent verbatim.

Storage and reasoning across the tool loop: ``store = false`` is sent unless the model declares
``request.store``. With ``store = false`` the context is sent in full every call, with (when tools are offered)
``include = ["reasoning.encrypted_content"]`` and every earlier reply's reasoning items passed back
unchanged before that reply's output. With ``store = true`` the follow-up names the previous reply
(``previous_response_id``) and sends only the items after it. Which one was used is in each call's
recorded request fields (``store``, ``include`` or ``previous_response_id``).
``options.carry_reasoning = false`` sends neither the include nor reasoning items (for a server that
rejects them; a reasoning model then refuses the follow-up).
"""

from __future__ import annotations

from typing import Any

import openai

from draligned.models import wire
from draligned.models.options import ResponsesOptions
from draligned.models.remote import Posted, RemoteModel, sdk_security
from draligned.records import Message, ReasoningState, ToolSpec, Usage

PROTOCOL = "openai-responses"
ENCRYPTED = "reasoning.encrypted_content"


def input_items(messages: list[Message], carry: bool = True) -> list[dict[str, Any]]:
    """Provider-neutral messages as responses-API input items (with ``carry``, each turn's reasoning
    items before its output)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if carry and m.reasoning is not None and m.reasoning.protocol == PROTOCOL:
            out += m.reasoning.items
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
    raw_response_mode = "true"
    security = sdk_security(openai, {"bearer_auth": True})  # as its create method: never an admin key

    def make_client(self, api_key: str) -> Any:
        return openai.AsyncOpenAI(api_key=api_key, base_url=self.declaration.base_url, max_retries=0,
                                  http_client=self.http_client())

    @property
    def stored(self) -> bool:
        """Whether the provider keeps the replies (declared ``request.store = true``)."""
        return self.declaration.request.get("store") is True

    def build_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        fields = {"store": False} | self.declaration.request_fields()
        carry = ResponsesOptions.model_validate(self.declaration.options).carry_reasoning
        previous = self._previous(messages)
        if previous is not None:  # stored: name the previous reply, send only what came after it
            index, response_id = previous
            messages = messages[index + 1:]
            fields["previous_response_id"] = response_id
        elif not self.stored and carry and tools:  # a tool loop has follow-ups; a single read has none
            declared = list(fields.get("include") or [])
            fields["include"] = declared + ([ENCRYPTED] if ENCRYPTED not in declared else [])
        body: dict[str, Any] = {"model": self.declaration.model, "input": input_items(messages, carry)}
        if tools:
            body["tools"] = [{"type": "function", **t.model_dump(mode="json")} for t in tools]
        else:
            fields.pop("parallel_tool_calls", None)
        return body | fields

    def _previous(self, messages: list[Message]) -> tuple[int, str] | None:
        """(index, id) of the last assistant turn with a stored reply id, when ``store = true``."""
        if not self.stored:
            return None
        for i in range(len(messages) - 1, -1, -1):
            r = messages[i].reasoning
            if messages[i].role == "assistant" and r is not None and r.protocol == PROTOCOL and r.response_id:
                return i, r.response_id
        return None

    def failure_hint(self, status: int | None, message: str, body: dict[str, Any]) -> str:
        unsealed = [i.get("id") for i in body.get("input", []) if isinstance(i, dict)
                    and i.get("type") == "reasoning" and not i.get("encrypted_content")]
        if status == 404 and body.get("store") is False and any(str(i) in message for i in unsealed):
            return (" — with store = false the provider keeps nothing, so a reasoning item must carry its "
                    "encrypted_content, and the reply gave none (a gateway may have dropped `include`); "
                    "declare request.store = true or options.carry_reasoning = false")
        return super().failure_hint(status, message, body)

    async def post(self, client: Any, body: dict[str, Any], timeout: float) -> Posted:
        return await self.post_json(client, "/responses", body, timeout)

    def read_reply(self, data: dict[str, Any]) -> dict[str, Any]:
        anomalies: list[str] = []
        texts, refusals, calls, reasoning = [], [], [], []
        messages = 0
        for item in wire.as_list(data.get("output")):
            kind = wire.get(item, "type")
            if kind == "reasoning":
                reasoning.append(item)
            elif kind == "message":
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
        response_id = data.get("id") if self.stored and isinstance(data.get("id"), str) else None
        state = (ReasoningState(protocol=PROTOCOL, items=reasoning, response_id=response_id)
                 if reasoning or response_id else None)
        return {"text": "\n".join(texts) or None, "tool_calls": calls, "finish_reason": finish,
                "refusal": "\n".join(refusals) or None, "usage": usage,
                "model_echo": wire.echo(data), "anomalies": anomalies, "reasoning": state}
