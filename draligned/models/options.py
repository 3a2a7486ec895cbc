"""The typed ``options`` of each agent-model protocol: a typo or an out-of-range value is refused at load.

A model declaration keeps ``options`` as written (its sha256, and so every slot id, is unchanged);
the provider reads them through the protocol's model here, which refuses unknown keys (Record),
values of another type (strict: "yes" is not a bool) and non-finite or out-of-range numbers. A
protocol without options accepts none.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError

from draligned.records import Record


class NoOptions(Record):
    """A protocol that takes no options (anthropic)."""


class SimOptions(Record, strict=True):
    """Options of the SIMULATOR agent (``protocol = "sim"``)."""

    sensitivity: float = Field(0.8, ge=0.0, le=1.0, allow_inf_nan=False)
    """Probability that a query or pick follows the user's background (0: arms issue identical requests)."""
    revise: bool = True
    """Search again and save a second draft before the final."""
    final_mode: Literal["submit", "text"] = "submit"
    """Deliver the final with the submit tool, or as a text-only reply."""
    latency_s: float = Field(0.0, ge=0.0, le=60.0, allow_inf_nan=False)
    """Simulated seconds per call, to exercise concurrency and interruption."""


class ChatOptions(Record, strict=True):
    """Options of the chat-completions protocol (``openai-chat``)."""

    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    """Request field that carries the output cap (``max_tokens`` for older servers)."""


class ResponsesOptions(Record, strict=True):
    """Options of the Responses protocol (``openai-responses``)."""

    carry_reasoning: bool = True
    """Carry reasoning across the tool loop (encrypted reasoning items with ``store = false``, or
    ``previous_response_id`` with ``store = true``); false for a server that has neither."""


OPTIONS: dict[str, type[Record]] = {
    "sim": SimOptions,
    "openai-chat": ChatOptions,
    "openai-responses": ResponsesOptions,
    "anthropic": NoOptions,
}
"""The options model of each agent protocol (the keys of ``models.base.PROTOCOLS``)."""


def options_problem(options: dict[str, Any], model: type[Record]) -> tuple[str, str] | None:
    """(dotted key, message) of the first problem of ``options`` under ``model``; None when they hold."""
    try:
        model.model_validate(options)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = "unknown option (known: " + (", ".join(model.model_fields) or "none") + ")" \
            if err["type"] == "extra_forbidden" else err["msg"]
        return key, msg
    return None
