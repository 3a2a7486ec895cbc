"""What ``draligned archive stats``, ``archive ls`` and ``archive text`` show: totals and run listings
queried from the composed index, as typed results the CLI only prints, and a run's texts from its blobs."""

from __future__ import annotations

import duckdb
from pydantic import Field

from draligned.analysis.adapters import QueryLog, load_runs
from draligned.analysis.rows import RunRow
from draligned.archive import Archive, ArchiveError
from draligned.indexing import connect, rebuild
from draligned.records import (
    DelegateEvent,
    DraftEvent,
    FinalEvent,
    ModelCallEvent,
    Record,
    RunEvent,
    SnapshotEvent,
    ToolCallEvent,
)
from draligned.tools.web.export import AcquisitionStats, acquisition_stats

TOTALS = ("model_calls", "tool_calls", "input_tokens", "output_tokens", "reasoning_tokens",
          "cached_tokens", "cache_hits", "failed_attempts")
"""The run counters summed over runs, in the order they are shown."""


class Totals(Record):
    """Sums over a set of run attempts (interrupted ones included)."""

    runs: int
    """Run attempts."""
    completed_runs: int
    """Attempts that ended ``completed``."""
    model_calls: int
    """Model calls made."""
    tool_calls: int
    """Tool calls executed (errors included)."""
    input_tokens: int
    """Prompt tokens reported by the providers."""
    output_tokens: int
    """Completion tokens reported by the providers."""
    reasoning_tokens: int
    """Reasoning tokens reported by the providers."""
    cached_tokens: int
    """Prompt tokens served from the providers' caches."""
    cache_hits: int
    """Model calls replayed from the exact-input cache."""
    failed_attempts: int
    """Model call attempts that failed (retried or ending a run)."""
    cost_usd: float | None
    """Summed cost of priced calls; None unless some model is priced."""


class GatewayTotals(Record):
    """What gateways reported for one model declaration's calls."""

    gateway: str
    """The gateway(s) whose headers were read, comma-separated."""
    calls: int
    """Model calls on which the gateway reported itself."""
    echoes: list[str]
    """Model ids echoed in the reply bodies (e.g. the gateway alias)."""
    served_models: list[str]
    """Upstream models the gateway named as serving the calls."""
    upstream_providers: list[str]
    """Upstream providers (and API bases) the gateway routed to."""
    gateway_retries: int
    """Retries the gateway made itself (not draligned's recorded attempts)."""
    gateway_cost_usd: float | None
    """Summed cost the gateway reported; None when it reported none."""


class ArchiveStats(Totals):
    """Totals of the whole archive, its blob count, and the totals per model declaration."""

    blobs: int
    """Blobs stored."""
    by_model: dict[str, Totals]
    """Totals per model declaration name, in name order."""
    gateways: dict[str, GatewayTotals] = Field(default_factory=dict)
    """Per model declaration name whose calls went through a gateway: what the gateway reported."""
    acquisition: AcquisitionStats
    """Web searches and reads: live fetches vs store hits, failures by reason, bytes (zeros without web)."""


def archive_stats(archive: Archive) -> ArchiveStats:
    """Archive totals from the index, overall and per model (an index from an older version is rebuilt)."""
    sums = ", ".join(f"coalesce(sum({k}), 0)" for k in TOTALS)
    query = f"""SELECT {{group}} count(*), count(*) FILTER (status = 'completed'), {sums}, sum(cost_usd)
                FROM runs {{by}}"""
    try:
        with connect(archive) as con:
            total = con.execute(query.format(group="", by="")).fetchone()
            per_model = con.execute(query.format(group="model,", by="GROUP BY model ORDER BY model")).fetchall()
            gateways = con.execute("""SELECT model, string_agg(DISTINCT gateway, ','), count(*),
                list_sort(list_distinct(list(model_echo))), list_sort(list_distinct(list(served_model))),
                list_sort(list_distinct(list(upstream_provider))), coalesce(sum(gateway_retries), 0),
                sum(gateway_cost_usd) FROM gateway_calls GROUP BY model ORDER BY model""").fetchall()
    except (duckdb.BinderException, duckdb.CatalogException):  # an older version's index: rebuild it
        rebuild(archive)
        return archive_stats(archive)
    assert total is not None  # an aggregate without GROUP BY returns one row
    names = list(GatewayTotals.model_fields)
    return ArchiveStats(**_totals(total).model_dump(), blobs=len(archive.blob_shas()),
                        by_model={r[0]: _totals(r[1:]) for r in per_model},
                        gateways={r[0]: GatewayTotals(**dict(zip(names, _gateway_values(r[1:]), strict=True)))
                                  for r in gateways},
                        acquisition=acquisition_stats(archive))


