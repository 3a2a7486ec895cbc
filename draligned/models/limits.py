"""The per-model connection limit shared by every run of a study: fixed, or adaptive (AIMD).

``max_connections = "auto"`` starts low and raises the limit by one after as many successful
requests as the limit (additive increase); a 429 halves it (multiplicative decrease), within the
declared bounds.
Each call and failed attempt records the limit in force after it (``connection_limit``), so the
archive shows the limit over the calls of the study.

With ``--workers N`` the parent's limit is the one limit, and each worker process holds a lease of it
(draligned.workers): a ``Lender`` in the parent gives a worker's ``LeasedLimit`` places of the limit one
at a time, and the worker keeps a place it has freed for its next request, so the common case (the limit
not contended) costs no message. Every leased place counts against the parent's limit whether it is in
use or kept, so the limit holds across processes. When a request must wait for a place (any process's),
or an adaptive limit falls below the places out, the lender tells every worker to stop keeping: each
gives its kept places back now and every place it frees from then on, until its next grant finds the
limit uncontended. Outcomes reach the parent as notices (adaptive limits only), so the limit adapts on
the outcomes of all processes, and every change of the limit is told to every worker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Literal

Outcome = Literal["ok", "throttled", "failed"]


class ConnectionLimit:
    """A semaphore whose size adapts to the outcomes of the requests it admits (when adaptive)."""

    def __init__(self, start: int, floor: int = 1, ceiling: int | None = None) -> None:
        self.adaptive = ceiling is not None
        self.floor, self.ceiling = floor, ceiling if ceiling is not None else start
        self._limit = start
        self._successes = 0  # since the last change of the limit
        self._in_flight = 0
        self._waiting = 0
        self._cond = asyncio.Condition()
        self.watch: Callable[[], None] | None = None
        """Called when a request must wait for a place and after every change of the limit (the Lender)."""

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return self._limit

    def contended(self) -> bool:
        """Whether a request waits for a place, or more places are out than the limit allows."""
        return self._waiting > 0 or self._in_flight > self._limit

    async def acquire(self) -> None:
        async with self._cond:
            if self._in_flight >= self.limit:
                self._waiting += 1
                if self.watch is not None:
                    self.watch()
                try:
                    await self._cond.wait_for(lambda: self._in_flight < self.limit)
                finally:
                    self._waiting -= 1
            self._in_flight += 1

    async def release(self, outcome: Outcome | None) -> None:
        """Free a place and adapt on ``outcome`` (None: already reported)."""
        async with self._cond:
            self._in_flight -= 1
            self._adapt(outcome)
            self._cond.notify_all()

    async def report(self, outcome: Outcome) -> None:
        """Adapt on the outcome of a request whose place stays out (a worker's kept place)."""
        async with self._cond:
            self._adapt(outcome)
            self._cond.notify_all()

    def _adapt(self, outcome: Outcome | None) -> None:
        """+1 after ``limit`` successes, halve on a 429 (bounded)."""
        before = self._limit
        if self.adaptive and outcome == "ok":
            self._successes += 1
            if self._successes >= self._limit:
                self._limit, self._successes = min(self.ceiling, self._limit + 1), 0
        elif self.adaptive and outcome == "throttled":
            self._limit, self._successes = max(self.floor, self._limit // 2), 0
        if self._limit != before and self.watch is not None:
            self.watch()


Tell = Callable[[int, dict[str, Any]], None]
"""Sends a notice (a dict) to a worker, by its source number."""


class Lender:
    """The parent's side of one model's leases: grants places of its ``ConnectionLimit`` to workers
    (``source`` numbers), takes them back, adapts on their outcomes, and tells them the limit."""

    def __init__(self, model: str, limit: ConnectionLimit, tell: Tell) -> None:
        self.model, self.limit, self._tell = model, limit, tell
        self.held: Counter[int] = Counter()
        """Places out per worker (in use or kept)."""
        self._keeping: set[int] = set()
        self._told = limit.limit
        self._notices: Counter[int] = Counter()
        """Notices told to each worker so far (a grant says how many came before it)."""
        limit.watch = self._watch

    async def grant(self, source: int) -> dict[str, Any]:
        """Wait for a place for ``source``; the reply says the limit, whether it may keep freed places and how
        many notices ``source`` was told before it (a notice told after it is newer than its ``keep``)."""
        await self.limit.acquire()
        self.held[source] += 1
        keep = not self.limit.contended()
        if keep:
            self._keeping.add(source)
        return {"limit": self.limit.limit, "keep": keep, "told": self._notices[source]}

    async def give_back(self, source: int, n: int = 1) -> None:
        """``source`` returns ``n`` places (their outcomes were reported)."""
        for _ in range(min(n, self.held[source])):
            self.held[source] -= 1
            await self.limit.release(None)

    async def report(self, outcome: Outcome, n: int = 1) -> None:
        for _ in range(n):
            await self.limit.report(outcome)

    async def drop(self, source: int) -> None:
        """A worker that ended or died holds no place."""
        self._keeping.discard(source)
        await self.give_back(source, self.held[source])
        self.held.pop(source, None)

    def _watch(self) -> None:
        """Tell the workers a changed limit; when a request waits for a place (or too many are out), tell
        every worker that keeps places to give them back."""
        changed, contended = self.limit.limit != self._told, self.limit.contended()
        self._told = self.limit.limit
        told = set(self.held) if changed else set(self._keeping) if contended else set()
        for source in told:
            self._notices[source] += 1
            self._tell(source, {"op": "limit", "model": self.model, "limit": self._told,
                                "keep": source in self._keeping and not contended})
        if contended:
            self._keeping.clear()


Ask = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Sends a request to the parent and returns its reply."""
Notify = Callable[[dict[str, Any]], None]
"""Sends a notice to the parent (no reply)."""


class LeasedLimit(ConnectionLimit):
    """A worker process's lease of a model's limit held by the study's parent (see the module docstring)."""

    def __init__(self, ask: Ask, notify: Notify, model: str, adaptive: bool) -> None:
        super().__init__(1)
        self.adaptive, self._ask, self._notify, self._model = adaptive, ask, notify, model
        self._have = 0  # places leased (in use or kept)
        self._keep = False
        self._notices = 0  # the parent's notices received
        self._outcomes: Counter[Outcome] = Counter()  # not yet reported

    async def acquire(self) -> None:
        if self._in_flight < self._have:
            self._in_flight += 1
            return
        request = asyncio.ensure_future(self._ask({"op": "acquire", "model": self._model}))
        try:
            got = await asyncio.shield(request)
        except asyncio.CancelledError:  # the place granted later is not this worker's to keep
            request.add_done_callback(self._granted_late)
            raise
        self._have, self._in_flight = self._have + 1, self._in_flight + 1
        # The reply is read before the notices told after it, but this resumes later: a notice read meanwhile
        # (give the kept places back: another process waits) is newer than the reply's ``keep``, which would
        # otherwise keep this worker's places while every other request waits for them.
        if int(got["told"]) >= self._notices:
            self._limit, self._keep = int(got["limit"]), bool(got["keep"])

    async def release(self, outcome: Outcome | None) -> None:
        self._in_flight -= 1
        if self.adaptive and outcome is not None:
            if not self._outcomes:
                asyncio.get_running_loop().call_soon(self._report)
            self._outcomes[outcome] += 1
        if not self._keep:
            self._give_back(1)

    def _granted_late(self, request: asyncio.Future[dict[str, Any]]) -> None:
        if not request.cancelled() and request.exception() is None:
            self._notify({"op": "release", "model": self._model, "n": 1})

    def told(self, limit: int, keep: bool) -> None:
        """The parent's notice: the limit now, and whether to keep freed places (if not, the kept go back)."""
        self._notices += 1
        self._limit, self._keep = limit, keep
        if not keep:
            self._give_back(self._have - self._in_flight)

    def _give_back(self, n: int) -> None:
        if n > 0:
            self._report()  # the outcomes first: the parent adapts before it hands the places on
            self._have -= n
            self._notify({"op": "release", "model": self._model, "n": n})

    def _report(self) -> None:
        for outcome, n in self._outcomes.items():
            self._notify({"op": "outcome", "model": self._model, "outcome": outcome, "n": n})
        self._outcomes.clear()
