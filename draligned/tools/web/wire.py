"""What every web call shares: the HTTP answer as received, named failures, and bounded retries.

The provider SDKs (tavily-python, exa-py) parse replies themselves and raise their own error types,
dropping the status, the headers and the bytes. Their ``httpx`` clients are therefore built here
with a response hook that keeps every answer (:class:`Exchange`) for the call in progress (a
context variable, so concurrent runs never see each other's answers): the raw body is archived
and read by draligned, and a failure is classified from the status the server sent, whatever the
SDK made of it.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from draligned.backoff import chain, retry_with_backoff, seconds_to_wait
from draligned.records import ModelAttempt
from draligned.tls import tls_context
from draligned.tools.errors import ToolError
from draligned.tools.search_spec import WebRetry

USER_AGENT = "draligned-reader/0.1 (research agent evaluation; one fixed user agent)"
"""The one user agent every web request sends (providers' SDKs send their own to their APIs)."""


def utcnow() -> str:
    """UTC timestamp in ISO format (seconds)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Exchange:
    """One HTTP answer as received."""

    url: str
    status: int
    headers: dict[str, str]
    body: bytes
    at: str


class FetchFailed(Exception):
    """A web call that failed with a named reason (retried first when ``retryable``)."""

    def __init__(self, code: ToolError, message: str, exchange: Exchange | None = None, *,
                 retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.exchange = exchange
        self.retryable = retryable


_CAPTURE: contextvars.ContextVar[list[Exchange] | None] = contextvars.ContextVar("draligned_web_capture",
                                                                                 default=None)


async def _keep_response(response: httpx.Response) -> None:
    box = _CAPTURE.get()
    if box is not None:
        await response.aread()
        box.append(Exchange(str(response.url), response.status_code, dict(response.headers), response.content,
                            utcnow()))


def capturing_client(timeout: float, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client whose answers are kept for the call in progress (see :func:`exchange`)."""
    return httpx.AsyncClient(timeout=timeout, event_hooks={"response": [_keep_response]}, verify=tls_context(),
                             **kwargs)


def status_failure(ex: Exchange, what: str) -> FetchFailed:
    """The named failure of an error status from a provider API (``what`` names it in the message)."""
    s = ex.status
    if s == 429:
        return FetchFailed(ToolError.RATE_LIMITED, f"{what} is rate limiting (HTTP 429)", ex, retryable=True)
    if s >= 500 or s == 408:
        return FetchFailed(ToolError.PROVIDER_ERROR, f"{what} failed (HTTP {s})", ex, retryable=True)
    if s in (401, 403):
        return FetchFailed(ToolError.AUTH_FAILED, f"{what} refused the key (HTTP {s})", ex)
    if s in (400, 422):
        return FetchFailed(ToolError.BAD_REQUEST, f"{what} refused the request (HTTP {s}): "
                                                  f"{ex.body[:200].decode('utf-8', 'replace')}", ex)
    return FetchFailed(ToolError.PROVIDER_ERROR, f"{what} answered HTTP {s}", ex)


def transport_failure(exc: BaseException, what: str) -> FetchFailed | None:
    """A timeout or connection error anywhere in the exception chain (SDKs wrap httpx's), or None."""
    for e in chain(exc):
        if isinstance(e, httpx.TimeoutException):
            return FetchFailed(ToolError.TIMEOUT, f"{what} did not answer in time", retryable=True)
        if isinstance(e, httpx.TransportError):
            return FetchFailed(ToolError.CONNECTION_ERROR, f"{what} could not be reached: {type(e).__name__}",
                               retryable=True)
    return None


async def exchange(call: Callable[[], Awaitable[object]], what: str) -> Exchange:
    """Make one SDK call and return the answer it received; a failure is a :class:`FetchFailed`.

    An error status is named from the status itself; a 200 the SDK could not parse is a malformed reply
    (its body kept); a timeout or connection error is named from the exception chain.
    """
    box: list[Exchange] = []
    token = _CAPTURE.set(box)
    try:
        await call()
    except FetchFailed:
        raise
    except Exception as exc:
        if box and box[-1].status >= 400:
            raise status_failure(box[-1], what) from exc
        if box:
            raise FetchFailed(ToolError.MALFORMED_REPLY, f"{what} sent a reply that cannot be read "
                                                         f"({type(exc).__name__})", box[-1]) from exc
        if (failure := transport_failure(exc, what)) is not None:
            raise failure from exc
        raise
    finally:
        _CAPTURE.reset(token)
    if not box:
        raise FetchFailed(ToolError.PROVIDER_ERROR, f"{what}: no answer was received")
    if box[-1].status >= 400:
        raise status_failure(box[-1], what)
    return box[-1]


def retry_after(ex: Exchange) -> float | None:
    """Seconds the server asked to wait (``Retry-After``: seconds or an HTTP date), or None."""
    value = {k.lower(): v for k, v in ex.headers.items()}.get("retry-after")
    try:
        return None if value is None else seconds_to_wait(value)
    except (TypeError, ValueError):
        return None


async def with_retries(attempt: Callable[[], Awaitable[Exchange]], policy: WebRetry
                       ) -> tuple[Exchange | None, list[ModelAttempt], FetchFailed | None]:
    """Run ``attempt`` through ``draligned.backoff``: a retryable failure (429, 5xx, timeout, connection error)
    is tried again with exponential backoff and jitter, at least as long as ``Retry-After`` asks, within the
    policy's bounds.
    Returns (the answer or None, failed attempts, the final failure or None)."""
    attempts: list[ModelAttempt] = []

    async def once() -> Exchange:
        try:
            return await attempt()
        except FetchFailed as exc:
            ex = exc.exchange
            attempts.append(ModelAttempt(attempt=len(attempts) + 1, error=str(exc.code),
                                         status_code=ex.status if ex else None, detail=str(exc)[:500]))
            raise

    try:
        return await retry_with_backoff(
            once, policy, attempts, lambda e: isinstance(e, FetchFailed) and e.retryable,
            lambda e: retry_after(e.exchange) if isinstance(e, FetchFailed) and e.exchange else None), attempts, None
    except FetchFailed as exc:
        return None, attempts, exc
