"""Evaluator tables of the DuckDB index, rebuilt from the read files like the run tables.

Tables: packets (one row per manifest), reads (with their transport: sync, or batch with the job and
line ids; a packet whose batch line failed and is not read yet shows that READ_FAILED line), items
(document reads), labels (read labels of documents per axis, and request labels), states (one row per
run, phase, document, axis).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from draligned.archive.store import Archive
from draligned.archive.tables import ArchiveTables, Rows
from draligned.evaluator.aggregate import read_label
from draligned.evaluator.packets import Manifest
from draligned.evaluator.states import run_states
from draligned.evaluator.storage import ReadRecord, ReadStore, verify_reads
from draligned.records import RunRecord

SCHEMA = """
CREATE TABLE packets (evaluator_id TEXT, packet_id TEXT, run_id TEXT, phase TEXT, document TEXT,
  chunk INTEGER, read INTEGER, alpha_is_p BOOLEAN, kind TEXT, template_sha256 TEXT, blocked TEXT);
CREATE TABLE reads (evaluator_id TEXT, packet_id TEXT, status TEXT, error TEXT,
  raw_response_blob TEXT, text_blob TEXT, output_tokens BIGINT, transport TEXT, batch_id TEXT, line_id TEXT);
CREATE TABLE items (evaluator_id TEXT, packet_id TEXT, seq INTEGER, axis_id TEXT, kind TEXT,
  status TEXT, side TEXT, source_ids TEXT, entity_key TEXT, condition_status TEXT);
CREATE TABLE labels (evaluator_id TEXT, packet_id TEXT, axis_id TEXT, request_id TEXT, label TEXT,
  basis TEXT, p INTEGER, q INTEGER, neither INTEGER);
CREATE TABLE states (evaluator_id TEXT, run_id TEXT, card_id TEXT, arm TEXT, seed INTEGER,
  phase TEXT, document TEXT, axis_id TEXT, assigned TEXT, state TEXT, reason TEXT, label TEXT);
"""


def evaluator_rows(archive: Archive, batches: Iterable[Sequence[RunRecord]]) -> Iterator[Rows]:
    """The evaluator tables' rows for every evaluator that has read the archive: its read files'
    tables evaluator by evaluator, then the states of the sealed runs a batch of records at a time."""
    ids = ReadStore.evaluator_ids(archive)
    states = []
    for eid in ids:
        store = ReadStore(archive, eid)
        loaded = store.manifests(), store.reads()  # parsed once for both (52,000 files at 4,000 runs)
        yield _read_rows(eid, *loaded)
        states.append(run_states(archive, eid, loaded))
    if not ids:
        return
    for records in batches:
        yield {"states": [(s.evaluator_id, s.run_id, s.card_id, s.arm, s.seed, s.phase, s.document, s.axis_id,
                           s.assigned, s.decision.state, s.decision.reason, s.decision.label)
                          for of in states for r in records if r.status != "started" for s in of(r)]}


def _read_rows(eid: str, manifests: list[Manifest], reads: dict[str, ReadRecord]) -> Rows:
    """``packets``, ``reads``, ``items`` and ``labels`` of one evaluator's read files (its manifests and
    reads)."""
    axes = {m.packet_id: m.axes for m in manifests}
    labels: list[tuple[Any, ...]] = [(eid, r.packet_id, lab.axis_id, lab.request_id, lab.side, None, None, None, None)
              for r in reads.values() for lab in r.labels]
    for r in reads.values():
        if r.status == "OK" and not r.labels:
            for axis in axes.get(r.packet_id, []):
                rl = read_label(r.items, axis)
                labels.append((eid, r.packet_id, axis, None, rl.label, rl.basis, rl.p, rl.q, rl.neither))
    return {
        "packets": [(eid, m.packet_id, m.run_id, m.phase, m.document, m.chunk, m.read, m.alpha_is_p,
                     m.kind, m.template_sha256, json.dumps(m.blocked) if m.blocked else None) for m in manifests],
        "reads": [(eid, r.packet_id, r.status, r.error, r.raw_response_blob, r.text_blob,
                   r.usage.output_tokens, r.transport, r.batch_id, r.line_id) for r in reads.values()],
        "items": [(eid, r.packet_id, n, i.axis_id, i.kind, i.status, i.side,
                   json.dumps(i.source_ids), i.entity_key, i.condition_status)
                  for r in reads.values() for n, i in enumerate(r.items)],
        "labels": labels,
    }


EVALUATOR_TABLES = ArchiveTables(name="evaluator", ddl=SCHEMA, rows=evaluator_rows, verify=verify_reads)
"""Every evaluator's packets, reads and states: the tables above and the files under ``ARCHIVE/reads/``."""
