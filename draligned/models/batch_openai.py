"""The OpenAI Batch API for ``openai-chat`` and ``openai-responses`` models (and servers speaking it).

Submit: a JSONL file of ``{"custom_id", "method": "POST", "url": <endpoint>, "body"}`` lines is
uploaded to ``/v1/files`` (purpose ``batch``), then ``/v1/batches`` creates the job for that endpoint
with a 24 h completion window. The body is serialised as the SDK serialises a synchronous call
(compact separators, UTF-8), so the bytes of a line's body are those a synchronous call sends.
Status: ``validating``, ``in_progress``, ``finalizing`` (running), ``completed``, ``failed``
(validation: ``errors.data[].line`` names the bad lines), ``expired``, ``cancelling``, ``cancelled``.
Results: the output file (``{"custom_id", "response": {"status_code", "request_id", "body"},
"error"}``) and the error file; error code ``batch_expired`` is an expired line, ``batch_cancelled`` a
canceled one, any other error or a non-2xx status an errored one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import Any

from draligned.models.batch import (
    BatchAPI,
    BatchLine,
    BatchStatus,
    LineResult,
    Outcome,
    line_for,
    missing,
    result_lines,
)
from draligned.models.remote import RemoteModel

ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_WHY: dict[str, Outcome] = {"expired": "expired", "cancelled": "canceled", "cancelling": "canceled"}


def jsonl(lines: Sequence[BatchLine], endpoint: str) -> bytes:
    """The batch input file."""
    return b"".join(json.dumps({"custom_id": x.custom_id, "method": "POST", "url": endpoint, "body": x.body},
                               separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for x in lines)


def classify_line(data: dict[str, Any], raw: str) -> LineResult:
    """One line of an output or error file."""
    cid, error, response = data["custom_id"], data.get("error"), data.get("response")
    if isinstance(error, dict) and error:
        code = str(error.get("code") or "error")
        outcome: Outcome = ("expired" if code == "batch_expired" else "canceled" if code == "batch_cancelled"
                            else "errored")
        return LineResult(cid, outcome, raw, error=f"{code}: {error.get('message') or ''}".strip())
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    if isinstance(status, int) and 200 <= status < 300 and isinstance(body, dict):
        return LineResult(cid, "succeeded", raw, body=body)
    detail = json.dumps(body, ensure_ascii=False)[:300] if body is not None else "no response body"
    return LineResult(cid, "errored", raw, error=f"HTTP {status}: {detail}")


class OpenAIBatch(BatchAPI):
    """``/v1/files`` + ``/v1/batches`` through the official ``openai`` SDK."""

    max_lines = 50_000
    max_bytes = 190_000_000

    def __init__(self, model: RemoteModel, endpoint: str) -> None:
        super().__init__(model)
        self.endpoint = endpoint

    async def submit(self, lines: Sequence[BatchLine]) -> str:
        client = self.model.client()
        upload = await self.call(lambda: client.files.create(
            file=("draligned-batch.jsonl", jsonl(lines, self.endpoint), "application/jsonl"), purpose="batch"))
        batch = await self.call(lambda: client.batches.create(
            input_file_id=upload.id, endpoint=self.endpoint, completion_window="24h"))
        return str(batch.id)

    def _status(self, batch: Any, custom_ids: Sequence[str]) -> BatchStatus:
        counts = batch.request_counts.model_dump() if batch.request_counts is not None else {}
        problem = None
        if batch.status == "failed":
            errors = (batch.errors.data or []) if batch.errors is not None else []
            first = errors[0] if errors else None
            problem = ("the batch failed validation: " + (
                f"{line_for(custom_ids, first.line)}: {first.code or 'error'}: {first.message or ''}"
                + (f" (param {first.param})" if first.param else "") if first else "no error given"))
        return BatchStatus(batch_id=batch.id, status=batch.status, ended=batch.status in ENDED,
                           counts={k: int(v) for k, v in counts.items() if isinstance(v, int)}, problem=problem)

    async def retrieve(self, batch_id: str, custom_ids: Sequence[str]) -> BatchStatus:
        client = self.model.client()
        return self._status(await self.call(lambda: client.batches.retrieve(batch_id)), custom_ids)

    async def cancel(self, batch_id: str) -> BatchStatus:
        client = self.model.client()
        return self._status(await self.call(lambda: client.batches.cancel(batch_id)), [])

    async def results(self, batch_id: str, custom_ids: Sequence[str]) -> list[LineResult]:
        client = self.model.client()
        batch = await self.call(lambda: client.batches.retrieve(batch_id))
        found: dict[str, LineResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = await self.call(partial(client.files.content, file_id))
                found = result_lines(self.model.redact(content.text), classify_line) | found
        return missing(custom_ids, found, _WHY.get(batch.status, "errored"))
