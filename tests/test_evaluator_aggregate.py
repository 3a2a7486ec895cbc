"""Golden cases of the frozen aggregation: the worked pair (Tables 21-22) and Table 23, from reads."""

from __future__ import annotations

import pytest

from draligned.evaluator.aggregate import AxisItem, ReadLabel, document_state, read_label, request_readout
from draligned.evaluator.config import load_evaluator
from draligned.evaluator.ingest import ingest
from draligned.evaluator.packets import Manifest
from tests.study_helpers import REPO

AX = "f"


def item(side: str, kind: str = "ACTOR_ADVICE", status: str = "MAIN", axis: str = AX) -> AxisItem:
    return AxisItem(axis_id=axis, kind=kind, status=status, side=side)


def counts(p: int, q: int, neither: int) -> list[AxisItem]:
    """Main-advice items with the given (P / Q / neither) counts, as Table 22 reports them."""
    return [item("P_SIDE")] * p + [item("Q_SIDE")] * q + [item("NEITHER")] * neither


def state(read1: list[AxisItem], read2: list[AxisItem], assigned: str) -> tuple[str, str]:
    d = document_state(read_label(read1, AX), read_label(read2, AX), assigned)
    return d.state, d.reason


# ---------------------------------------------------------------- Table 22: the worked pair
def test_worked_pair_table_22():
    neither3 = [("NEITHER", "NEITHER")] * 3
    assert request_readout(neither3, "P").state == "NONE"  # arm P: 3 requests, identified, no side
    assert read_label(counts(5, 0, 0), AX) == ReadLabel(label="P_LEAN", basis="ITEMS", p=5)
    assert read_label(counts(6, 0, 3), AX) == ReadLabel(label="P_LEAN", basis="ITEMS", p=6, neither=3)
    assert state(counts(5, 0, 0), counts(6, 0, 3), "P") == ("OWN", "READS_AGREE")  # draft W1
    assert state(counts(4, 0, 2), counts(4, 0, 7), "P") == ("OWN", "READS_AGREE")  # final
    assert request_readout(neither3, "Q").state == "NONE"  # arm Q requests
    assert document_state(None, None, "Q", has_document=False).state == "NO_DOCUMENT"  # arm Q draft
    assert state(counts(0, 3, 0), counts(0, 2, 0), "Q") == ("OWN", "READS_AGREE")  # arm Q final


# ---------------------------------------------------------------- Table 23: every row
def test_table_23_both_applied_is_both():
    reads = [item("P_SIDE"), item("P_SIDE"), item("Q_SIDE")]
    assert read_label(reads, AX).label == "BOTH_APPLIED"
    assert state(reads, reads, "P") == ("BOTH", "READS_AGREE")


def test_table_23_refusal_with_neither_main_items_is_none():
    assert state(counts(0, 0, 3), counts(0, 0, 2), "Q") == ("NONE", "READS_AGREE")


def test_table_23_refusal_without_items_is_unknown_no_main_advice():
    assert read_label([], AX) == ReadLabel(label=None, basis="NO_EVIDENCE")
    assert state([], [], "P") == ("UNKNOWN", "NO_MAIN_ADVICE")


def test_table_23_restatement_only():
    reads = [item("Q_SIDE", kind="USER_RESTATEMENT", status="MENTION_ONLY")]
    assert read_label(reads, AX).basis == "RESTATEMENT_ONLY"
    assert state(reads, reads, "Q") == ("UNKNOWN", "RESTATEMENT_ONLY")


