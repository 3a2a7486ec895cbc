"""Matched pairs of runs and the state of each arm at a phase (pure functions).

Paired runs share study, card, model, harness and seed and differ in the arm; which arm pairs
are compared comes from ``draligned.cards.comparisons`` (paper Table 5). A slot is represented
by its finished attempt (completed or budget_exhausted; the latest if several), else it has no
run. Every absent state has its own name (``rows.ABSENT``): nothing is dropped silently.
"""

from __future__ import annotations

from draligned.analysis.plan import PhaseSpec, Plan
from draligned.analysis.rows import Row, RunRow, StateRow
from draligned.cards import Card, comparisons
from draligned.records import FINISHED


class Pair(Row):
    """Two runs (either may be missing) compared on one factor."""

    study: str
    """Study."""
    card_id: str
    """Card."""
    comparison: str
    """e.g. PP-QP; arm_a-arm_b."""
    axis: str
    """Factor id the comparison changes."""
    model: str
    """Model declaration."""
    harness: str
    """Harness."""
    seed: int
    """Replicate."""
    search_cell: str = ""
    """Pool-search cell shared by both runs ("" for corpus search)."""
    run_a: RunRow | None
    """Finished run of arm a, None if the slot has none."""
    run_b: RunRow | None
    """Finished run of arm b, None if the slot has none."""


def in_subset(run: RunRow, plan: Plan) -> bool:
    """Whether the run belongs to the plan's subset."""
    s = plan.subset
    return all(not allowed or value in allowed for value, allowed in
               ((run.study, s.studies), (run.card_id, s.cards), (run.model, s.models), (run.harness, s.harnesses)))


def finished_runs(runs: list[RunRow]) -> dict[tuple, RunRow]:
    """The representative finished run of each (study, card, arm, model, harness, seed, search cell)."""
    out: dict[tuple, RunRow] = {}
    for r in sorted(runs, key=lambda r: r.attempt):
        if r.status in FINISHED:
            out[(r.study, r.card_id, r.arm, r.model, r.harness, r.seed, r.search_cell)] = r
    return out


def build_pairs(runs: list[RunRow], cards: dict[str, Card], plan: Plan) -> list[Pair]:
    """Every pair the plan asks for over every (study, card, model, harness, seed, search cell) that
    has a run (pool runs of different search cells are different slots, never paired)."""
    done = finished_runs(runs)
    cells = sorted({(r.study, r.card_id, r.model, r.harness, r.seed, r.search_cell) for r in runs})
    pairs = []
    for study, card_id, model, harness, seed, cell in cells:
        for comp in comparisons(cards[card_id]):
            label = f"{comp.arm_a}-{comp.arm_b}"
            if label not in plan.comparisons.include:
                continue
            pairs.append(Pair(
                study=study, card_id=card_id, comparison=label, axis=comp.factor_id, model=model,
                harness=harness, seed=seed, search_cell=cell,
                run_a=done.get((study, card_id, comp.arm_a, model, harness, seed, cell)),
                run_b=done.get((study, card_id, comp.arm_b, model, harness, seed, cell))))
    return pairs


def document_for(run: RunRow, phase: PhaseSpec) -> str:
    """The document a phase spec names for this run (draft:last is the run's highest version)."""
    if phase == "draft:first":
        return "draft:1"
    if phase == "draft:last":
        return f"draft:{max(run.drafts, 1)}"
    return phase


class StateIndex:
    """Lookup of one evaluator's states by (run, document, axis)."""

    def __init__(self, states: list[StateRow]) -> None:
        self._by_key = {(s.run_id, s.document, s.axis): s for s in states}

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def row(self, run: RunRow | None, phase: PhaseSpec, axis: str) -> StateRow | None:
        """The state row, when the evaluator produced one."""
        return None if run is None else self._by_key.get((run.run_id, document_for(run, phase), axis))

    def state(self, run: RunRow | None, phase: PhaseSpec, axis: str) -> str:
        """The state, or the name of why there is none (NO_RUN, NO_DOCUMENT, NOT_READ)."""
        if run is None:
            return "NO_RUN"
        found = self.row(run, phase, axis)
        if found is not None:
            return found.state
        if (phase.startswith("draft") and run.drafts == 0) or (phase == "final" and not run.has_final):
            return "NO_DOCUMENT"
        return "NOT_READ"
