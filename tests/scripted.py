"""A scripted model for executor tests: replays fixed replies through the real ModelAPI interface."""

from __future__ import annotations

import json

from draligned.models import ModelAPI, ModelDeclaration
from draligned.records import Message, ModelReply, ToolCall, ToolSpec


def call(name: str, call_id: str = "", **args: object) -> ToolCall:
    """A well-formed tool call."""
    raw = json.dumps(args)
    return ToolCall(id=call_id or f"c_{name}", name=name, arguments=dict(args), raw_arguments=raw)


def reply(text: str | None = None, calls: list[ToolCall] | None = None,
          finish: str | None = None, refusal: str | None = None) -> ModelReply:
    """A reply as a provider would normalise it."""
    calls = calls or []
    finish = finish or ("tool_calls" if calls else "stop")
    return ModelReply(text=text, tool_calls=calls, finish_reason=finish, refusal=refusal,
                      request_body={}, raw_response=json.dumps({"text": text, "finish": finish}))


class ScriptedModel(ModelAPI):
    """Returns the scripted replies in order and remembers what it was sent."""

    def __init__(self, replies: list[ModelReply]) -> None:
        super().__init__(ModelDeclaration(name="scripted", protocol="scripted", model="scripted-1"))
        self.replies = list(replies)
        self.seen: list[list[Message]] = []

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        self.seen.append(list(messages))
        r = self.replies.pop(0)
        body = {"model": "scripted-1", "messages": [m.model_dump(mode="json") for m in messages]}
        return r.model_copy(update={"request_body": body})
