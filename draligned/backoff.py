"""Bounded retries with exponential backoff, shared by model calls and web calls (tenacity drives them).

A caller's attempt records each failed try as a ``ModelAttempt`` and raises; this loop retries what the
caller calls retryable, waiting at least as long as the server asked (``Retry-After``), within a bound on
attempts and on total time, and writes each wait onto the attempt that preceded it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import tenacity

from draligned.records import ModelAttempt

T = TypeVar("T")

#: The sleep between attempts; tests replace it to make waits instant (recorded waits are unchanged).
SLEEP: Callable[[float], Awaitable[None]] = asyncio.sleep


class Bounds(Protocol):
    """The retry bounds a policy table declares (a model's ``retry``, a study's ``[search.retry]``)."""

    max_attempts: int
    max_total_s: float
    initial_wait_s: float
    max_wait_s: float


def seconds_to_wait(value: str) -> float:
    """A ``Retry-After`` value in seconds: a number of seconds or an HTTP date (ValueError or TypeError when
    it is neither); never negative."""
    try:
        return max(float(value), 0.0)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max((when - dt.datetime.now(dt.UTC)).total_seconds(), 0.0)


async def retry_with_backoff(
    attempt: Callable[[], Awaitable[T]],
    bounds: Bounds,
    attempts: list[ModelAttempt],
    retryable: Callable[[BaseException], bool],
    asked_wait: Callable[[BaseException], float | None],
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Run ``attempt`` until it succeeds, raises what is not ``retryable``, or the bounds give up (the last
    exception propagates). ``attempt`` appends to ``attempts`` before raising; each wait is recorded on the
    last of them (``wait_s``) and ``on_retry`` is told before it is slept."""
    started = time.monotonic()
    try:  # the first attempt outside tenacity: nearly every call succeeds at once, and its per-call machinery
        return await attempt()  # (a retry state, its iterator, stop and wait checks) was a twentieth of an SDK call
    except BaseException as exc:  # tenacity's own test: what it would not retry propagates as raised
        if not retryable(exc):
            raise
        first: list[BaseException] = [exc]
    backoff = tenacity.wait_exponential_jitter(multiplier=bounds.initial_wait_s, max=bounds.max_wait_s,
                                               jitter=bounds.initial_wait_s)

    async def again() -> T:
        """Tenacity's attempt 1 is the one that just failed (raised again, not sent again); then ``attempt``."""
        if first:
            raise first.pop()
        return await attempt()

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = asked_wait(exc) if exc is not None else None
        return max(backoff(state), asked or 0.0)

    def record_wait(state: tenacity.RetryCallState) -> None:
        attempts[-1] = attempts[-1].model_copy(update={"wait_s": round(state.upcoming_sleep, 3)})
        if on_retry is not None:
            on_retry()

    retrying = tenacity.AsyncRetrying(
        sleep=lambda s: SLEEP(s),
        # tenacity's clock starts after the first attempt: its delay is what is left of max_total_s
        stop=(tenacity.stop_after_attempt(bounds.max_attempts)
              | tenacity.stop_before_delay(bounds.max_total_s - (time.monotonic() - started))),
        wait=wait,
        retry=tenacity.retry_if_exception(retryable),
        before_sleep=record_wait,
        reraise=True,
    )
    result: T = await retrying(again)
    return result


def chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors under it (``__cause__``, else ``__context__``), outermost first."""
    out, seen = [exc], {id(exc)}
    while (nxt := out[-1].__cause__ or out[-1].__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        out.append(nxt)
    return out
