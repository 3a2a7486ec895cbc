"""The archive's own index tables: ``runs``, ``events`` and ``artifacts``, from the run records alone."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from draligned.archive.store import Archive
from draligned.archive.tables import ArchiveTables, Rows
from draligned.archive.verify import verify_records
from draligned.records import EventColumns, ModelCallEvent, RunRecord

SCHEMA = """
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY, attempt INTEGER, slot_id TEXT, study TEXT, card_id TEXT,
  card_sha256 TEXT, arm TEXT, model TEXT, protocol TEXT, requested_model TEXT, harness TEXT,
  seed INTEGER, status TEXT, status_reason TEXT, model_calls INTEGER, tool_calls INTEGER,
  drafts INTEGER, input_tokens BIGINT, output_tokens BIGINT, reasoning_tokens BIGINT,
  cached_tokens BIGINT, final_blob TEXT, started_at TEXT, ended_at TEXT, record_sha256 TEXT,
  cache_hits INTEGER, failed_attempts INTEGER, cost_usd DOUBLE
);
CREATE TABLE events (
  run_id TEXT, seq INTEGER, event_id TEXT, type TEXT, role TEXT, tool TEXT, request_text TEXT,
  blob TEXT, chars INTEGER, version INTEGER, error TEXT, code TEXT, model_echo TEXT,
  finish_reason TEXT, input_tokens BIGINT, output_tokens BIGINT, reasoning_tokens BIGINT,
  latency_s DOUBLE
);
CREATE TABLE artifacts (sha256 TEXT, kind TEXT, run_id TEXT, bytes BIGINT);
CREATE TABLE gateway_calls (
  run_id TEXT, event_id TEXT, model TEXT, gateway TEXT, model_echo TEXT, served_model TEXT,
  upstream_provider TEXT, gateway_retries INTEGER, gateway_cost_usd DOUBLE
);
"""

EVENT_COLUMNS = tuple(EventColumns.__annotations__)
"""The event-specific columns of ``events``, after run_id, seq, event_id and type."""


def run_row(r: RunRecord) -> tuple[Any, ...]:
    """The ``runs`` row of a record."""
    u = r.counters.usage
    return (
        r.run_id, r.attempt, r.slot_id, r.slot.study, r.slot.card_id, r.slot.card_sha256, r.slot.arm,
        r.slot.model, r.protocol, r.requested_model, r.slot.harness, r.slot.seed, r.status,
        r.status_reason, r.counters.model_calls, r.counters.tool_calls, r.counters.drafts,
        u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cached_tokens, r.final_blob,
        r.started_at, r.ended_at, r.record_sha256, r.counters.cache_hits, r.counters.failed_attempts,
        r.counters.cost_usd,
    )


def event_rows(r: RunRecord) -> list[tuple[Any, ...]]:
    """The ``events`` rows of a record, in event order (each event gives its own columns)."""
    rows = []
    for seq, ev in enumerate(r.events):
        cols = ev.index_columns()
        rows.append((r.run_id, seq, ev.event_id, ev.type, *(cols.get(c) for c in EVENT_COLUMNS)))
    return rows


def gateway_rows(r: RunRecord) -> list[tuple[Any, ...]]:
    """One ``gateway_calls`` row per model call on which a gateway reported itself."""
    return [(r.run_id, ev.event_id, r.slot.model, g.gateway, ev.model_echo, g.served_model, g.upstream_provider,
             g.retries, g.cost_usd)
            for ev in r.events if isinstance(ev, ModelCallEvent) and (g := ev.gateway) is not None]


def run_tables(archive: Archive, batches: Iterable[Sequence[RunRecord]]) -> Iterator[Rows]:
    """``runs``, ``events``, ``artifacts`` (each blob a record references, with its size if present) and
    ``gateway_calls``, a batch of records at a time (each blob's size taken once per batch: runs share
    prompts and tool texts, the demo's 8,000 artifacts name 3,550 blobs)."""
    for records in batches:
        arts = sorted({(sha, kind, r.run_id) for r in records for sha, kind in r.blob_refs()})
        sizes = {sha: _size(archive, sha) for sha in {sha for sha, _, _ in arts}}
        yield {
            "runs": [run_row(r) for r in records],
            "events": [row for r in records for row in event_rows(r)],
            "artifacts": [(sha, kind, run, sizes[sha]) for sha, kind, run in arts],
            "gateway_calls": [row for r in records for row in gateway_rows(r)],
        }


def _size(archive: Archive, sha: str) -> int | None:
    try:
        return os.stat(os.path.join(archive.root, "blobs", sha[:2], sha)).st_size
    except OSError:  # missing (verify names it)
        return None


RUN_TABLES = ArchiveTables(name="runs", ddl=SCHEMA, rows=run_tables, verify=verify_records)
"""Run records and blobs: the archive's own files and tables."""
