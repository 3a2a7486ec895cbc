"""The single writer of a run record: every event appended through it, every text put in the archive.

Executors and the tools of a run (the logged pool search) share one :class:`RunWriter`, so a run
record has one event sequence and one place that appends to it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from draligned.archive.store import Archive
from draligned.records import (
    Acquisition,
    Counters,
    DelegateEvent,
    DeliveredBy,
    DraftEvent,
    FetchAttemptEvent,
    FinalEvent,
    ModelAttempt,
    ModelAttemptEvent,
    ModelCallEvent,
    ModelReply,
    NoticeEvent,
    PoolRoundEvent,
    RunRecord,
    RunStatus,
    SnapshotEvent,
    ToolCall,
    ToolCallEvent,
    WorkerRun,
)


def utcnow() -> str:
    """UTC timestamp in ISO format (seconds)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class RunWriter:
    """Builds a run record event by event, putting every text in the archive as a blob."""

    def __init__(self, archive: Archive, record: RunRecord) -> None:
        self.archive = archive
        self.record = record

    def _event_id(self) -> str:
        """The id of the next event (e0001, e0002, ...), derived from the record."""
        return f"e{len(self.record.events) + 1:04d}"

    def start(self) -> None:
        """Write the started marker (kept even if the run is interrupted)."""
        self.archive.write_started(self.record)

    def attempts(self, attempts: list[ModelAttempt], role: str = "executor") -> None:
        """Record failed attempts of a model call (retried, or the one that ended it)."""
        for a in attempts:
            self.record.events.append(ModelAttemptEvent(event_id=self._event_id(), role=role, attempt=a))
        self.record.counters.failed_attempts += len(attempts)

    def model_call(self, reply: ModelReply, role: str = "executor", violations: list[str] | None = None,
                   cost_usd: float | None = None) -> ModelCallEvent:
        """Record a reply (after its failed attempts) with its check violations and cost."""
        self.attempts(reply.attempts, role)
        body = reply.request_body
        fields = {k: v for k, v in body.items() if k not in ("messages", "tools", "input", "system")}
        ev = ModelCallEvent(
            event_id=self._event_id(), role=role,
            request_blob=self.archive.put_json_blob(body),
            response_blob=self.archive.put_blob(reply.raw_response),
            request_fields=fields, model_echo=reply.model_echo, finish_reason=reply.finish_reason,
            usage=reply.usage, latency_s=round(reply.latency_s, 6),
            n_tool_calls=len(reply.tool_calls), anomalies=reply.anomalies,
            violations=violations or [], cache_hit=reply.cache_hit, cost_usd=cost_usd,
            request_headers=reply.request_headers, headers_blob=(None if reply.response_headers is None
                          else self.archive.put_json_blob(reply.response_headers)),
            gateway=reply.gateway, connection_limit=reply.connection_limit,
        )
        c = self.record.counters
        c.model_calls += 1
        c.usage = c.usage + reply.usage
        c.cache_hits += int(reply.cache_hit)
        if cost_usd is not None:
            c.cost_usd = round((c.cost_usd or 0.0) + cost_usd, 8)
        self.record.events.append(ev)
        return ev

    def tool_call(self, call: ToolCall, text: str, error: str | None, request_text: str | None,
                  role: str = "executor", acquisition: Acquisition | None = None,
                  attempts: tuple[ModelAttempt, ...] = ()) -> ToolCallEvent:
        """Record a tool call, after the failed provider attempts behind it (web backends)."""
        for a in attempts:
            self.record.events.append(FetchAttemptEvent(event_id=self._event_id(), role=role, tool=call.name,
                                                        attempt=a))
        ev = ToolCallEvent(
            event_id=self._event_id(), role=role, call_id=call.id, tool=call.name,
            request_text=request_text, arguments_blob=self.archive.put_blob(call.raw_arguments),
            return_blob=self.archive.put_blob(text), return_chars=len(text), error=error,
            acquisition=acquisition,
        )
        self.record.counters.tool_calls += 1
        self.record.events.append(ev)
        return ev

    def draft(self, text: str, tool_event: str) -> DraftEvent:
        self.record.counters.drafts += 1
        ev = DraftEvent(event_id=self._event_id(), version=self.record.counters.drafts,
                        blob=self.archive.put_blob(text), chars=len(text), tool_event=tool_event)
        self.record.events.append(ev)
        return ev

    def final(self, text: str, delivered_by: DeliveredBy) -> FinalEvent:
        ev = FinalEvent(event_id=self._event_id(), blob=self.archive.put_blob(text), chars=len(text),
                        delivered_by=delivered_by)
        self.record.events.append(ev)
        self.record.final_blob = ev.blob
        return ev

    def notice(self, code: str, detail: str) -> None:
        self.record.events.append(NoticeEvent(event_id=self._event_id(), code=code, detail=detail))

    def snapshot(self, role: str, tool_event: str, manifest: dict, changed: dict[str, str | None],
                 files: int, size: int) -> SnapshotEvent:
        """Record a workspace snapshot whose manifest (path -> blob sha256) is stored as a blob."""
        ev = SnapshotEvent(event_id=self._event_id(), role=role, tool_event=tool_event,
                           manifest_blob=self.archive.put_json_blob(manifest), changed=changed,
                           files=files, bytes=size)
        self.record.events.append(ev)
        return ev

    def delegate(self, tool_event: str, workers: list[WorkerRun]) -> DelegateEvent:
        """Link a delegate_batch tool call to its workers' transcripts."""
        ev = DelegateEvent(event_id=self._event_id(), tool_event=tool_event, workers=workers)
        self.record.events.append(ev)
        return ev

    def pool_round(self, pool_blob: str, budget: int, round: int, query: str, wish_stop: bool, stop_prob: float,
                   u_stop: float | None, probs: list[float] | None = None, chosen: str | None = None,
                   p_chosen: float | None = None, u_select: float | None = None) -> PoolRoundEvent:
        """Record one round of logged pool search; ``probs`` (None after a sampled stop) is stored as a blob."""
        ev = PoolRoundEvent(
            event_id=self._event_id(), round=round, query=query, pool_blob=pool_blob, budget=budget,
            wish_stop=wish_stop, stop_prob=stop_prob, u_stop=u_stop,
            probs_blob=None if probs is None else self.archive.put_json_blob(probs),
            chosen=chosen, p_chosen=p_chosen, u_select=u_select,
        )
        self.record.events.append(ev)
        return ev

    def finish(self, status: RunStatus, reason: str | None = None) -> RunRecord:
        """Seal and write the final record."""
        self.record.status = status
        self.record.status_reason = reason
        self.record.ended_at = utcnow()
        return self.archive.write_record(self.record)



def new_record(**fields: Any) -> RunRecord:
    """A run record in status ``started`` with zeroed counters."""
    return RunRecord(status="started", started_at=utcnow(), counters=Counters(), **fields)
