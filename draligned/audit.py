"""The workflows over an archive that exists: read it with an evaluator and index it, write its report.

A rerun with nothing new answers from the archive's marks (:mod:`draligned.archive.fingerprint`) after one
pass over its files' stats. Everything that does the work (the readers, the models, the index, DuckDB, the
report builder) is imported only on the path that does it, so such a rerun loads none of it. They print
nothing: the CLI calls them and prints their results, and the demo (draligned.demo) chains them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from draligned.analysis.kept import kept_queries, record_inputs
from draligned.archive import Archive
from draligned.archive.fingerprint import (
    INDEX,
    code_fingerprint,
    fingerprint,
    holds,
    index_built_from,
    index_state,
    known_intact,
    remember,
)
from draligned.evaluator.config import Evaluator
from draligned.evaluator.summary import PHASES, POLL_S, ReadSummary
from draligned.guards import check_intact, default_reader, open_archive, report_plan, require_reader
from draligned.hashing import sha256_json

if TYPE_CHECKING:
    from draligned.evaluator.packets import Phase
    from draligned.models.batch import BatchStatus


def read_and_index(archive: Archive, evaluator: Evaluator, phases: tuple[Phase, ...] = PHASES, verify: bool = True,
                   batch: bool = False, poll_s: float = POLL_S,
                   seen: Callable[[BatchStatus], None] | None = None) -> ReadSummary:
    """Check the archive's hashes (unless ``verify`` is False), read it with the evaluator (idempotent,
    resumable), synchronously or (``batch``) as provider batch jobs polled every ``poll_s`` seconds (``seen``
    gets each status), then refresh its index so that the reads' tables are in it (rebuilt when the read wrote
    any file); raises ArchiveError, EvaluatorError or ModelError.

    A synchronous read that left nothing to read is remembered at the archive's fingerprint: while no file
    changes (no new run, no read added or lost, no other evaluator), the next one answers from that mark
    without building a packet; when the marks also say a verify found these files intact and the index was
    built from them, without checking or indexing anything."""
    files = fingerprint(archive)
    key = f"read:{evaluator.evaluator_id}"
    facts = {"evaluator": sha256_json(evaluator.snapshot()), "phases": list(phases)}
    done = None if batch else holds(archive, key, files, **facts)
    if done is not None and (known_intact(archive, files) if verify else index_built_from(archive, files)):
        return ReadSummary.model_validate(done["summary"])
    from draligned.evaluator.batching import read_archive_batch
    from draligned.evaluator.reading import read_archive
    from draligned.indexing import refresh

    check_intact(archive, verify, files=files)
    if done is not None:
        refresh(archive, files)
        return ReadSummary.model_validate(done["summary"])
    runs = fingerprint(archive, "runs")
    reading = (read_archive_batch(archive, evaluator, phases, poll_s=poll_s, seen=seen) if batch
               else read_archive(archive, evaluator, phases))
    summary = asyncio.run(reading)
    files = fingerprint(archive)
    refresh(archive, files)  # rebuilt unless nothing was written (a re-read of other phases)
    settled = not (summary.model_errors or summary.lines_failed or summary.in_batch)
    if not batch and settled and fingerprint(archive, "runs") == runs:  # every run there is was read
        done_now = ReadSummary(packets=summary.packets, blocked=summary.blocked,
                               already_read=summary.packets - summary.blocked)
        remember(archive, key, files, summary=done_now.model_dump(), **facts)
    return summary


@dataclass(frozen=True)
class WrittenReport:
    """Where a report was written, and the queries it ran."""

    html: Path
    """The self-contained report.html."""
    markdown: Path
    """report.md."""
    tables: Path
    """The directory of every table as CSV and Parquet."""
    queries: list[str]
    """Every query the report ran, in order, each once."""
    notes: list[str] = field(default_factory=list)
    """What was chosen for the caller (a default plan or evaluator, a skipped check), to be shown."""


def make_report(archive: str | Path, plan_path: str | Path | None, evaluator: str | None, out: str | Path,
                verify: bool = True) -> WrittenReport:
    """Build the plan's report over the archive for one evaluator's states and write it under ``out``.

    Without a plan, a starter plan over the archive's own studies is used; without an evaluator, the one
    that has read the archive (or none); an evaluator is an id or its TOML file and must have read the
    archive. The archive's hashes are checked first unless ``verify`` is False (the report records it).
    Raises PlanError, EvaluatorError or ArchiveError.
    """
    opened = open_archive(archive)
    files = fingerprint(opened)
    loaded, plan_note = report_plan(opened, plan_path, files)
    evaluator_id = default_reader(opened) if evaluator is None else require_reader(opened, evaluator)
    check_intact(opened, verify, files=files)
    if not (opened.root / INDEX).exists():  # the report reads the index; an archive without one gets it built
        from draligned.indexing import ensure

        ensure(opened)
    out = Path(out)
    inputs = sha256_json({"files": files, "index": index_state(opened, files), "evaluator": evaluator_id,
                          "plan": loaded.plan.model_dump(mode="json"), "verified": verify,
                          "code": code_fingerprint()})
    queries = kept_queries(out, inputs)
    if queries is None:
        # Imported here so that other commands, and a kept report, do not pay for loading matplotlib.
        from draligned.analysis.build import build_report
        from draligned.analysis.render import write_report

        report = build_report(opened.root, loaded, evaluator_id, verified=verify)
        write_report(report, loaded.plan, out)
        queries = list(dict.fromkeys(report.queries))
        record_inputs(out, inputs, queries)
    notes = [plan_note] if plan_note else []
    if evaluator is None:
        notes.append(f"no --evaluator given: using {evaluator_id}")
    if not verify:
        notes.append("--no-verify: the archive's hashes were not checked (the report's manifest says so)")
    return WrittenReport(html=out / "report.html", markdown=out / "report.md", tables=out / "tables",
                         queries=queries, notes=notes)
