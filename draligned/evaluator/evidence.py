"""The evidence behind a state, from an evaluator's stored reads (paper Tables 20-23).

For a document: its numbered paragraphs as the evaluator saw them, each read's items (sides restored
to P/Q) with the paragraphs they cite, each read's label and the program's decision. For requests:
every request with both reads' labels and whether it was identified. For a pair: both arms' decisions
per document, as in Table 22. The decisions use exactly the rules of ``states``, so they match the
states table of the index.
"""

from __future__ import annotations

import re
from collections import defaultdict

from draligned.archive.store import Archive
from draligned.cards import Card, Endpoint, comparisons
from draligned.evaluator.aggregate import ReadLabel, RestoredSide, StateDecision, identified_side, read_label
from draligned.evaluator.ingest import ExtractedItem
from draligned.evaluator.packets import document_units, request_units
from draligned.evaluator.reading import load_card, pair_key
from draligned.evaluator.states import (
    Units,
    document_decision,
    document_order,
    read_outcome,
    request_chunks,
    request_decision,
)
from draligned.evaluator.storage import ReadRecord, ReadStore
from draligned.records import FINISHED, Record, RunRecord

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def pair_id(study: str, card_id: str, comparison: str, model: str, harness: str, seed: int,
            search_cell: str = "") -> str:
    """A readable, file-name-safe id of one matched pair (the name of its page)."""
    parts = [study, card_id, comparison, model, harness, f"s{seed}"] + ([search_cell] if search_cell else [])
    return ".".join(_UNSAFE.sub("-", p) for p in parts)


def is_main_advice(item: ExtractedItem, axis_id: str) -> bool:
    """An item that counts for the label: main advice by the agent on this factor (Table 23)."""
    return item.axis_id == axis_id and item.kind == "ACTOR_ADVICE" and item.status == "MAIN"


class ReadEvidence(Record):
    """What one read of a document said."""

    read: int
    """1 or 2."""
    status: str
    """OK, READ_FAILED, NOT_READ or LEAK_BLOCKED."""
    alpha_is_p: bool | None = None
    """Whether ALPHA showed the P endpoint in this read (None when there was no packet)."""
    items: list[ExtractedItem] = []
    """Its items, sides restored to P/Q."""
    label: ReadLabel | None = None
    """Its label on the factor (None unless the read is OK)."""


class DocumentEvidence(Record):
    """One document of one run on one factor: paragraphs, both reads, the decision."""

    run_id: str
    """The run."""
    document: str
    """draft:<version> or final."""
    axis_id: str
    """The factor."""
    assigned: Endpoint
    """The run's endpoint on the factor."""
    paragraph_ids: list[str]
    """p001, p002, ... as in the packet."""
    paragraphs: list[str]
    """Paragraph texts, aligned with ``paragraph_ids``."""
    reads: list[ReadEvidence]
    """Read 1 and read 2."""
    decision: StateDecision
    """The program's state and reason from the two reads."""

    def cited(self, read: int) -> dict[str, list[ExtractedItem]]:
        """Paragraph id -> the main-advice items of one read that cite it (the highlighted paragraphs)."""
        out: dict[str, list[ExtractedItem]] = defaultdict(list)
        for r in self.reads:
            if r.read == read:
                for item in r.items:
                    if is_main_advice(item, self.axis_id):
                        for pid in item.source_ids:
                            out[pid].append(item)
        return dict(out)


class RequestLine(Record):
    """One request of a run with both reads' labels on one factor."""

    request_id: str
    """r001, ... across the run (chunks numbered on)."""
    event_id: str
    """The tool-call event it comes from."""
    text: str
    """``search: query`` or ``read: url``."""
    read1: RestoredSide | None = None
    """Read 1's label, restored to P/Q (None: no label)."""
    read2: RestoredSide | None = None
    """Read 2's label."""
    identified: RestoredSide | None = None
    """The side when both reads agree on a non-UNKNOWN label."""


