"""Pairs as sides: which endpoint each arm's document recommends, in the card's own words.

OWN and OTHER are relative to the run's assigned endpoint. For a reader they are translated back:
both OWN = each arm recommends its own endpoint; OWN/OTHER = both recommend arm a's endpoint (the
table says which, with the card's endpoint text); OTHER/OTHER = each recommends the other's. BOTH is
"both" endpoints, NONE "neither". One row per pair at the plan's primary phase: the pair browser's
index and the source of the findings' side counts.
"""

from __future__ import annotations

from draligned.analysis.pairs import Pair, StateIndex
from draligned.analysis.plan import Plan
from draligned.analysis.rows import ABSENT, UNDEFINED_REQUESTS
from draligned.analysis.table import Table
from draligned.cards import Card
from draligned.evaluator.evidence import pair_id

_SHOWN_CHARS = 60


def endpoint_text(card: Card, axis: str, endpoint: str) -> str:
    """The endpoint's text on the card, shortened for a table cell."""
    factor = next(f for f in card.factors if f.factor_id == axis)
    text = " ".join(getattr(factor.endpoints, endpoint).split())
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 1] + "…"


def recommends(state: str, assigned: str, card: Card, axis: str) -> str:
    """What a document with this state recommends: 'P side ("...")', 'both', 'neither', or the state."""
    if state in ("OWN", "OTHER"):
        side = assigned if state == "OWN" else ("Q" if assigned == "P" else "P")
        return f'{side} side ("{endpoint_text(card, axis, side)}")'
    return {"BOTH": "both", "NONE": "neither"}.get(state, state)


def reading(a: str, b: str, side_a: str, side_b: str) -> str:
    """The pair in words: each its own, both recommend the P side, unknown, absent, ..."""
    if "UNKNOWN" in (a, b):
        return "unknown"
    if {a, b} & set(ABSENT + UNDEFINED_REQUESTS):
        return "absent"
    if a == b == "OWN":
        return "each its own"
    if a == b == "OTHER":
        return "each the other's"
    if {a, b} <= {"OWN", "OTHER"}:
        return f"both recommend the {side_a.split(' ')[0]} side"
    return f"arm a recommends {_words(side_a)}, arm b {_words(side_b)}"


def _words(side: str) -> str:
    """'P side (...)' -> 'the P side'; 'both' -> 'both endpoints'; 'neither' -> 'neither endpoint'."""
    if side.endswith(")"):
        return "the " + side.split(" (")[0]
    return {"both": "both endpoints", "neither": "neither endpoint"}.get(side, side)

def pair_index(pairs: list[Pair], index: StateIndex, cards: dict[str, Card], plan: Plan) -> Table:
    """One row per pair: both states at the primary phase, their reasons, and the sides they recommend."""
    phase = plan.primary_phase
    rows = []
    for p in pairs:
        card = cards[p.card_id]
        arm_a, arm_b = p.comparison.split("-")
        states = [index.state(r, phase, p.axis) for r in (p.run_a, p.run_b)]
        reasons = [(row.reason if (row := index.row(r, phase, p.axis)) else None) or "" for r in (p.run_a, p.run_b)]
        sides = [recommends(s, card.endpoint_for(arm, p.axis), card, p.axis)
                 for s, arm in zip(states, (arm_a, arm_b), strict=True)]
        rows.append([pair_id(p.study, p.card_id, p.comparison, p.model, p.harness, p.seed, p.search_cell),
                     p.card_id, p.comparison, p.axis, p.model, p.harness, p.seed,
                     p.run_a.run_id if p.run_a else None, states[0], reasons[0], sides[0],
                     p.run_b.run_id if p.run_b else None, states[1], reasons[1], sides[1],
                     reading(states[0], states[1], sides[0], sides[1])])
    return Table(
        name="pair_index", title=f"Every pair at {phase}: states as sides (open a pair for its evidence)",
        note="One row per matched pair of the plan's comparisons. recommends_a/b: the endpoint the arm's "
             "document recommends, in the card's words (OWN = its own endpoint, OTHER = the other arm's; "
             "BOTH = both, NONE = neither). reading: each its own (both OWN, distinguished); both recommend "
             "the P/Q side (OWN/OTHER or OTHER/OWN); each the other's (both OTHER); unknown (either UNKNOWN); "
             "absent (either without a directional state). The pair id also names the study and, for pool "
             "search, the search cell.",
        columns=["pair", "card_id", "comparison", "axis", "model", "harness", "seed",
                 "run_a", "state_a", "reason_a", "recommends_a", "run_b", "state_b", "reason_b",
                 "recommends_b", "reading"],
        rows=rows, computed_by="draligned.analysis.sides.pair_index")
