"""The DuckDB index: a derived, rebuildable view of the run records for queries.

It is never the source of truth. ``rebuild_index`` writes a fresh database from the
files in a deterministic order, so rebuilding twice gives identical table contents.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import duckdb

from draligned.archive.store import Archive, ArchiveError
from draligned.cess.archive_runs import CESS_RUNS_DDL, cess_rows, pool_runs
from draligned.records import (
    DraftEvent, FinalEvent, ModelAttemptEvent, ModelCallEvent, NoticeEvent, PoolRoundEvent, RunRecord,
    SnapshotEvent, ToolCallEvent,
)

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
"""


def _run_row(r: RunRecord) -> tuple:
    u = r.counters.usage
    return (
        r.run_id, r.attempt, r.slot_id, r.slot.study, r.slot.card_id, r.slot.card_sha256, r.slot.arm,
        r.slot.model, r.protocol, r.requested_model, r.slot.harness, r.slot.seed, r.status,
        r.status_reason, r.counters.model_calls, r.counters.tool_calls, r.counters.drafts,
        u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cached_tokens, r.final_blob,
        r.started_at, r.ended_at, r.record_sha256, r.counters.cache_hits, r.counters.failed_attempts,
        r.counters.cost_usd,
    )


def _event_rows(r: RunRecord) -> list[tuple]:
    rows = []
    for seq, ev in enumerate(r.events):
        row = dict(tool=None, request_text=None, blob=None, chars=None, version=None, error=None,
                   code=None, model_echo=None, finish_reason=None, input_tokens=None,
                   output_tokens=None, reasoning_tokens=None, latency_s=None, role=None)
        if isinstance(ev, ModelCallEvent):
            row.update(role=ev.role, blob=ev.response_blob, model_echo=ev.model_echo,
                       finish_reason=ev.finish_reason, input_tokens=ev.usage.input_tokens,
                       output_tokens=ev.usage.output_tokens,
                       reasoning_tokens=ev.usage.reasoning_tokens, latency_s=ev.latency_s)
        elif isinstance(ev, ToolCallEvent):
            row.update(role=ev.role, tool=ev.tool, request_text=ev.request_text,
                       blob=ev.return_blob, chars=ev.return_chars, error=ev.error)
        elif isinstance(ev, DraftEvent):
            row.update(blob=ev.blob, chars=ev.chars, version=ev.version)
        elif isinstance(ev, FinalEvent):
            row.update(blob=ev.blob, chars=ev.chars, code=ev.delivered_by)
        elif isinstance(ev, NoticeEvent):
            row.update(code=ev.code)
        elif isinstance(ev, ModelAttemptEvent):
            row.update(role=ev.role, code=ev.attempt.error, error=ev.attempt.detail)
        elif isinstance(ev, SnapshotEvent):
            row.update(role=ev.role, blob=ev.manifest_blob)
        elif isinstance(ev, PoolRoundEvent):
            row.update(request_text=ev.query, blob=ev.probs_blob)
        rows.append((r.run_id, seq, ev.event_id, ev.type, row["role"], row["tool"],
                     row["request_text"], row["blob"], row["chars"], row["version"], row["error"],
                     row["code"], row["model_echo"], row["finish_reason"], row["input_tokens"],
                     row["output_tokens"], row["reasoning_tokens"], row["latency_s"]))
    return rows


def bulk_insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    """Insert many rows at once through a newline-delimited JSON file (executemany is slow)."""
    if not rows:
        return
    cols = con.execute(f"SELECT column_name, data_type FROM information_schema.columns "
                       f"WHERE table_name = '{table}' ORDER BY ordinal_position").fetchall()
    with tempfile.TemporaryDirectory(prefix="draligned-index-") as scratch:
        path = Path(scratch) / f"{table}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(dict(zip((c for c, _ in cols), row)), ensure_ascii=False) + "\n")
        spec = "{" + ", ".join(f"'{c}': '{t}'" for c, t in cols) + "}"
        con.execute(f"INSERT INTO {table} SELECT * FROM read_json(?, format='newline_delimited', "
                    f"columns={spec})", [str(path)])


def require_archive(archive: Archive) -> None:
    """ArchiveError unless the archive root is a directory (a mistyped path is not an empty archive)."""
    if not archive.root.is_dir():
        raise ArchiveError(f"{archive.root}: no archive here (not a directory)")


def rebuild_index(archive: Archive) -> Path:
    """Rebuild ``index.duckdb`` from the run records (started markers included), blobs and reads."""
    require_archive(archive)
    target = archive.root / "index.duckdb"
    tmp = archive.root / ".index.duckdb.tmp"
    for stale in (tmp, Path(str(tmp) + ".wal")):
        stale.unlink(missing_ok=True)
    records = {r.run_id: r for r in archive.started()}
    records.update({r.run_id: r for r in archive.records()})
    ordered = [records[k] for k in sorted(records)]
    arts = sorted({(sha, kind, r.run_id) for r in ordered for sha, kind in r.blob_refs()})
    con = duckdb.connect(str(tmp))
    try:
        con.execute(SCHEMA)
        con.execute(CESS_RUNS_DDL)
        bulk_insert(con, "runs", [_run_row(r) for r in ordered])
        bulk_insert(con, "events", [row for r in ordered for row in _event_rows(r)])
        bulk_insert(con, "artifacts", [(sha, kind, run, _size(archive, sha)) for sha, kind, run in arts])
        # Per-run CESS pool estimates, derived from the pool events and blobs (see cess.archive_runs).
        bulk_insert(con, "cess_runs", [tuple(row.model_dump().values())
                                       for row in cess_rows(pool_runs(archive, ordered))])
        from draligned.evaluator.index import add_evaluator_tables  # evaluator depends on archive

        add_evaluator_tables(con, archive)
    finally:
        con.close()
    os.replace(tmp, target)
    return target


def _size(archive: Archive, sha: str) -> int | None:
    path = archive.blob_path(sha)
    return path.stat().st_size if path.exists() else None


def connect(archive: Archive, rebuild_if_missing: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the index read-only, rebuilding it first if it does not exist."""
    require_archive(archive)
    path = archive.root / "index.duckdb"
    if not path.exists() and rebuild_if_missing:
        rebuild_index(archive)
    return duckdb.connect(str(path), read_only=True)