class RequestEvidence(Record):
    """A run's requests on one factor and the request readout."""

    run_id: str
    """The run."""
    axis_id: str
    """The factor."""
    assigned: Endpoint
    """The run's endpoint."""
    requests: list[RequestLine]
    """Every request in order."""
    decision: StateDecision
    """The request readout."""


class PairStep(Record):
    """One document of a pair: arm a's and arm b's decisions (a row of Table 22)."""

    document: str
    """requests, draft:<version> or final."""
    a: StateDecision
    """Arm a's decision."""
    b: StateDecision
    """Arm b's decision."""
    a_reads: list[str]
    """Arm a's read 1 / read 2 labels as shown (documents; requests: identified counts)."""
    b_reads: list[str]
    """Arm b's read labels."""


def label_text(r: ReadEvidence) -> str:
    """A read's label as shown: P_LEAN (p=2 q=0), NO_EVIDENCE, NOT_READ, ..."""
    if r.label is None:
        return r.status
    if r.label.label is None:
        return r.label.basis
    return f"{r.label.label} (p={r.label.p} q={r.label.q} neither={r.label.neither})"


class Evidence:
    """An evaluator's manifests and reads over one archive, loaded once."""

    def __init__(self, archive: Archive, evaluator_id: str) -> None:
        self.archive = archive
        self.evaluator_id = evaluator_id
        store = ReadStore(archive, evaluator_id)
        self.units: Units = defaultdict(dict)
        for m in store.manifests():
            self.units[(m.run_id, m.document, m.chunk)][m.read] = m
        self.reads: dict[str, ReadRecord] = store.reads()
        self._request_chunks = request_chunks(self.units)
        self._documents: dict[tuple[str, str], list[DocumentEvidence]] = {}

    def _read(self, run_id: str, document: str, chunk: int, n: int) -> tuple[ReadEvidence, ReadRecord | None]:
        m = self.units.get((run_id, document, chunk), {}).get(n)
        out = read_outcome(m, self.reads)
        rec = out if isinstance(out, ReadRecord) else None
        status = "READ_FAILED" if out is None else out if isinstance(out, str) else "OK"
        return ReadEvidence(read=n, status=status, alpha_is_p=m.alpha_is_p if m else None,
                            items=rec.items if rec else []), rec

    def documents(self, record: RunRecord, card: Card, axis_id: str) -> list[DocumentEvidence]:
        """Every draft version and the final of a run on one factor (kept: a pair page asks twice)."""
        key = (record.run_id, axis_id)
        if key not in self._documents:
            self._documents[key] = self._read_documents(record, card, axis_id)
        return self._documents[key]

    def _read_documents(self, record: RunRecord, card: Card, axis_id: str) -> list[DocumentEvidence]:
        assigned = card.endpoint_for(record.slot.arm, axis_id)
        out = []
        for unit in document_units(record, self.archive.get_text):
            reads = []
            for n in (1, 2):
                ev, rec = self._read(record.run_id, unit.document, 0, n)
                if rec is not None:
                    ev = ev.model_copy(update={"label": read_label(rec.items, axis_id)})
                reads.append(ev)
            decision, _ = document_decision(self.units.get((record.run_id, unit.document, 0)), True,
                                            self.reads, axis_id, assigned)
            out.append(DocumentEvidence(run_id=record.run_id, document=unit.document, axis_id=axis_id,
                                        assigned=assigned, paragraph_ids=unit.unit_ids, paragraphs=unit.texts,
                                        reads=reads, decision=decision))
        return out

    def requests(self, record: RunRecord, card: Card, axis_id: str) -> RequestEvidence:
        """Every request of a run with both reads' labels, and the readout."""
        assigned = card.endpoint_for(record.slot.arm, axis_id)
        lines: list[RequestLine] = []
        for unit in request_units(record, len(card.factors)):
            sides = []
            for n in (1, 2):
                _, rec = self._read(record.run_id, "requests", unit.chunk, n)
                sides.append({lab.request_id: lab.side for lab in rec.labels if lab.axis_id == axis_id}
                             if rec else {})
            for rid, event, text in zip(unit.unit_ids, unit.source_events, unit.texts, strict=True):
                r1, r2 = sides[0].get(rid), sides[1].get(rid)
                lines.append(RequestLine(request_id=f"r{len(lines) + 1:03d}", event_id=event, text=text,
                                         read1=r1, read2=r2, identified=identified_side(r1, r2)))
        has = bool(lines)
        decision = request_decision(self._request_chunks.get(record.run_id, []), has, self.reads, axis_id, assigned)
        return RequestEvidence(run_id=record.run_id, axis_id=axis_id, assigned=assigned, requests=lines,
                               decision=decision)

    def chain(self, run_a: RunRecord | None, run_b: RunRecord | None, card: Card, axis_id: str) -> list[PairStep]:
        """Arm a's and arm b's decisions per document (requests, drafts, final), as in Table 22."""
        absent = StateDecision(state="NO_DOCUMENT", reason="NO_DOCUMENT")
        side: list[dict[str, tuple[StateDecision, list[str]]]] = []
        for run in (run_a, run_b):
            docs: dict[str, tuple[StateDecision, list[str]]] = {}
            if run is not None:
                req = self.requests(run, card, axis_id)
                d = req.decision
                docs["requests"] = (d, [f"{len(req.requests)} requests, identified p={d.p} q={d.q} "
                                        f"neither={d.neither}"])
                for doc in self.documents(run, card, axis_id):
                    docs[doc.document] = (doc.decision, [label_text(r) for r in doc.reads])
            side.append(docs)
        steps = []
        for document in sorted(set(side[0]) | set(side[1]), key=document_order):
            (a, ar), (b, br) = (s.get(document, (absent, [])) for s in side)
            steps.append(PairStep(document=document, a=a, b=b, a_reads=ar, b_reads=br))
        return steps


