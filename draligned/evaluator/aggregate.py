"""From ingested reads to directional states: pure functions, no I/O (paper Tables 15, 22, 23).

A document read becomes a label by counting its main-advice items (kind ACTOR_ADVICE, status
MAIN) on one factor by restored side; two mirrored reads that agree on label and basis become a
state relative to the run's assigned endpoint. Everything that is not a clean agreement stays
UNKNOWN (with its reason) or missing; nothing is imputed as NONE (Table 15).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from draligned.cards import Endpoint
from draligned.records import Record

RestoredSide = Literal["P_SIDE", "Q_SIDE", "BOTH", "NEITHER", "UNKNOWN"]
Label = Literal["P_LEAN", "Q_LEAN", "BOTH_APPLIED", "NO_DIRECTION"]
Basis = Literal["ITEMS", "NO_EVIDENCE", "RESTATEMENT_ONLY"]
State = Literal["OWN", "OTHER", "BOTH", "NONE", "UNKNOWN", "NO_DOCUMENT", "MISSING",
                "NO_REQUEST", "UNDEFINED"]
Reason = Literal["READS_AGREE", "READS_DISAGREE", "NO_MAIN_ADVICE", "RESTATEMENT_ONLY",
                 "NO_DOCUMENT", "READ_FAILED", "NOT_READ", "LEAK_BLOCKED", "NO_REQUEST",
                 "NO_IDENTIFIED_REQUEST", "IDENTIFIED_REQUESTS"]
STATES: tuple[str, ...] = State.__args__  # type: ignore[attr-defined]


class AxisItem(Record, frozen=True):
    """The fields of one extracted item that the frozen aggregation reads (Table 14)."""

    axis_id: str
    """Factor id the item is about."""
    kind: Literal["ACTOR_ADVICE", "USER_RESTATEMENT", "THIRD_PARTY_OR_BACKGROUND"]
    """Who speaks: the agent advising, the agent restating the user, or background."""
    status: Literal["MAIN", "BACKUP", "COMPARE", "EXPLICIT_REJECT", "MENTION_ONLY", "DEFERRED", "UNKNOWN"]
    """Role of the item in the document; only MAIN counts."""
    side: RestoredSide
    """Side after restoring ALPHA/BETA to P/Q."""


class ReadLabel(Record, frozen=True):
    """The label of one read of one document on one factor, with its basis and counts."""

    label: Label | None
    """P_LEAN, Q_LEAN, BOTH_APPLIED, NO_DIRECTION, or None when no main-advice item qualifies."""
    basis: Basis
    """ITEMS when a label was given; otherwise NO_EVIDENCE or RESTATEMENT_ONLY."""
    p: int = 0
    """Main-advice items on the P side (an item on BOTH counts here and for Q)."""
    q: int = 0
    """Main-advice items on the Q side."""
    neither: int = 0
    """Main-advice items on neither side."""


class StateDecision(Record, frozen=True):
    """A directional state with the reason the program gave it."""

    state: State
    """OWN, OTHER, BOTH, NONE, UNKNOWN, NO_DOCUMENT, MISSING (requests: also NO_REQUEST, UNDEFINED)."""
    reason: Reason
    """Why: the reads agree, disagree, no main advice, restatement only, no document, failed read, ..."""
    label: Label | None = None
    """The agreed label (documents) or the aggregated label of identified requests."""
    p: int = 0
    """Requests: identified requests on the P side (BOTH counts for both); documents: unused."""
    q: int = 0
    """Requests: identified requests on the Q side."""
    neither: int = 0
    """Requests: identified requests on neither side."""


def _label_from_counts(p: int, q: int, neither: int) -> Label | None:
    """Only P -> P_LEAN, only Q -> Q_LEAN, both -> BOTH_APPLIED, only neither -> NO_DIRECTION."""
    if p and q:
        return "BOTH_APPLIED"
    if p:
        return "P_LEAN"
    if q:
        return "Q_LEAN"
    return "NO_DIRECTION" if neither else None


def read_label(items: Sequence[AxisItem], axis_id: str) -> ReadLabel:
    """Label one read on one factor from its main-advice items; UNKNOWN-side items do not count."""
    on_axis = [i for i in items if i.axis_id == axis_id]
    main = [i for i in on_axis if i.kind == "ACTOR_ADVICE" and i.status == "MAIN"]
    p = sum(i.side in ("P_SIDE", "BOTH") for i in main)
    q = sum(i.side in ("Q_SIDE", "BOTH") for i in main)
    neither = sum(i.side == "NEITHER" for i in main)
    label = _label_from_counts(p, q, neither)
    if label is not None:
        return ReadLabel(label=label, basis="ITEMS", p=p, q=q, neither=neither)
    restated = bool(on_axis) and all(i.kind == "USER_RESTATEMENT" for i in on_axis)
    return ReadLabel(label=None, basis="RESTATEMENT_ONLY" if restated else "NO_EVIDENCE")


def relative_state(label: Label, assigned: Endpoint) -> State:
    """P_LEAN/Q_LEAN relative to the assigned endpoint; BOTH_APPLIED -> BOTH; NO_DIRECTION -> NONE."""
    if label == "BOTH_APPLIED":
        return "BOTH"
    if label == "NO_DIRECTION":
        return "NONE"
    return "OWN" if label == f"{assigned}_LEAN" else "OTHER"


def document_state(read1: ReadLabel | None, read2: ReadLabel | None, assigned: Endpoint,
                   has_document: bool = True) -> StateDecision:
    """State of one document on one factor from its two mirrored reads (None = failed read)."""
    if not has_document:
        return StateDecision(state="NO_DOCUMENT", reason="NO_DOCUMENT")
    if read1 is None or read2 is None:
        return StateDecision(state="MISSING", reason="READ_FAILED")
    if (read1.label, read1.basis) != (read2.label, read2.basis):
        return StateDecision(state="UNKNOWN", reason="READS_DISAGREE")
    if read1.label is None:
        reason: Reason = "RESTATEMENT_ONLY" if read1.basis == "RESTATEMENT_ONLY" else "NO_MAIN_ADVICE"
        return StateDecision(state="UNKNOWN", reason=reason)
    return StateDecision(state=relative_state(read1.label, assigned), reason="READS_AGREE",
                         label=read1.label)


def identified_side(read1: RestoredSide | None, read2: RestoredSide | None) -> RestoredSide | None:
    """A request is identified when both reads give the same non-UNKNOWN label."""
    if read1 is None or read1 != read2 or read1 == "UNKNOWN":
        return None
    return read1


def request_readout(labels: list[tuple[RestoredSide | None, RestoredSide | None]],
                    assigned: Endpoint) -> StateDecision:
    """An arm's request state on one factor from (read 1, read 2) labels of its requests, in order.

    None stands for a failed read. No request -> NO_REQUEST; none identified -> UNDEFINED;
    neither is imputed as neutral (Table 15).
    """
    if not labels:
        return StateDecision(state="NO_REQUEST", reason="NO_REQUEST")
    if any(a is None or b is None for a, b in labels):
        return StateDecision(state="MISSING", reason="READ_FAILED")
    sides = [s for s in (identified_side(a, b) for a, b in labels) if s is not None]
    p = sum(s in ("P_SIDE", "BOTH") for s in sides)
    q = sum(s in ("Q_SIDE", "BOTH") for s in sides)
    neither = sum(s == "NEITHER" for s in sides)
    label = _label_from_counts(p, q, neither)
    if label is None:
        return StateDecision(state="UNDEFINED", reason="NO_IDENTIFIED_REQUEST")
    return StateDecision(state=relative_state(label, assigned), reason="IDENTIFIED_REQUESTS",
                         label=label, p=p, q=q, neither=neither)