def _gateway_values(values: tuple) -> tuple:
    *head, cost = values
    return (*head, None if cost is None else round(float(cost), 8))


def _totals(values: tuple) -> Totals:
    keys = ("runs", "completed_runs", *TOTALS, "cost_usd")
    return Totals.model_validate({k: (None if v is None else round(float(v), 6)) if k == "cost_usd" else int(v)
                                  for k, v in zip(keys, values, strict=True)})


LISTED = ("run_id", "attempt", "card_id", "arm", "model", "harness", "seed", "status", "model_calls",
          "tool_calls", "drafts", "has_final")
"""The fields of a run that ``archive ls`` shows, in its column order."""


def list_runs(archive: Archive) -> list[RunRow]:
    """Every run attempt of the archive (the report's run rows), by card, seed, model, harness, arm, attempt."""
    with connect(archive) as con:
        runs = load_runs(con, QueryLog())
    return sorted(runs, key=lambda r: (r.card_id, r.seed, r.model, r.harness, r.arm, r.attempt))


def run_text(archive: Archive, run_id: str, *, draft: int | None = None, requests: bool = False,
             event: str | None = None) -> str:
    """The texts of one run (``archive text``): the final (default), one draft version, the requests in
    order, or one event's texts (a tool call's arguments and return, a model call's raw response, a
    draft, the final, a snapshot manifest, a delegation's assignments and replies). ArchiveError names
    the run and what is missing."""
    record = archive.find_run(run_id)
    if requests:
        return "\n".join(f"{e.event_id} {e.tool}: {e.request_text}" for e in record.events
                         if isinstance(e, ToolCallEvent) and e.request_text is not None)
    if draft is not None:
        found = [e for e in record.events if isinstance(e, DraftEvent) and e.version == draft]
        if not found:
            raise ArchiveError(f"run {run_id}: no draft version {draft} (it saved {record.counters.drafts})")
        return archive.get_text(found[0].blob)
    if event is None:
        if record.final_blob is None:
            raise ArchiveError(f"run {run_id}: no final (status {record.status})")
        return archive.get_text(record.final_blob)
    match = [e for e in record.events if e.event_id == event]
    if not match:
        raise ArchiveError(f"run {run_id}: no event {event!r} (events e0001..{record.events[-1].event_id})"
                           if record.events else f"run {run_id}: no events")
    return _event_text(archive, match[0])


def _event_text(archive: Archive, e: RunEvent) -> str:
    """The texts behind one event, each under a heading."""
    sections: list[tuple[str, str]]
    if isinstance(e, ToolCallEvent):
        sections = [(f"arguments ({e.tool})", archive.get_text(e.arguments_blob)),
                    ("return the agent saw", archive.get_text(e.return_blob))]
    elif isinstance(e, ModelCallEvent):
        sections = [("request body", archive.get_text(e.request_blob)),
                    ("raw response", archive.get_text(e.response_blob))]
    elif isinstance(e, (DraftEvent, FinalEvent)):
        return archive.get_text(e.blob)
    elif isinstance(e, SnapshotEvent):
        return archive.get_text(e.manifest_blob)
    elif isinstance(e, DelegateEvent):
        sections = []
        for w in e.workers:
            sections.append((f"{w.worker} assignment", archive.get_text(w.assignment_blob)))
            if w.reply_blob:
                sections.append((f"{w.worker} reply", archive.get_text(w.reply_blob)))
    else:
        return e.model_dump_json(indent=1)
    return "\n\n".join(f"--- {title} ---\n{text}" for title, text in sections)
