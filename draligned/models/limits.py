"""The per-model connection limit shared by every run of a study: fixed, or adaptive (AIMD).

``max_connections = "auto"`` starts low and raises the limit by one per window of successful
requests (additive increase); a 429 halves it (multiplicative decrease), within the declared bounds.
Every change is kept with its time, and each call records the limit in force after it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

Outcome = Literal["ok", "throttled", "failed"]


class ConnectionLimit:
    """A semaphore whose size adapts to the outcomes of the requests it admits (when adaptive)."""

    def __init__(self, start: int, floor: int = 1, ceiling: int | None = None) -> None:
        self.adaptive = ceiling is not None
        self.floor, self.ceiling = floor, ceiling if ceiling is not None else start
        self._limit = float(start)
        self._in_flight = 0
        self._cond = asyncio.Condition()
        self.history: list[tuple[float, int]] = [(time.time(), start)]
        """(UTC epoch seconds, limit) at the start and after every change."""

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return int(self._limit)

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight < self.limit)
            self._in_flight += 1

    async def release(self, outcome: Outcome) -> None:
        """Free a place and adapt: +1/limit on success, halve on a 429 (bounded)."""
        async with self._cond:
            self._in_flight -= 1
            before = self.limit
            if self.adaptive and outcome == "ok":
                self._limit = min(float(self.ceiling), self._limit + 1.0 / max(self.limit, 1))
            elif self.adaptive and outcome == "throttled":
                self._limit = max(float(self.floor), self._limit / 2)
            if self.limit != before:
                self.history.append((time.time(), self.limit))
            self._cond.notify_all()
