"""Per-model checks declared in a study, evaluated on every reply (sent or replayed).

A check turns a provider behaviour the study depends on into a recorded fact: e.g. the
paper ran DeepSeek with thinking disabled and required zero reasoning tokens on every
call. A violated check is recorded on the model call and fails the run with that reason.
"""

from __future__ import annotations

from draligned.records import ModelReply, Record


class ModelChecks(Record):
    """The ``checks`` table of a model declaration."""

    require_zero_reasoning_tokens: bool = False
    """A reply that reports any reasoning tokens is a protocol violation."""
    accepted_model_echoes: list[str] | None = None
    """Model ids the server may echo (e.g. a dated id); None accepts any echo. When the echo is exactly
    the requested id (a gateway alias) and a gateway header names another model, that model is checked."""

    def violations(self, reply: ModelReply, requested: str | None = None) -> list[str]:
        """Human-readable violations of these checks by ``reply`` to a request for ``requested``."""
        out = []
        if self.require_zero_reasoning_tokens and reply.usage.reasoning_tokens:
            out.append(f"require_zero_reasoning_tokens: the reply reports "
                       f"{reply.usage.reasoning_tokens} reasoning tokens")
        if self.accepted_model_echoes is not None:
            checked, names = checked_model(reply, requested)
            if not set(names) & set(self.accepted_model_echoes):
                out.append(f"accepted_model_echoes: {checked} is not one of {self.accepted_model_echoes}")
        return out


def checked_model(reply: ModelReply, requested: str | None) -> tuple[str, list[str]]:
    """(what was checked, in words; the ids that may match): the echo, or the gateway's served model
    when the echo is only the requested alias echoed back."""
    g = reply.gateway
    served = g.served_model if g is not None else None
    if g is not None and served and reply.model_echo == requested and served != requested:
        provider = (g.upstream_provider or "").split(" at ")[0]
        names = [served] + ([f"{provider}/{served}"] if provider else [])
        return (f"the {g.gateway} gateway's served model {served!r} (checked instead of the echo "
                f"{reply.model_echo!r}, which is the requested alias)", names)
    return f"the server echoed {reply.model_echo!r}", [reply.model_echo] if reply.model_echo else []
