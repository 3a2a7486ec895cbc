"""Where an evaluator's packets and reads live: ``ARCHIVE/reads/<evaluator_id>/``, write-once.

Layout::

    reads/<evaluator_id>/evaluator.json          snapshot: evaluator file + template/schema sha256
    reads/<evaluator_id>/packets/<run_id>/<document>.c<chunk>.r<read>.json
                                                 manifest (program side; packet id, orientation, phase)
    reads/<evaluator_id>/reads/<packet_id>.json    read record: raw response blob, ingest outcome
    reads/<evaluator_id>/batches/<batch_id>.json   a submitted batch job (written before it is polled)
    reads/<evaluator_id>/batches/<batch_id>.closed.json   written once every line of it was ingested
    reads/<evaluator_id>/batch_failed/<batch_id>/<packet_id>.json
                                                 READ_FAILED record of a line that errored, expired or
                                                 was canceled (no reply): kept, and the packet is read again

A packet is identified by its prompt (``packet_id``); runs whose units render the same prompt
(identical requests or documents) share that packet's read, which is read once.

Prompts and raw responses are blobs of the archive. Nothing here touches run records or another
evaluator's directory, so a second evaluator can re-read an archive without changing the first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from draligned.archive.store import Archive, ArchiveError, json_file_bytes, write_once
from draligned.archive.verify import blob_referencing_problems, read_file
from draligned.evaluator.ingest import ExtractedItem, RequestLabel
from draligned.evaluator.packets import Manifest
from draligned.records import GatewayInfo, Record, Usage, later


class ReadRecord(Record):
    """One read of one packet, written once after its raw response was archived."""

    packet_id: str
    """The packet read."""
    evaluator_id: str
    """Who read it."""
    status: Literal["OK", "READ_FAILED"]
    """READ_FAILED: the response did not pass ingest; the read stays missing, never repaired."""
    error: str | None = None
    """Why ingest failed."""
    raw_response_blob: str
    """Blob of the provider's raw response body, stored before parsing."""
    text_blob: str
    """Blob of the reply text that was ingested."""
    model_echo: str | None = None
    """Model id the server echoed."""
    finish_reason: str | None = None
    """Normalised finish reason of the reply."""
    usage: Usage
    """Token usage of the read."""
    file_sha256: dict[str, str]
    """sha256 of the template and schema files of the evaluator that read it."""
    items: list[ExtractedItem] = []
    """Document reads: ingested items (sides restored to P/Q)."""
    labels: list[RequestLabel] = []
    """Request reads: ingested labels (sides restored to P/Q)."""
    headers_blob: str | None = later()
    """Blob of the canonical JSON of the reply's HTTP response headers (secrets removed); None for the simulator."""
    gateway: GatewayInfo | None = later()
    """What a gateway in front of the provider reported (served model, provider, retries, cost)."""
    transport: Literal["sync", "batch"] = "sync"
    """How the request was sent: one synchronous call, or a line of a provider batch job. The body is the
    same either way; a sync read's file leaves the transport fields out (files read before batches parse)."""
    batch_id: str | None = None
    """Batch reads: the provider's batch job id."""
    line_id: str | None = None
    """Batch reads: the line's custom_id in that job (the packet id)."""


TRANSPORT_FIELDS = frozenset({"transport", "batch_id", "line_id"})


class BatchRecord(Record, frozen=True):
    """A batch job submitted for an evaluator's pending reads, persisted before polling starts, so a killed
    ``read --batch`` resumes polling this job and never submits its lines again."""

    batch_id: str
    """The provider's batch id."""
    evaluator_id: str
    """Whose reads these are."""
    protocol: str
    """The model protocol (openai-chat, openai-responses, anthropic)."""
    base_url: str | None
    """Where the job was submitted (None: the provider default)."""
    custom_ids: list[str]
    """The line ids in file order: the packet ids read by this job."""
    submitted_at: str
    """UTC time of submission (ISO 8601)."""


