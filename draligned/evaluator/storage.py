"""Where an evaluator's packets and reads live: ``ARCHIVE/reads/<evaluator_id>/``, write-once.

Layout::

    reads/<evaluator_id>/evaluator.json          snapshot: evaluator file + template/schema sha256
    reads/<evaluator_id>/packets/<run_id>/<document>.c<chunk>.r<read>.json
                                                 manifest (program side; packet id, orientation, phase)
    reads/<evaluator_id>/reads/<packet_id>.json    read record: raw response blob, ingest outcome

A packet is identified by its prompt (``packet_id``); runs whose units render the same prompt
(identical requests or documents) share that packet's read, which is read once.

Prompts and raw responses are blobs of the archive. Nothing here touches run records or another
evaluator's directory, so a second evaluator can re-read an archive without changing the first.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from draligned.archive.store import Archive, ArchiveError, write_once
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


def _dump(model: BaseModel | dict[str, Any]) -> bytes:
    data = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return (json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


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

    def put_packet(self, manifest: Manifest, prompt: str) -> None:
        """Store the prompt blob and the manifest (idempotent)."""
        self.archive.put_blob(prompt)
        name = f"{manifest.document.replace(':', '-')}.c{manifest.chunk}.r{manifest.read}.json"
        write_once(self.root / "packets" / manifest.run_id / name, _dump(manifest))

    def has_read(self, packet_id: str) -> bool:
        return (self.root / "reads" / f"{packet_id}.json").exists()

    def put_read(self, record: ReadRecord) -> None:
        write_once(self.root / "reads" / f"{record.packet_id}.json", _dump(record))

    def manifests(self) -> list[Manifest]:
        """Every manifest, sorted by path."""
        return [Manifest.model_validate_json(p.read_bytes())
                for p in sorted((self.root / "packets").glob("*/*.json"))]

    def reads(self) -> dict[str, ReadRecord]:
        """Every read record by packet id."""
        return {p.stem: ReadRecord.model_validate_json(p.read_bytes())
                for p in sorted((self.root / "reads").glob("*.json"))}

    def files(self) -> dict[str, bytes]:
        """All files of this evaluator (relative path -> bytes), for audits and tests."""
        return {str(p.relative_to(self.root)): p.read_bytes()
                for p in sorted(self.root.rglob("*")) if p.is_file() and not p.name.startswith(".tmp-")}



def verify_reads(archive: Archive) -> list[str]:
    """Problems in every evaluator's files: unreadable manifests or reads, missing prompt or
    response blobs (blob contents themselves are checked by ``archive verify``)."""
    problems: list[str] = []
    for eid in ReadStore.evaluator_ids(archive):
        store = ReadStore(archive, eid)
        for path in sorted(store.root.rglob("*.json")):
            if path.name == "evaluator.json":
                continue
            model = Manifest if path.parent.parent.name == "packets" else ReadRecord
            try:
                rec = model.model_validate_json(path.read_bytes())
            except ValueError as exc:
                problems.append(f"{path}: unreadable {model.__name__} ({str(exc).splitlines()[0]})")
                continue
            shas = [rec.packet_id] if isinstance(rec, Manifest) else (
                [rec.raw_response_blob, rec.text_blob] + ([rec.headers_blob] if rec.headers_blob else []))
            problems += [f"{archive.blob_path(s)}: missing blob referenced by {path}"
                         for s in shas if not archive.blob_path(s).exists()]
    return problems
