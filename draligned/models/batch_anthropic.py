"""Anthropic Message Batches for ``anthropic`` models (``/v1/messages/batches``).

Submit: ``{"requests": [{"custom_id", "params": <body>}]}``, where ``params`` is the body a synchronous
messages call sends. A request the API refuses at creation is named by its index in the error
(``requests.N``), reported here as its line and custom_id. Status: ``processing_status``
``in_progress``, ``canceling`` or ``ended``. Results (from ``results_url``, JSONL in any order):
``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored", "error"} |
{"type": "canceled"} | {"type": "expired"}}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from draligned.models.base import ModelError
from draligned.models.batch import BatchAPI, BatchLine, BatchStatus, LineResult, Outcome, line_for, missing

_INDEX = re.compile(r"requests\.(\d+)")
_OUTCOMES: dict[str, Outcome] = {"succeeded": "succeeded", "errored": "errored", "canceled": "canceled",
                                 "expired": "expired"}


def classify_line(raw: str) -> LineResult | None:
    """One results line; None when it is not a JSON object with a custom_id."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("custom_id"), str):
        return None
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

    async def submit(self, lines: Sequence[BatchLine]) -> str:
        client = self.model.client()
        requests = [{"custom_id": x.custom_id, "params": x.body} for x in lines]
        try:
            batch = await self.call(lambda: client.messages.batches.create(requests=requests))
        except ModelError as exc:
            if m := _INDEX.search(str(exc)):
                where = line_for([x.custom_id for x in lines], int(m.group(1)) + 1)
                raise ModelError(f"the batch failed validation at {where}: {exc}", exc.attempts) from None
            raise
        return str(batch.id)

    @staticmethod
    def _status(batch: Any) -> BatchStatus:
        counts = batch.request_counts.model_dump() if batch.request_counts is not None else {}
        return BatchStatus(batch_id=batch.id, status=batch.processing_status,
                           ended=batch.processing_status == "ended",
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

        found: dict[str, LineResult] = {}
        for raw in self.model.redact((await self.call(download)).decode("utf-8")).splitlines():
            result = classify_line(raw) if raw.strip() else None
            if result is not None:
                found.setdefault(result.custom_id, result)
        return missing(custom_ids, found, "errored")
