"""Optional per-model price tables: token usage to cost in US dollars."""

from __future__ import annotations

from pydantic import Field

from draligned.records import Record, Usage


class Price(Record, strict=True):
    """The ``price`` table of a model declaration, in US dollars per million tokens (finite, not negative)."""

    input: float = Field(ge=0, le=1_000_000, allow_inf_nan=False)
    """Price of a million uncached prompt tokens."""
    output: float = Field(ge=0, le=1_000_000, allow_inf_nan=False)
    """Price of a million output tokens (reasoning tokens are billed as output)."""
    cached_input: float | None = Field(None, ge=0, le=1_000_000, allow_inf_nan=False)
    """Price of a million prompt tokens served from the provider's cache; None bills them as input."""

    def cost(self, usage: Usage) -> float:
        """Cost of one call's usage (``input_tokens`` includes the cached ones)."""
        cached_rate = self.input if self.cached_input is None else self.cached_input
        uncached = max(usage.input_tokens - usage.cached_tokens, 0)
        total = uncached * self.input + usage.cached_tokens * cached_rate + usage.output_tokens * self.output
        return round(total / 1e6, 8)