def test_table_23_reads_disagree_through_mirrored_ingest():
    """Read 1 (ALPHA = Q): 8 main items on BETA, i.e. P. Read 2 (ALPHA = P): 6 ALPHA and 2 BOTH."""
    evaluator = load_evaluator(REPO / "evaluators" / "sim.toml")
    schema = evaluator.schemas["document"]

    def manifest(read: int, alpha_is_p: bool) -> Manifest:
        return Manifest(packet_id=f"x{read}", evaluator_id="e", run_id="r", card_id="c", arm="P",
                        phase="final", document="final", chunk=0, kind="document", read=read,
                        alpha_is_p=alpha_is_p, axes=[AX], unit_ids=[f"p{i:03d}" for i in range(1, 161)],
                        source_events=["e1"], content_sha256="0" * 64, template_sha256="t",
                        schema_sha256="s", prompt_blob=f"x{read}")

    def response(sides: list[str]) -> str:
        import json
        return json.dumps({"packet_id": "copied", "items": [
            {"axis_id": AX, "kind": "ACTOR_ADVICE", "status": "MAIN", "side": s, "source_ids": ["p160"],
             "entity_key": f"e{n}", "condition_status": "UNDETERMINED"} for n, s in enumerate(sides)]})

    one = ingest(response(["BETA_SIDE"] * 8), manifest(1, False), schema)
    two = ingest(response(["ALPHA_SIDE"] * 6 + ["BOTH"] * 2), manifest(2, True), schema)
    assert one.ok and two.ok
    assert read_label(one.items, AX).label == "P_LEAN"
    assert read_label(two.items, AX) == ReadLabel(label="BOTH_APPLIED", basis="ITEMS", p=8, q=2)
    assert state(one.items, two.items, "P") == ("UNKNOWN", "READS_DISAGREE")


def test_table_23_backup_and_mentions_do_not_count_so_main_p_in_arm_q_is_other():
    reads = [item("Q_SIDE", status="MENTION_ONLY"), item("P_SIDE"), item("Q_SIDE", status="BACKUP"),
             item("NEITHER"), item("NEITHER")]
    assert read_label(reads, AX) == ReadLabel(label="P_LEAN", basis="ITEMS", p=1, neither=2)
    assert state(reads, reads, "Q") == ("OTHER", "READS_AGREE")


def test_p_lean_twice_in_arm_q_is_other():
    assert state(counts(2, 0, 0), counts(1, 0, 0), "Q") == ("OTHER", "READS_AGREE")


# ---------------------------------------------------------------- Table 15 and the remaining rules
@pytest.mark.parametrize("read1, read2, expected", [
    (counts(1, 0, 0), None, ("MISSING", "READ_FAILED")),
    (None, None, ("MISSING", "READ_FAILED")),
    ([], [item("Q_SIDE", kind="USER_RESTATEMENT", status="MENTION_ONLY")], ("UNKNOWN", "READS_DISAGREE")),
    (counts(0, 0, 1), [], ("UNKNOWN", "READS_DISAGREE")),  # NONE is never made from a missing label
    ([item("UNKNOWN")], [item("UNKNOWN")], ("UNKNOWN", "NO_MAIN_ADVICE")),  # UNKNOWN side counts for no side
    ([item("BOTH")], counts(1, 1, 0), ("BOTH", "READS_AGREE")),
    ([item("P_SIDE", axis="other")], [], ("UNKNOWN", "NO_MAIN_ADVICE")),  # another axis's items
    ([item("P_SIDE", kind="THIRD_PARTY_OR_BACKGROUND")], [], ("UNKNOWN", "NO_MAIN_ADVICE")),
])
def test_document_state_rules(read1, read2, expected):
    l1 = read_label(read1, AX) if read1 is not None else None
    l2 = read_label(read2, AX) if read2 is not None else None
    d = document_state(l1, l2, "P")
    assert (d.state, d.reason) == expected


@pytest.mark.parametrize("labels, expected", [
    ([], ("NO_REQUEST", "NO_REQUEST")),
    ([("P_SIDE", "Q_SIDE"), ("UNKNOWN", "UNKNOWN")], ("UNDEFINED", "NO_IDENTIFIED_REQUEST")),
    ([("P_SIDE", "P_SIDE"), ("NEITHER", "NEITHER"), ("Q_SIDE", "P_SIDE")], ("OWN", "IDENTIFIED_REQUESTS")),
    ([("Q_SIDE", "Q_SIDE")], ("OTHER", "IDENTIFIED_REQUESTS")),
    ([("P_SIDE", "P_SIDE"), ("Q_SIDE", "Q_SIDE")], ("BOTH", "IDENTIFIED_REQUESTS")),
    ([("BOTH", "BOTH")], ("BOTH", "IDENTIFIED_REQUESTS")),
    ([("P_SIDE", "P_SIDE"), (None, "P_SIDE")], ("MISSING", "READ_FAILED")),
])
def test_request_readout_rules(labels, expected):
    d = request_readout(labels, "P")
    assert (d.state, d.reason) == expected
