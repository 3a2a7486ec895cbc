"""Bounded, visible retries for real model calls (``draligned.backoff`` drives them; SDK retries are off).

Every failed attempt becomes a ``ModelAttempt`` (error class, status, wait) that the run
record keeps. 429, 5xx, timeouts and connection errors are retried with exponential
backoff and jitter, honouring ``Retry-After``, within a bound on attempts and on total
time; any other error fails at once. Retries resend the same body: the agent never sees them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from draligned.backoff import retry_with_backoff, seconds_to_wait
from draligned.records import ModelAttempt, Record

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429})


class RetryPolicy(Record, strict=True):
    """The ``retry`` table of a model declaration (transport only: not part of any hash). Every value
    is bounded: ``max_connections = 0`` would wait forever, a NaN timeout would never fire."""

    max_attempts: int = Field(6, ge=1, le=100)
    """Attempts per model call, the first included."""
    max_total_s: float = Field(1800.0, gt=0, le=7 * 86_400, allow_inf_nan=False)
    """No attempt starts after this many seconds since the first one began."""
    initial_wait_s: float = Field(2.0, ge=0, le=3600, allow_inf_nan=False)
    """First backoff wait; it doubles per attempt, plus up to this much random jitter."""
    max_wait_s: float = Field(120.0, ge=0, le=86_400, allow_inf_nan=False)
    """Cap on a backoff wait (a longer ``Retry-After`` from the server is still honoured)."""
    timeout_s: float = Field(900.0, gt=0, le=86_400, allow_inf_nan=False)
    """Per-attempt request timeout in seconds."""
    max_connections: int | Literal["auto"] = 8
    """Requests in flight to this model at once, shared by all runs of a study; ``"auto"`` adapts it
    (AIMD: start at ``auto_start``, +1 per window of successes, halved on a 429, within the auto bounds)."""
    auto_start: int = Field(2, ge=1, le=1024)
    """Starting limit of ``max_connections = "auto"``."""
    auto_min: int = Field(1, ge=1, le=1024)
    """Lowest limit of ``max_connections = "auto"``."""
    auto_max: int = Field(32, ge=1, le=1024)
    """Highest limit of ``max_connections = "auto"``."""
    http_client: Literal["aiohttp", "httpx"] = "aiohttp"
    """The SDK's HTTP transport: ``aiohttp`` (its ``DefaultAioHttpClient``, about half the CPU per call) or
    ``httpx`` (the SDK's default client). Both send the same bytes and raise the same SDK errors."""
    stop_after_connection_failures: int = Field(3, ge=1, le=1_000_000)
    """After this many consecutive runs of the model failed because it could not be reached (connection
    refused, DNS, ...), no new run of it starts in this ``draligned run``; its slots stay unstarted."""

    @model_serializer(mode="wrap")
    def _default_transport_unsaid(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``http_client`` is dumped only when it is not the default: the table's dump is recorded (an
        evaluator's ``evaluator.json``, compared byte for byte when it reads again), and declarations made
        before the field existed must keep their bytes, or re-reading an archive would be refused."""
        data: dict[str, Any] = handler(self)
        if self.http_client == "aiohttp":
            data.pop("http_client", None)
        return data

    @field_validator("max_connections")
    @classmethod
    def _connections_bounded(cls, value: int | Literal["auto"]) -> int | Literal["auto"]:
        if isinstance(value, int) and not 1 <= value <= 1024:
            raise ValueError(f"must be 1 to 1024 or \"auto\" (got {value})")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> RetryPolicy:
        if not 1 <= self.auto_min <= self.auto_start <= self.auto_max:
            raise ValueError(f"need 1 <= auto_min <= auto_start <= auto_max (got {self.auto_min}, "
                             f"{self.auto_start}, {self.auto_max})")
        return self


@dataclass(frozen=True)
class Failure:
    """A classified failed attempt."""

    retryable: bool
    error: str
    status_code: int | None
    message: str
    retry_after: float | None = None
    connection_limit: int | None = None


class AttemptFailed(Exception):
    """Raised inside the retry loop for a classified failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class GaveUp(Exception):
    """The retry loop ended without a reply."""

    def __init__(self, failure: Failure, attempts: list[ModelAttempt]) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.attempts = attempts


def status_failure(error: str, status: int, message: str, headers: Mapping[str, str]) -> Failure:
    """Classify an HTTP error status: 408/409/429/5xx are retried, the rest fail fast."""
    retryable = status in RETRYABLE_STATUS or status >= 500
    return Failure(retryable, error, status, message, retry_after(headers) if retryable else None)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``retry-after`` seconds or HTTP date)."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(float(ms) / 1000, 0.0)
        value = headers.get("retry-after")
        return None if value is None else seconds_to_wait(value)
    except (TypeError, ValueError):
        return None


async def call_with_retries(
    attempt_once: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], Failure | None],
    policy: RetryPolicy,
    on_retry: Callable[[], None] | None = None,
) -> tuple[T, list[ModelAttempt]]:
    """Run ``attempt_once`` until it succeeds or the policy gives up.

    ``classify`` maps an exception to a ``Failure`` (None: not a transport failure; it
    propagates unchanged). Returns (result, failed attempts); on giving up raises
    ``GaveUp`` carrying the failed attempts and the last failure. ``on_retry`` is told before each wait.
    """
    attempts: list[ModelAttempt] = []

    async def once() -> T:
        try:
            return await attempt_once()
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            attempts.append(ModelAttempt(attempt=len(attempts) + 1, error=failure.error,
                                         status_code=failure.status_code, detail=failure.message[:500],
                                         connection_limit=failure.connection_limit))
            raise AttemptFailed(failure) from exc

    try:
        result: T = await retry_with_backoff(
            once, policy, attempts, lambda e: isinstance(e, AttemptFailed) and e.failure.retryable,
            lambda e: e.failure.retry_after if isinstance(e, AttemptFailed) else None, on_retry)
    except AttemptFailed as exc:
        raise GaveUp(exc.failure, attempts) from exc
    return result, attempts
