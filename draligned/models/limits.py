"""The per-model connection limit shared by every run of a study: fixed, or adaptive (AIMD).

``max_connections = "auto"`` starts low and raises the limit by one after as many successful
requests as the limit (additive increase); a 429 halves it (multiplicative decrease), within the
declared bounds.
Each call and failed attempt records the limit in force after it (``connection_limit``), so the
archive shows the limit over the calls of the study. With ``--workers N`` the parent's limit is the one
limit; worker processes hold a ``SharedLimit`` that asks it (draligned.workers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

Outcome = Literal["ok", "throttled", "failed"]


class ConnectionLimit:
    """A semaphore whose size adapts to the outcomes of the requests it admits (when adaptive)."""

    def __init__(self, start: int, floor: int = 1, ceiling: int | None = None) -> None:
        self.adaptive = ceiling is not None
        self.floor, self.ceiling = floor, ceiling if ceiling is not None else start
        self._limit = start
        self._successes = 0  # since the last change of the limit
        self._in_flight = 0
        self._cond = asyncio.Condition()

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return self._limit

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight < self.limit)
            self._in_flight += 1

    async def release(self, outcome: Outcome) -> None:
        """Free a place and adapt: +1 after ``limit`` successes, halve on a 429 (bounded)."""
        async with self._cond:
            self._in_flight -= 1
            if self.adaptive and outcome == "ok":
                self._successes += 1
                if self._successes >= self._limit:
                    self._limit, self._successes = min(self.ceiling, self._limit + 1), 0
            elif self.adaptive and outcome == "throttled":
                self._limit, self._successes = max(self.floor, self._limit // 2), 0
            self._cond.notify_all()


Ask = Callable[[str, str, Outcome | None], Awaitable[int]]
"""Sends (operation ``acquire`` or ``release``, model name, release outcome) to the process holding a
study's limits and returns the limit in force after it."""


class SharedLimit(ConnectionLimit):
    """A model's connection limit held by another process (the study's parent, ``draligned.workers``): each
    acquire waits for the holder's grant and each release reports the outcome there, so every worker
    process counts against one limit and an adaptive limit adapts on the outcomes of all of them."""

    def __init__(self, ask: Ask, model: str, adaptive: bool) -> None:
        super().__init__(1)
        self.adaptive, self._ask, self._model = adaptive, ask, model

    async def acquire(self) -> None:
        self._limit = await self._ask("acquire", self._model, None)

    async def release(self, outcome: Outcome) -> None:
        self._limit = await self._ask("release", self._model, outcome)
