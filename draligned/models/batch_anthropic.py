"""Anthropic Message Batches for ``anthropic`` models (``/v1/messages/batches``).

Submit: ``{"requests": [{"custom_id", "params": <body>}]}``, where ``params`` is the body a synchronous
messages call sends. A request the API refuses at creation is named by its index in the error
(``requests.N``), reported here as its line and custom_id. Status: ``processing_status``
``in_progress``, ``canceling`` or ``ended``. Results (from ``results_url``, JSONL in any order):
``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored", "error"} |
{"type": "canceled"} | {"type": "expired"}}``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from draligned.models import batch
from draligned.models.base import ModelError
from draligned.models.batch import BatchAPI, BatchLine, BatchStatus, LineResult, Outcome

_INDEX = re.compile(r"requests\.(\d+)")
_OUTCOMES: dict[str, Outcome] = {"succeeded": "succeeded", "errored": "errored", "canceled": "canceled",
                                 "expired": "expired"}


def classify_line(data: dict[str, Any], raw: str) -> LineResult:
    """One results line."""
    result: dict[str, Any] = data["result"] if isinstance(data.get("result"), dict) else {}
    outcome: Outcome = _OUTCOMES.get(str(result.get("type")), "errored")
    message = result.get("message")
    if outcome == "succeeded" and isinstance(message, dict):
        return LineResult(data["custom_id"], "succeeded", raw, body=message)
    error = result.get("error")
    inner = error.get("error") if isinstance(error, dict) and isinstance(error.get("error"), dict) else error
    detail = (f"{inner.get('type') or 'error'}: {inner.get('message') or ''}".strip()
              if isinstance(inner, dict) else f"result type {result.get('type')!r}")
    return LineResult(data["custom_id"], "errored" if outcome == "succeeded" else outcome, raw, error=detail)


class AnthropicBatch(BatchAPI):
    """Message Batches through the official ``anthropic`` SDK."""

    max_lines = 100_000
    max_bytes = 240_000_000

    async def submit(self, lines: Sequence[BatchLine]) -> str:
        client = self.model.client()
        requests = [{"custom_id": x.custom_id, "params": x.body} for x in lines]
        try:
            job = await self.call(lambda: client.messages.batches.create(requests=requests))
        except ModelError as exc:
            if m := _INDEX.search(str(exc)):
                where = batch.line_for([x.custom_id for x in lines], int(m.group(1)) + 1)
                raise ModelError(f"the batch failed validation at {where}: {exc}", exc.attempts) from None
            raise
        return str(job.id)

    @staticmethod
    def _status(job: Any) -> BatchStatus:
        counts = job.request_counts.model_dump() if job.request_counts is not None else {}
        return BatchStatus(batch_id=job.id, status=job.processing_status,
                           ended=job.processing_status == "ended",
                           counts={k: int(v) for k, v in counts.items() if isinstance(v, int)})

    async def retrieve(self, batch_id: str, custom_ids: Sequence[str]) -> BatchStatus:
        client = self.model.client()
        return self._status(await self.call(lambda: client.messages.batches.retrieve(batch_id)))

    async def cancel(self, batch_id: str) -> BatchStatus:
        client = self.model.client()
        return self._status(await self.call(lambda: client.messages.batches.cancel(batch_id)))

    async def results(self, batch_id: str, custom_ids: Sequence[str]) -> list[LineResult]:
        client = self.model.client()

        async def download() -> bytes:
            decoder = await client.messages.batches.results(batch_id)
            return bytes(await decoder.http_response.aread())

        found = batch.result_lines(self.model.redact((await self.call(download)).decode("utf-8")), classify_line)
        return batch.missing(custom_ids, found, "errored")
