"""Re-reading an archive: build packets from verified blobs, read each once, archive, ingest.

Idempotent and resumable: a packet that already has a read record for this evaluator is never
sent again (a failed read included: no choosing between attempts, Table 15). A raw response is
stored as a blob before it is parsed. Model errors (no response at all) leave the packet unread,
so the next invocation tries it again. A template or schema file whose name another evaluator of
the archive already used with other content is refused: a change of template is a new version.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from draligned.archive.store import Archive, ArchiveError
from draligned.cards import Card
from draligned.evaluator.config import Evaluator, EvaluatorError
from draligned.evaluator.ingest import ingest
from draligned.evaluator.packets import (
    Manifest,
    Packet,
    Phase,
    build_packets,
    document_units,
    forbidden_strings,
    request_units,
)
from draligned.evaluator.storage import ReadRecord, ReadStore
from draligned.evaluator.summary import PHASES, ReadSummary
from draligned.models.base import PROTOCOLS, ModelAPI, get_model
from draligned.records import Message, ModelReply, RunRecord

EVALUATOR_PROTOCOLS: dict[str, str] = {**PROTOCOLS, "sim-evaluator": "draligned.evaluator.sim:SimEvaluator"}
"""Protocols an evaluator file may declare: the agent models' and the evaluator's offline simulator
(registered here, where the evaluator lives, so a study cannot declare it; imported only when used)."""


def pair_key(record: RunRecord) -> tuple:
    """Runs that differ only by arm share this key (same study, card, model, harness, pool-search
    cell and seed; the seed is last). Pool runs of different search cells are never paired."""
    s = record.slot
    c = s.search_condition
    cell = f"{c.selection}/{c.stopping}/{c.ranking}" if c is not None else ""
    return (s.study, s.card_id, s.model, s.harness, cell, s.seed)


def load_card(archive: Archive, record: RunRecord) -> Card:
    """The run's card from the archived card file (hash-verified)."""
    return Card.model_validate_json(archive.get_text(record.slot.card_sha256))


def _verified(record: RunRecord) -> RunRecord:
    if record.sealed().record_sha256 != record.record_sha256:
        raise ArchiveError(f"run {record.run_id}: record_sha256 does not match its contents")
    return record


def collect_packets(archive: Archive, evaluator: Evaluator, phases: Iterable[Phase] = PHASES) -> list[Packet]:
    """Every packet of the archive's finished runs for the given phases, built from verified blobs."""
    phases = set(phases)
    records = [_verified(r) for r in archive.records()]
    groups: dict[tuple, list[str]] = defaultdict(list)
    for r in records:
        groups[pair_key(r)].append(r.run_id)
    packets: list[Packet] = []
    for record in records:
        card = load_card(archive, record)
        units = request_units(record, len(card.factors)) if "requests" in phases else []
        units += [u for u in document_units(record, archive.get_text) if u.phase in phases]
        paired = [rid for rid in groups[pair_key(record)] if rid != record.run_id]
        forbidden = forbidden_strings(record, card, archive.get_text(record.user_message_blob), paired)
        packets += build_packets(evaluator, card, record, units, forbidden)
    return packets


def packet_messages(packet_prompt: str) -> list[Message]:
    """What an evaluator model is sent for a packet: its prompt as the one user message."""
    return [Message(role="user", content=packet_prompt)]


def read_record(evaluator: Evaluator, store: ReadStore, manifest: Manifest, reply: ModelReply,
                batch: tuple[str, str] | None = None) -> ReadRecord:
    """Archive a reply's raw response (before anything is parsed), ingest its text and store the read;
    ``batch`` is (batch id, line id) for a line of a batch job, None for a synchronous read."""
    raw_blob = store.archive.put_blob(reply.raw_response)  # archived before anything is parsed
    text_blob = store.archive.put_blob(reply.text or "")
    outcome = ingest(reply.text, manifest, evaluator.schemas[manifest.kind], reply.finish_reason)
    record = ReadRecord(
        packet_id=manifest.packet_id, evaluator_id=evaluator.evaluator_id,
        status="OK" if outcome.ok else "READ_FAILED", error=outcome.error,
        raw_response_blob=raw_blob, text_blob=text_blob, model_echo=reply.model_echo,
        finish_reason=reply.finish_reason, usage=reply.usage, file_sha256=evaluator.file_sha256,
        items=outcome.items, labels=outcome.labels, gateway=reply.gateway,
        headers_blob=None if reply.response_headers is None else store.archive.put_json_blob(reply.response_headers),
        transport="batch" if batch else "sync", batch_id=batch[0] if batch else None,
        line_id=batch[1] if batch else None)
    store.put_read(record)
    return record