class BatchClosed(Record, frozen=True):
    """The end of a batch job: every line ingested (or none, when the job failed validation)."""

    batch_id: str
    """The provider's batch id."""
    status: str
    """The provider's final status word."""
    counts: dict[str, int]
    """The provider's final request counts."""
    problem: str | None = None
    """Why the whole job failed (its lines were not read and are submitted again by the next call)."""


def _safe(batch_id: str) -> str:
    """A provider's batch id as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", batch_id)


def _dump(model: BaseModel | dict[str, Any]) -> bytes:
    """A file's bytes (every packet and read is written through here), as the archive writes its own."""
    return json_file_bytes(model.model_dump(mode="json") if isinstance(model, BaseModel) else model)


class ReadStore:
    """The files of one evaluator under an archive."""

    def __init__(self, archive: Archive, evaluator_id: str) -> None:
        self.archive = archive
        self.evaluator_id = evaluator_id
        self.root = archive.root / "reads" / evaluator_id

    @staticmethod
    def evaluator_ids(archive: Archive) -> list[str]:
        """Ids of every evaluator that has read this archive."""
        base = archive.root / "reads"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.exists() else []

    def exists(self) -> bool:
        return (self.root / "evaluator.json").exists()

    def write_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Record the evaluator; the same id with another configuration is refused."""
        try:
            write_once(self.root / "evaluator.json", _dump(snapshot))
        except ArchiveError as exc:
            raise ArchiveError(f"evaluator id {self.evaluator_id!r} already read this archive with a "
                               f"different configuration; use a new evaluator id ({exc})") from None

    def packet_path(self, manifest: Manifest) -> Path:
        """Where a packet's manifest is stored."""
        name = f"{manifest.document.replace(':', '-')}.c{manifest.chunk}.r{manifest.read}.json"
        return self.root / "packets" / manifest.run_id / name

    def put_packet(self, manifest: Manifest, prompt: str) -> None:
        """Store the prompt blob and the manifest (idempotent)."""
        self.archive.put_blob(prompt)
        self.archive.put_file(self.packet_path(manifest), _dump(manifest))

    def has_read(self, packet_id: str) -> bool:
        return (self.root / "reads" / f"{packet_id}.json").exists()

    def _failed_path(self, batch_id: str, packet_id: str) -> Path:
        return self.root / "batch_failed" / _safe(batch_id) / f"{packet_id}.json"

    def has_failed_line(self, batch_id: str, packet_id: str) -> bool:
        return self._failed_path(batch_id, packet_id).exists()

    def put_failed_line(self, record: ReadRecord) -> None:
        """A batch line without a reply: READ_FAILED with its reason and raw result, kept beside (never
        instead of) the packet's read, which a later call still makes."""
        assert record.batch_id is not None and record.status == "READ_FAILED"
        write_once(self._failed_path(record.batch_id, record.packet_id), _dump(record))

    def put_read(self, record: ReadRecord) -> None:
        drop = TRANSPORT_FIELDS if record.transport == "sync" else frozenset()
        self.archive.put_file(self.root / "reads" / f"{record.packet_id}.json",
                              _dump(record.model_dump(mode="json", exclude=set(drop))))

    def _batch_path(self, batch_id: str, suffix: str = "") -> Path:
        return self.root / "batches" / f"{_safe(batch_id)}{suffix}.json"

    def put_batch(self, record: BatchRecord) -> None:
        write_once(self._batch_path(record.batch_id), _dump(record))

    def close_batch(self, closed: BatchClosed) -> None:
        write_once(self._batch_path(closed.batch_id, ".closed"), _dump(closed))

    def batches(self) -> list[tuple[BatchRecord, BatchClosed | None]]:
        """Every batch job of this evaluator, in submission order, with its end when it has one."""
        out = []
        for path in (self.root / "batches").glob("*.json"):
            if not path.name.endswith(".closed.json"):
                rec = BatchRecord.model_validate_json(path.read_bytes())
                end = self._batch_path(rec.batch_id, ".closed")
                out.append((rec, BatchClosed.model_validate_json(end.read_bytes()) if end.exists() else None))
        return sorted(out, key=lambda x: (x[0].submitted_at, x[0].batch_id))

    def open_batches(self) -> list[BatchRecord]:
        """Submitted jobs not yet closed: polled (not resubmitted) by the next ``read --batch``."""
        return [rec for rec, end in self.batches() if end is None]

    def manifests(self) -> list[Manifest]:
        """Every manifest, sorted by path."""
        return [Manifest.model_validate_json(p.read_bytes())
                for p in sorted((self.root / "packets").glob("*/*.json"))]

    def reads(self) -> dict[str, ReadRecord]:
        """Every read record by packet id; a packet not read yet whose batch line failed shows that
        failure (READ_FAILED with the line's reason; the latest batch's when several failed)."""
        order = {_safe(rec.batch_id): n for n, (rec, _) in enumerate(self.batches())}
        failed = sorted((self.root / "batch_failed").glob("*/*.json"), key=lambda p: (order.get(p.parent.name, -1), p))
        reads = {p.stem: ReadRecord.model_validate_json(p.read_bytes()) for p in failed}
        reads.update({p.stem: ReadRecord.model_validate_json(p.read_bytes())
                      for p in sorted((self.root / "reads").glob("*.json"))})
        return dict(sorted(reads.items()))

    def files(self) -> dict[str, bytes]:
        """All files of this evaluator (relative path -> bytes), for audits and tests."""
        return {str(p.relative_to(self.root)): p.read_bytes()
                for p in sorted(self.root.rglob("*")) if p.is_file() and not p.name.startswith(".tmp-")}



