"""What ``draligned archive stats`` and ``archive ls`` show: totals and run listings queried from the
composed index, as typed results the CLI only prints."""

from __future__ import annotations

import duckdb

from draligned.archive import Archive
from draligned.indexing import connect, rebuild
from draligned.records import Record
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


class ArchiveStats(Totals):
    """Totals of the whole archive, its blob count, and the totals per model declaration."""

    blobs: int
    """Blobs stored."""
    by_model: dict[str, Totals]
    """Totals per model declaration name, in name order."""
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
    except duckdb.BinderException:  # an index built by an older version: rebuild it from the files
        rebuild(archive)
        return archive_stats(archive)
    assert total is not None  # an aggregate without GROUP BY returns one row
    return ArchiveStats(**_totals(total).model_dump(), blobs=len(archive.blob_shas()),
                        by_model={r[0]: _totals(r[1:]) for r in per_model}, acquisition=acquisition_stats(archive))


def _totals(values: tuple) -> Totals:
    keys = ("runs", "completed_runs", *TOTALS, "cost_usd")
    return Totals.model_validate({k: (None if v is None else round(float(v), 6)) if k == "cost_usd" else int(v)
                                  for k, v in zip(keys, values, strict=True)})


class RunListing(Record):
    """One run attempt as ``archive ls`` lists it."""

    run_id: str
    """Opaque run id."""
    attempt: int
    """Attempt number at its slot."""
    card_id: str
    """Factor card id."""
    arm: str
    """Arm or cell."""
    model: str
    """Model declaration name."""
    harness: str
    """Harness id."""
    seed: int
    """Replicate seed."""
    status: str
    """started, completed, failed or budget_exhausted."""
    model_calls: int
    """Model calls made."""
    tool_calls: int
    """Tool calls executed."""
    drafts: int
    """Draft versions saved."""
    has_final: bool
    """Whether the run delivered a final."""


def list_runs(archive: Archive) -> list[RunListing]:
    """Every run attempt of the archive, by card, seed, model, harness, arm and attempt."""
    with connect(archive) as con:
        rows = con.execute("""SELECT run_id, attempt, card_id, arm, model, harness, seed, status,
                                     model_calls, tool_calls, drafts, final_blob IS NOT NULL
                              FROM runs ORDER BY card_id, seed, model, harness, arm, attempt""").fetchall()
    names = list(RunListing.model_fields)
    return [RunListing(**dict(zip(names, r, strict=True))) for r in rows]
