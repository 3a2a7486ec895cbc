"""The batch transport: independent model calls sent as one provider batch job, at about half price.

A model call is a request body plus a transport. The body of a batch line is the dict the protocol's
``build_body`` makes for the synchronous call (one function builds both), so a call's input does not
depend on how it was sent. A batch job is submitted once (``submit`` returns its id, which the caller
persists before polling), polled with ``retrieve`` until it has ended, and its per-line results are
downloaded with ``results``: each line ``succeeded`` (its reply body is read by the protocol's own
``parse_reply``), ``errored``, ``expired`` or ``canceled``, and keeps the result line exactly as the
provider sent it. ``cancel`` asks the provider to stop a job. Every API call goes through the model's
retries. The provider pieces live in ``batch_openai`` (``/v1/files`` + ``/v1/batches``, for chat
completions and responses) and ``batch_anthropic`` (``/v1/messages/batches``).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from draligned.models.base import ModelAPI, ModelError
from draligned.models.remote import RemoteModel
from draligned.records import ModelReply, Record

Outcome = Literal["succeeded", "errored", "expired", "canceled"]

#: The sleep between polls; tests replace it (the poll interval itself is an argument).
SLEEP: Callable[[float], Awaitable[None]] = asyncio.sleep


@dataclass(frozen=True)
class BatchLine:
    """One request of a batch: its line id (``custom_id``) and the body the synchronous call would send."""

    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineResult:
    """What the provider returned for one line."""

    custom_id: str
    outcome: Outcome
    raw: str
    """The result line as received (credentials redacted)."""
    body: dict[str, Any] | None = None
    """The reply body of a succeeded line."""
    error: str | None = None
    """Why an errored, expired or canceled line has no reply (provider code and message)."""


class BatchStatus(Record):
    """Where one batch job stands, as the provider reported it."""

    batch_id: str
    """The provider's batch id."""
    status: str
    """The provider's own status word (OpenAI: validating ... cancelled; Anthropic: in_progress, canceling, ended)."""
    ended: bool
    """No line will change any more: results (if any) can be downloaded."""
    counts: dict[str, int] = {}
    """The provider's request counts (OpenAI total/completed/failed; Anthropic per result type)."""
    problem: str | None = None
    """Why the whole batch failed (validation), naming the first bad line and its custom_id."""


class BatchAPI(ABC):
    """One provider's batch endpoints, driven through a real model's SDK client and retries."""

    #: Most lines one job may hold, and most bytes of request bodies (the provider's documented limits,
    #: the byte limit with a margin for the line framing).
    max_lines: int
    max_bytes: int

    def __init__(self, model: RemoteModel) -> None:
        self.model = model

    async def call(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        """One API call with the model's retries (ModelError naming the model when they give up)."""
        result, _ = await self.model.with_retries(attempt)
        return result

    @abstractmethod
    async def submit(self, lines: Sequence[BatchLine]) -> str:
        """Create one batch job holding ``lines``; return its id (nothing is retried after creation)."""

    @abstractmethod
    async def retrieve(self, batch_id: str, custom_ids: Sequence[str]) -> BatchStatus:
        """The job's status; ``custom_ids`` in line order lets a validation failure name its line."""

    @abstractmethod
    async def results(self, batch_id: str, custom_ids: Sequence[str]) -> list[LineResult]:
        """One result per id of ``custom_ids`` (an id the provider left out: no result line, by why the job ended)."""

    @abstractmethod
    async def cancel(self, batch_id: str) -> BatchStatus:
        """Ask the provider to cancel the job; lines already done keep their results."""

    def reply(self, result: LineResult, request_body: dict[str, Any]) -> ModelReply:
        """A succeeded line as a ModelReply, read exactly as a synchronous reply body; its raw response is
        the whole result line (ModelError if the body is unreadable)."""
        assert result.body is not None
        reply = self.model.parse_reply(json.dumps(result.body, ensure_ascii=False), request_body)
        return reply.model_copy(update={"raw_response": result.raw})


def chunks(lines: Sequence[BatchLine], max_lines: int, max_bytes: int) -> list[list[BatchLine]]:
    """``lines`` in order, split into jobs of at most ``max_lines`` lines and ``max_bytes`` bytes of bodies
    (a single line larger than ``max_bytes`` gets a job of its own: the provider names it if it refuses)."""
    jobs: list[list[BatchLine]] = []
    size = 0
    for line in lines:
        n = len(json.dumps(line.body, separators=(",", ":"), ensure_ascii=False).encode())
        if not jobs or len(jobs[-1]) >= max_lines or size + n > max_bytes:
            jobs.append([])
            size = 0
        jobs[-1].append(line)
        size += n
    return jobs


def result_lines(text: str, classify: Callable[[dict[str, Any], str], LineResult]) -> dict[str, LineResult]:
    """The results of a JSONL results file by custom_id (the first line of an id wins; a line that is not a
    JSON object with a string custom_id is skipped); ``classify`` reads one (parsed, raw) line."""
    found: dict[str, LineResult] = {}
    for raw in text.splitlines():
        try:
            data = json.loads(raw) if raw.strip() else None
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("custom_id"), str):
            found.setdefault(data["custom_id"], classify(data, raw))
    return found


def line_for(custom_ids: Sequence[str], line: object) -> str:
    """``line N (custom_id X)`` for a 1-based line number of the submitted file, as errors name it."""
    if isinstance(line, int) and 1 <= line <= len(custom_ids):
        return f"line {line} (custom_id {custom_ids[line - 1]})"
    return f"line {line}" if line is not None else "a line"


def missing(custom_ids: Sequence[str], found: dict[str, LineResult], why: Outcome) -> list[LineResult]:
    """The results in ``custom_ids`` order; an id without a result line gets outcome ``why``."""
    return [found.get(cid) or LineResult(cid, why, "", error=f"no result line for this request (batch {why})")
            for cid in custom_ids]


def batch_api(model: ModelAPI) -> BatchAPI:
    """The batch transport of a model's protocol; ModelError for a protocol that has none."""
    protocol = model.declaration.protocol
    if isinstance(model, RemoteModel) and protocol in ("openai-chat", "openai-responses"):
        from draligned.models.batch_openai import OpenAIBatch
        return OpenAIBatch(model, "/v1/chat/completions" if protocol == "openai-chat" else "/v1/responses")
    if isinstance(model, RemoteModel) and protocol == "anthropic":
        from draligned.models.batch_anthropic import AnthropicBatch
        return AnthropicBatch(model)
    raise ModelError(f"model {model.declaration.name!r}: protocol {protocol!r} has no batch API; batch "
                     f"mode needs openai-chat, openai-responses or anthropic (read without --batch)")


async def poll(api: BatchAPI, batch_id: str, custom_ids: Sequence[str], interval_s: float,
               seen: Callable[[BatchStatus], None] | None = None) -> BatchStatus:
    """Retrieve the job every ``interval_s`` seconds until it has ended; ``seen`` gets each status."""
    while True:
        status = await api.retrieve(batch_id, custom_ids)
        if seen is not None:
            seen(status)
        if status.ended:
            return status
        await SLEEP(interval_s)