def find_pair(archive: Archive, wanted: str) -> tuple[Card, str, str, str, RunRecord | None, RunRecord | None]:
    """(card, comparison, arm_a, axis, run of arm a, run of arm b) of the pair with this id: the latest
    finished attempt of each arm. KeyError names the id when no pair has it."""
    groups: dict[tuple, dict[str, RunRecord]] = defaultdict(dict)
    for r in sorted(archive.records(), key=lambda r: r.attempt):
        if r.status in FINISHED:
            groups[pair_key(r)][r.slot.arm] = r
    for (study, card_id, model, harness, cell, seed), arms in groups.items():
        card = load_card(archive, next(iter(arms.values())))
        for comp in comparisons(card):
            label = f"{comp.arm_a}-{comp.arm_b}"
            if pair_id(study, card_id, label, model, harness, seed, cell) == wanted:
                return card, label, comp.arm_a, comp.factor_id, arms.get(comp.arm_a), arms.get(comp.arm_b)
    raise KeyError(f"no pair {wanted!r} in {archive.root} (pair ids are listed in the report's pair table)")



class PairChain(Record):
    """A pair's decision chain: who was compared on what, and both arms' decisions per document."""

    pair: str
    """The pair id."""
    card_id: str
    """Card."""
    comparison: str
    """arm_a-arm_b."""
    axis_id: str
    """The factor the arms differ in."""
    endpoints: dict[str, str]
    """P and Q endpoint texts of the factor."""
    runs: list[str | None]
    """Run of arm a and of arm b (None: no finished run)."""
    steps: list[PairStep]
    """Requests, drafts, final."""


def pair_chain(archive: Archive, evaluator_id: str, pair: str) -> PairChain:
    """The decision chain of one pair from the evaluator's stored reads; KeyError when no pair has the id."""
    card, comparison, _, axis, run_a, run_b = find_pair(archive, pair)
    factor = next(f for f in card.factors if f.factor_id == axis)
    steps = Evidence(archive, evaluator_id).chain(run_a, run_b, card, axis)
    return PairChain(pair=pair, card_id=card.card_id, comparison=comparison, axis_id=axis,
                     endpoints={"P": factor.endpoints.P, "Q": factor.endpoints.Q},
                     runs=[r.run_id if r else None for r in (run_a, run_b)], steps=steps)