async def _read_one(model: ModelAPI, evaluator: Evaluator, store: ReadStore, packet: Packet) -> ReadRecord:
    m = packet.manifest
    reply = await model.generate(packet_messages(packet.prompt), [], seed_of(m.packet_id))
    return read_record(evaluator, store, m, reply)


def seed_of(packet_id: str) -> int:
    """The replicate seed of a packet's read (not sent; keys the replay cache)."""
    return int(packet_id[:8], 16)


def template_conflicts(archive: Archive, evaluator: Evaluator) -> list[str]:
    """Template or schema files this evaluator uses under a name another evaluator of the archive
    used with different content: a template is versioned by its file name, never edited once used."""
    mine = _files_by_name(evaluator.snapshot())
    found = []
    for eid in ReadStore.evaluator_ids(archive):
        path = archive.root / "reads" / eid / "evaluator.json"
        if eid == evaluator.evaluator_id or not path.exists():
            continue
        for name, sha in _files_by_name(json.loads(path.read_text())).items():
            if name in mine and mine[name] != sha:
                found.append(f"{name} differs from the file of that name evaluator {eid!r} used "
                             f"(sha256 {sha[:12]} vs {mine[name][:12]})")
    return found


def _files_by_name(snapshot: dict) -> dict[str, str]:
    """Template and schema file name -> sha256 of an evaluator's recorded snapshot."""
    spec, hashes = snapshot["evaluator"], snapshot["file_sha256"]
    return {Path(path).name: hashes[f"{prefix}:{kind}"]
            for group, prefix in (("prompts", "prompt"), ("schemas", "schema"))
            for kind, path in spec.get(group, {}).items() if f"{prefix}:{kind}" in hashes}


def pending_reads(archive: Archive, evaluator: Evaluator,
                  phases: Iterable[Phase] = PHASES) -> tuple[ReadStore, ReadSummary, dict[str, Packet]]:
    """Build and store every packet; return the store, the summary so far and the packets still to read
    (by packet id: identical prompts are read once; none of a batch job that is still open)."""
    packets = collect_packets(archive, evaluator, phases)  # verifies every blob before anything is written
    if conflicts := template_conflicts(archive, evaluator):
        raise EvaluatorError("a prompt template or schema already used in this archive was edited; give "
                             "the changed file a new version name: " + "; ".join(conflicts))
    store = ReadStore(archive, evaluator.evaluator_id)
    store.write_snapshot(evaluator.snapshot())
    summary = ReadSummary(packets=len(packets))
    in_flight = {cid for batch in store.open_batches() for cid in batch.custom_ids}
    todo: dict[str, Packet] = {}
    for p in packets:
        store.put_packet(p.manifest, p.prompt)
        if p.manifest.blocked:
            summary.blocked += 1
        elif store.has_read(p.manifest.packet_id):
            summary.already_read += 1
        elif p.manifest.packet_id in in_flight:
            summary.in_batch += 1
        else:
            todo.setdefault(p.manifest.packet_id, p)  # identical prompts are read once
    return store, summary, todo


async def read_archive(archive: Archive, evaluator: Evaluator, phases: Iterable[Phase] = PHASES,
                       model: ModelAPI | None = None) -> ReadSummary:
    """Build, store and read every packet not yet read by this evaluator, concurrently.

    The packets, reads and their blobs are written under the archive's group commit (many files per sync
    on a writer thread, each read linked after the blobs it names; a read is counted once it is durable,
    and all are on return): an fsync per file cost a read of the demo's archive about 3,000 syncs. A
    refused write (a file already there with other bytes) raises ArchiveError: for a packet before any
    model call, for a read at once, with nothing written after it."""
    with archive.group_commit():
        return await _read_pending(archive, evaluator, phases, model)


async def _read_pending(archive: Archive, evaluator: Evaluator, phases: Iterable[Phase],
                        model: ModelAPI | None) -> ReadSummary:
    store, summary, todo = pending_reads(archive, evaluator, phases)
    if not todo:
        return summary
    await archive.durable()  # the packets and their blobs: a refused one raises here, before any model call
    model = model or get_model(evaluator.declaration(), EVALUATOR_PROTOCOLS)
    sem = asyncio.Semaphore(evaluator.spec.concurrency)

    async def guarded(p: Packet) -> None:
        async with sem:
            try:
                rec = await _read_one(model, evaluator, store, p)
            except Exception as exc:  # noqa: BLE001 - no response: leave unread, report
                summary.model_errors.append(f"{p.manifest.packet_id[:12]}: {type(exc).__name__}: {exc}")
                return
        await archive.durable()  # counted once on disk; a refused write stops the read (ArchiveError)
        summary.count(rec)

    await asyncio.gather(*(guarded(p) for p in todo.values()))
    return summary
