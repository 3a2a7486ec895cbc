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
    """Model ids the server may echo (e.g. a dated id); None accepts any echo."""

    def violations(self, reply: ModelReply) -> list[str]:
        """Human-readable violations of these checks by ``reply`` (empty when it passes)."""
        out = []
        if self.require_zero_reasoning_tokens and reply.usage.reasoning_tokens:
            out.append(f"require_zero_reasoning_tokens: the reply reports "
                       f"{reply.usage.reasoning_tokens} reasoning tokens")
        if self.accepted_model_echoes is not None and reply.model_echo not in self.accepted_model_echoes:
            out.append(f"accepted_model_echoes: the server echoed {reply.model_echo!r}, "
                       f"not one of {self.accepted_model_echoes}")
        return out
