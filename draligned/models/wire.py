"""Helpers every real protocol shares to read a reply body without trusting its shape.

The SDKs build reply objects without validating them, so providers parse the raw JSON
themselves with these helpers: a missing or mistyped field becomes a default or an
anomaly, never an exception deep inside a run.
"""

from __future__ import annotations

import json
from typing import Any

from draligned.records import ToolCall

#: Provider finish/stop reasons -> the normalised ones of ``ModelReply.finish_reason``.
FINISH = {
    "stop": "stop", "end_turn": "stop", "stop_sequence": "stop", "completed": "stop",
    "tool_calls": "tool_calls", "function_call": "tool_calls", "tool_use": "tool_calls",
    "length": "length", "max_tokens": "length", "max_output_tokens": "length",
    "content_filter": "content_filter", "refusal": "refusal",
}


def finish(reason: Any) -> str | None:
    """Normalise a finish reason; an unknown one is kept verbatim so the loop reports it."""
    if reason is None or reason == "":
        return None
    return FINISH.get(str(reason), str(reason))


def get(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...`` or None when any step is missing or not a dict."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def count(obj: Any, *path: str) -> int:
    """An integer token count at ``path`` (0 when absent or not a number)."""
    value = get(obj, *path)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def as_list(value: Any) -> list:
    """``value`` when it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def text_of(content: Any) -> str:
    """Text of a content field: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    parts = [p.get("text") for p in as_list(content) if isinstance(p, dict)]
    return "".join(p for p in parts if isinstance(p, str))


def tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """A ToolCall from raw fields; arguments may be JSON text or an already-parsed object."""
    if isinstance(arguments, dict):
        raw = json.dumps(arguments, ensure_ascii=False)
    else:
        raw = arguments if isinstance(arguments, str) else ("" if arguments is None else json.dumps(arguments))
    parsed, error = parse_arguments(raw)
    return ToolCall(id=str(call_id or ""), name=str(name or ""), arguments=parsed, raw_arguments=raw,
                    parse_error=error)


def parse_arguments(raw: str) -> tuple[dict | None, str | None]:
    """(object, None) when ``raw`` is a JSON object; (None, why) otherwise. Empty text is ``{}``."""
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at character {exc.pos}"
    if not isinstance(value, dict):
        return None, f"JSON {type(value).__name__}, not an object"
    return value, None


def merge_fragments(calls: list[ToolCall], anomalies: list[str], where: str) -> list[ToolCall]:
    """Merge a gateway's split tool calls in order. A part continues the previous call when its
    id and name are empty or the same as that call's and either it has no name or the previous
    arguments are not yet a JSON object; an exact repeat is dropped; a repeat under the same id
    brings the arguments of a call that came with none. Each merge is an anomaly."""
    merged: list[ToolCall] = []
    for c in calls:
        prev = merged[-1] if merged else None
        if prev is None or c.id not in ("", prev.id) or c.name not in ("", prev.name):
            merged.append(c)  # a new call
        elif (c.id, c.name, c.raw_arguments) == (prev.id, prev.name, prev.raw_arguments):
            anomalies.append(f"split reply: repeated tool call {c.id} in {where} dropped")
        elif c.id and prev.raw_arguments.strip() in ("", "{}") and c.raw_arguments.strip():
            # The call announced with no arguments, repeated under its id with them: one call,
            # not two with the same id (the first would fail and the id would be sent back twice).
            merged[-1] = tool_call(prev.id, prev.name, c.raw_arguments)
            anomalies.append(f"split tool call: arguments of call {prev.id} came in {where}")
        elif not c.name or prev.arguments is None:
            merged[-1] = tool_call(prev.id, prev.name, prev.raw_arguments + c.raw_arguments)
            anomalies.append(f"split tool call: argument fragment in {where} joined to call {prev.id}")
        else:
            merged.append(c)
    return merged


def echo(data: dict) -> str | None:
    """The model id the server echoed, when it sent one as a string."""
    return data.get("model") if isinstance(data.get("model"), str) else None


def dropped_check(finish_reason: str | None, calls: list[ToolCall], anomalies: list[str]) -> None:
    """Record a declared tool-call finish that carries no tool call (a dropped tool call)."""
    if finish_reason == "tool_calls" and not calls:
        anomalies.append("dropped tool call: finish reason tool_calls but no tool call in the reply")
