"""Assemble states from an evaluator's stored reads: per (run, phase, document, axis), and pairs.

The rules are the pure functions of ``aggregate``; this module only finds, for each run, the two
mirrored reads of each unit and says why a state is missing when a read is (blocked by the leak
check, not yet read, or READ_FAILED). Pair comparison puts arm A's state beside arm B's for each
phase and document (paper Table 22); a document one arm lacks is NO_DOCUMENT.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Literal, TypedDict

from draligned.archive.store import Archive
from draligned.cards import Card, Endpoint, comparisons
from draligned.evaluator.aggregate import (
    ReadLabel,
    RestoredSide,
    State,
    StateDecision,
    document_state,
    read_label,
    request_readout,
)
from draligned.evaluator.packets import Manifest, Phase
from draligned.evaluator.reading import load_card, pair_key
from draligned.evaluator.storage import ReadRecord, ReadStore
from draligned.records import DraftEvent, Record, RunRecord, ToolCallEvent


class StateRow(Record):
    """The state of one run's phase/document on one axis, with its reason and evidence."""

    evaluator_id: str
    """Evaluator whose reads gave the state."""
    run_id: str
    """The run."""
    card_id: str
    """Its card."""
    arm: str
    """Its arm or cell."""
    seed: int
    """Its replicate seed."""
    phase: Phase
    """requests, draft or final."""
    document: str
    """requests, draft:<version> or final."""
    axis_id: str
    """The factor."""
    assigned: Endpoint
    """The run's endpoint on this factor."""
    decision: StateDecision
    """State, reason and label."""
    reads: list[ReadLabel] = []
    """Documents: the two reads' labels (restored), when both were ingested."""


class PairCell(Record):
    """Arm A's state beside arm B's for one phase/document of one replicate pair (Table 22)."""

    card_id: str
    """Card."""
    axis_id: str
    """The factor the two arms differ in."""
    arm_a: str
    """First arm (P side of the factor)."""
    arm_b: str
    """Second arm (Q side of the factor)."""
    seed: int
    """Replicate."""
    model: str = ""
    """Model declaration of both runs (a pair never crosses models)."""
    harness: str = ""
    """Harness of both runs (a pair never crosses harnesses)."""
    search_cell: str = ""
    """Pool-search cell selection/stopping/ranking of both runs ("" for corpus search)."""
    phase: Phase
    """requests, draft or final."""
    document: str
    """requests, draft:<version> or final."""
    state_a: State
    """State of arm A's run."""
    state_b: State
    """State of arm B's run."""


Unread = Literal["LEAK_BLOCKED", "NOT_READ"]


def read_outcome(m: Manifest | None, reads: dict[str, ReadRecord]) -> ReadRecord | None | Unread:
    """The read of one packet; None for READ_FAILED, or why there is no read at all."""
    if m is None:
        return "NOT_READ"
    if m.blocked:
        return "LEAK_BLOCKED"
    rec = reads.get(m.packet_id)
    if rec is None:
        return "NOT_READ"
    return rec if rec.status == "OK" else None


def _missing(outcomes: list[ReadRecord | None | Unread]) -> StateDecision | None:
    """MISSING when a packet was blocked or not read (a READ_FAILED read is left to the rules)."""
    for reason in ("LEAK_BLOCKED", "NOT_READ"):
        if reason in outcomes:
            return StateDecision(state="MISSING", reason=reason)
    return None


Units = dict[tuple[str, str, int], dict[int, Manifest]]


RequestChunks = dict[str, list[dict[int, Manifest]]]
"""Each run's request chunks (the manifests of both reads of each), in chunk order."""


def request_chunks(units: Units) -> RequestChunks:
    """The request chunks of every run, found in one pass over the units (a search of all units per run and
    axis made reindex quadratic: 4,000 runs × 16,000 units)."""
    chunks: RequestChunks = defaultdict(list)
    for key in sorted(k for k in units if k[1] == "requests"):
        chunks[key[0]].append(units[key])
    return chunks


def request_decision(chunks: list[dict[int, Manifest]], has_requests: bool, reads: dict[str, ReadRecord],
                     axis_id: str, assigned: Endpoint) -> StateDecision:
    """Request readout of a run on one axis from every request chunk's two reads (``chunks``: the run's, from
    :func:`request_chunks`)."""
    if has_requests and not chunks:
        return StateDecision(state="MISSING", reason="NOT_READ")
    pairs: list[tuple[RestoredSide | None, RestoredSide | None]] = []
    for chunk in chunks:
        outs = [read_outcome(chunk.get(n), reads) for n in (1, 2)]
        if missing := _missing(outs):
            return missing
        sides = [{lab.request_id: lab.side for lab in o.labels if lab.axis_id == axis_id}
                 if isinstance(o, ReadRecord) else {} for o in outs]
        pairs += [(sides[0].get(i), sides[1].get(i)) for i in chunk[1].unit_ids]
    return request_readout(pairs, assigned)


def document_decision(reads_of_unit: dict[int, Manifest] | None, present: bool,
                       reads: dict[str, ReadRecord], axis_id: str,
                       assigned: Endpoint) -> tuple[StateDecision, list[ReadLabel]]:
    """State of one document on one axis and the two read labels it came from."""
    if not present:
        return document_state(None, None, assigned, has_document=False), []
    outs = [read_outcome((reads_of_unit or {}).get(n), reads) for n in (1, 2)]
    if missing := _missing(outs):
        return missing, []
    r1, r2 = (read_label(o.items, axis_id) if isinstance(o, ReadRecord) else None for o in outs)
    return document_state(r1, r2, assigned), [r for r in (r1, r2) if r is not None]