def verify_reads(archive: Archive) -> list[str]:
    """Problems in every evaluator's files: unreadable manifests or reads, missing prompt or
    response blobs (blob contents themselves are checked by ``archive verify``; the files are parsed in
    worker processes when there are many)."""
    files = []  # (the folder under the evaluator's directory, the file's path)
    for eid in ReadStore.evaluator_ids(archive):
        root = str(ReadStore(archive, eid).root)
        for dirpath, _, names in os.walk(root):
            top = dirpath[len(root) + 1:].split(os.sep, 1)[0]
            files += [(top, os.path.join(dirpath, n)) for n in names if n.endswith(".json") and n != "evaluator.json"]
    blobs = archive.blob_names()

    def name_missing(chunk: list[tuple[str, str]], missing: set[str]) -> list[str]:
        return [f"{archive.blob_path(sha)}: missing blob referenced by {path}" if sha else path
                for path, sha in _read_file_problems(chunk) if sha is None or sha in missing]

    return blob_referencing_problems(_read_file_shas, files, lambda shas: shas - blobs, name_missing)


def _read_file_shas(files: list[tuple[str, str]]) -> tuple[list[str], set[str]]:
    """The files' problem lines and the blobs they reference (each once)."""
    found = _read_file_problems(files)
    return [path for path, sha in found if sha is None], {sha for _, sha in found if sha is not None}


def _read_file_problems(files: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """Per evaluator file (its top folder, its path): (problem line, None) when it is unreadable, else
    (path, sha256) per blob it references (the caller keeps the missing ones)."""
    found: list[tuple[str, str | None]] = []
    for top, name in files:
        model: type[Record] = (Manifest if top == "packets" else ReadRecord if top in ("reads", "batch_failed")
                               else BatchClosed if name.endswith(".closed.json") else BatchRecord)
        try:
            rec = model.model_validate_json(read_file(name))
        except ValueError as exc:
            found.append((f"{name}: unreadable {model.__name__} ({str(exc).splitlines()[0]})", None))
            continue
        shas = ([rec.packet_id] if isinstance(rec, Manifest) else
                [rec.raw_response_blob, rec.text_blob] + ([rec.headers_blob] if rec.headers_blob else [])
                if isinstance(rec, ReadRecord) else [])
        found += [(name, sha) for sha in shas]
    return found
