"""``read --batch``: an evaluator's pending reads as provider batch jobs, ingested like synchronous reads.

Each pending packet becomes one line (custom_id = packet id) whose body is the synchronous call's body
(``build_body`` of the same prompt message). A submitted job is persisted under the evaluator's read
store before it is polled, so a killed call is resumed by the next one, which polls the same jobs and
never submits their lines again. When a job has ended its results are downloaded and each line becomes
a read record exactly as a synchronous reply would (raw result line archived first, then ingest), with
``transport = "batch"``, the batch id and the line id. An errored, expired or canceled line is
``READ_FAILED`` with that reason and its raw result line kept, beside the packet's read: the packet is
still unread, so the next call (batch or not) reads it again; a reply that fails ingest is a read, as in
a synchronous read, never repeated. A line already ingested (results fetched twice) is left as it is.
A job whose every line is ingested is closed; a job that failed validation is closed with its problem
(naming the first bad line) and its lines are submitted again next time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from draligned.archive.store import Archive
from draligned.evaluator.config import Evaluator
from draligned.evaluator.packets import Manifest, Phase
from draligned.evaluator.reading import EVALUATOR_PROTOCOLS, packet_messages, pending_reads, read_record
from draligned.evaluator.storage import BatchClosed, BatchRecord, ReadRecord, ReadStore
from draligned.evaluator.summary import PHASES, POLL_S, ReadSummary
from draligned.models.base import ModelAPI, ModelError, get_model
from draligned.models.batch import BatchAPI, BatchLine, BatchStatus, LineResult, batch_api, chunks, poll
from draligned.records import Record, Usage


class BatchView(Record):
    """One batch job of an evaluator as ``read --batch --status`` shows it."""

    batch_id: str
    """The provider's batch id."""
    submitted_at: str
    """When it was submitted (UTC)."""
    lines: int
    """Reads it holds."""
    closed: bool
    """Every line ingested (or the job failed validation); a closed job is not asked again."""
    status: BatchStatus
    """Its status: live from the provider for an open job, as recorded at closing otherwise."""


def _model(evaluator: Evaluator, model: ModelAPI | None) -> tuple[ModelAPI, BatchAPI]:
    model = model or get_model(evaluator.declaration(), EVALUATOR_PROTOCOLS)
    return model, batch_api(model)  # ModelError for a protocol without a batch API (the simulator)


async def read_archive_batch(archive: Archive, evaluator: Evaluator, phases: Iterable[Phase] = PHASES,
                             model: ModelAPI | None = None, poll_s: float = POLL_S,
                             seen: Callable[[BatchStatus], None] | None = None) -> ReadSummary:
    """Submit every pending read as batch jobs, resume open ones, poll until they end, ingest them."""
    model, api = _model(evaluator, model)
    store, summary, todo = pending_reads(archive, evaluator, phases)
    jobs = store.open_batches()
    summary.batches_resumed = [j.batch_id for j in jobs]
    pending = [BatchLine(p.manifest.packet_id, api.model.build_body(packet_messages(p.prompt), []))
               for p in todo.values()]
    for lines in chunks(pending, api.max_lines, api.max_bytes):
        batch_id = await api.submit(lines)
        job = BatchRecord(batch_id=batch_id, evaluator_id=evaluator.evaluator_id,
                          protocol=model.declaration.protocol, base_url=model.declaration.base_url,
                          custom_ids=[x.custom_id for x in lines],
                          submitted_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
        store.put_batch(job)  # persisted before any polling: a killed call resumes this job
        summary.batches_submitted.append(batch_id)
        jobs.append(job)
    manifests: dict[str, Manifest] = {}
    for m in store.manifests():
        manifests.setdefault(m.packet_id, m)
    for p in todo.values():
        manifests[p.manifest.packet_id] = p.manifest  # the packet a synchronous read would have used
    for job in jobs:
        status = await poll(api, job.batch_id, job.custom_ids, poll_s, seen)
        if status.problem is not None:
            summary.model_errors.append(f"batch {job.batch_id}: {status.problem}")
        else:
            for result in await api.results(job.batch_id, job.custom_ids):
                if not (store.has_read(result.custom_id) or store.has_failed_line(job.batch_id, result.custom_id)):
                    _ingest(api, evaluator, store, manifests[result.custom_id], job, result, summary)
        store.close_batch(BatchClosed(batch_id=job.batch_id, status=status.status, counts=status.counts,
                                      problem=status.problem))
    return summary


def _ingest(api: BatchAPI, evaluator: Evaluator, store: ReadStore, manifest: Manifest, job: BatchRecord,
            result: LineResult, summary: ReadSummary) -> None:
    """One result line as a read (a reply: archived, then ingested as a synchronous reply is), or as a
    kept READ_FAILED line failure when there is no reply (the packet is read again next time)."""
    error = f"batch line {result.outcome}: {result.error}"
    if result.outcome == "succeeded":
        body = api.model.build_body(packet_messages(store.archive.get_text(manifest.packet_id)), [])
        try:
            reply = api.reply(result, body)
        except ModelError as exc:
            error = f"batch line unreadable: {exc}"
        else:
            summary.count(read_record(evaluator, store, manifest, reply, (job.batch_id, result.custom_id)))
            return
    store.put_failed_line(ReadRecord(
        packet_id=manifest.packet_id, evaluator_id=evaluator.evaluator_id, status="READ_FAILED", error=error,
        raw_response_blob=store.archive.put_blob(result.raw), text_blob=store.archive.put_blob(""), usage=Usage(),
        file_sha256=evaluator.file_sha256, transport="batch", batch_id=job.batch_id, line_id=result.custom_id))
    summary.lines_failed.append(f"{manifest.packet_id[:12]}: {error}")


async def batch_views(archive: Archive, evaluator: Evaluator, model: ModelAPI | None = None) -> list[BatchView]:
    """Where each of the evaluator's batch jobs stands (open ones asked live)."""
    store = ReadStore(archive, evaluator.evaluator_id)
    views = []
    jobs = store.batches()
    api = _model(evaluator, model)[1] if any(end is None for _, end in jobs) else None
    for job, end in jobs:
        if end is not None:
            status = BatchStatus(batch_id=job.batch_id, status=end.status, ended=True, counts=end.counts,
                                 problem=end.problem)
        else:
            assert api is not None
            status = await api.retrieve(job.batch_id, job.custom_ids)
        views.append(BatchView(batch_id=job.batch_id, submitted_at=job.submitted_at, lines=len(job.custom_ids),
                               closed=end is not None, status=status))
    return views


async def cancel_batches(archive: Archive, evaluator: Evaluator, model: ModelAPI | None = None) -> list[BatchStatus]:
    """Ask the provider to cancel every open job; the next ``read --batch`` ingests what they hold
    (lines done before the cancel as reads, the rest as READ_FAILED canceled)."""
    jobs = ReadStore(archive, evaluator.evaluator_id).open_batches()
    if not jobs:
        return []
    api = _model(evaluator, model)[1]
    return [await api.cancel(job.batch_id) for job in jobs]