class _RunKeys(TypedDict):
    """The fields of a StateRow that every row of one run shares."""

    evaluator_id: str
    run_id: str
    card_id: str
    arm: str
    seed: int


def _run_rows(evaluator_id: str, record: RunRecord, card: Card, units: Units, requests: RequestChunks,
              reads: dict[str, ReadRecord], phases: set[Phase]) -> list[StateRow]:
    """Rows of one run: requests, every draft version (draft:1 as NO_DOCUMENT if none), final."""
    base: _RunKeys = {"evaluator_id": evaluator_id, "run_id": record.run_id, "card_id": card.card_id,
            "arm": record.slot.arm, "seed": record.slot.seed}
    existing = {f"draft:{e.version}" for e in record.events if isinstance(e, DraftEvent)}
    existing |= {"final"} if record.final_blob else set()
    docs: list[str] = []
    if "draft" in phases:
        docs += sorted((d for d in existing if d != "final"), key=document_order) or ["draft:1"]
    docs += ["final"] if "final" in phases else []
    has_requests = any(isinstance(e, ToolCallEvent) and e.request_text is not None for e in record.events)
    rows: list[StateRow] = []
    for f in card.factors:
        assigned = card.endpoint_for(record.slot.arm, f.factor_id)
        if "requests" in phases:
            decision = request_decision(requests.get(record.run_id, []), has_requests, reads, f.factor_id,
                                        assigned)
            rows.append(StateRow(**base, phase="requests", document="requests", axis_id=f.factor_id,
                                 assigned=assigned, decision=decision))
        for doc in docs:
            decision, labels = document_decision(units.get((record.run_id, doc, 0)), doc in existing,
                                                  reads, f.factor_id, assigned)
            rows.append(StateRow(**base, phase=phase_of(doc), document=doc,
                                 axis_id=f.factor_id, assigned=assigned, decision=decision, reads=labels))
    return rows


def run_states(archive: Archive, evaluator_id: str,
               loaded: tuple[list[Manifest], dict[str, ReadRecord]] | None = None
               ) -> Callable[[RunRecord], list[StateRow]]:
    """The states of one sealed run for the phases this evaluator has packets for (its manifests and reads
    are loaded once, here, unless the caller has ``loaded`` them already, so that runs can be given one at
    a time)."""
    store = ReadStore(archive, evaluator_id)
    manifests, reads = loaded or (store.manifests(), store.reads())
    units: Units = defaultdict(dict)
    for m in manifests:
        units[(m.run_id, m.document, m.chunk)][m.read] = m
    phases = {m.phase for m in manifests}
    requests = request_chunks(units)
    cards: dict[str, Card] = {}  # a study has a few cards and thousands of runs: each is read and hashed once

    def states(record: RunRecord) -> list[StateRow]:
        if record.slot.card_sha256 not in cards:
            cards[record.slot.card_sha256] = load_card(archive, record)
        return _run_rows(evaluator_id, record, cards[record.slot.card_sha256], units, requests, reads, phases)

    return states


def state_rows(archive: Archive, evaluator_id: str) -> list[StateRow]:
    """Every (run, phase, document, axis) state for the phases this evaluator has packets for (the
    sealed records read one at a time)."""
    states = run_states(archive, evaluator_id)
    return [row for path in archive.record_paths() for row in states(archive.load_record(path))]


def phase_of(document: str) -> Phase:
    """The phase of a document role: requests, draft (draft:<version>) or final."""
    return "requests" if document == "requests" else "final" if document == "final" else "draft"


def document_order(document: str) -> tuple[int, int]:
    """requests, then draft versions in order, then final."""
    if document == "requests":
        return (0, 0)
    return (2, 0) if document == "final" else (1, int(document.split(":")[1]))


def pair_cells(archive: Archive, rows: list[StateRow]) -> list[PairCell]:
    """Arm A × arm B states per comparison, replicate, phase and document (latest attempt per slot)."""
    by_run: dict[str, dict[tuple[str, str], StateRow]] = defaultdict(dict)
    for row in rows:
        by_run[row.run_id][(row.document, row.axis_id)] = row
    groups: dict[tuple, dict[str, RunRecord]] = defaultdict(dict)
    for r in sorted(archive.records(), key=lambda r: r.attempt):
        groups[pair_key(r)][r.slot.arm] = r
    cells: list[PairCell] = []
    for key, arms in sorted(groups.items()):
        card = load_card(archive, next(iter(arms.values())))
        for comp in comparisons(card):
            if comp.arm_a not in arms or comp.arm_b not in arms:
                continue
            a, b = by_run[arms[comp.arm_a].run_id], by_run[arms[comp.arm_b].run_id]
            docs = sorted({d for d, ax in (*a, *b) if ax == comp.factor_id}, key=document_order)
            for doc in docs:
                sa, sb = ((x[(doc, comp.factor_id)].decision.state if (doc, comp.factor_id) in x
                           else "NO_DOCUMENT") for x in (a, b))
                cells.append(PairCell(card_id=card.card_id, axis_id=comp.factor_id, arm_a=comp.arm_a,
                                      arm_b=comp.arm_b, seed=key[-1], model=key[2], harness=key[3],
                                      search_cell=key[4], phase=phase_of(doc), document=doc,
                                      state_a=sa, state_b=sb))
    return cells


def pair_matrix(cells: list[PairCell], document: str = "final") -> Counter[tuple[str, str]]:
    """Counts of (arm A state, arm B state) over the pairs for one document role."""
    return Counter((c.state_a, c.state_b) for c in cells if c.document == document)
