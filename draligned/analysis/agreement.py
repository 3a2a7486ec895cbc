"""Agreement between evaluators on the same documents: exact share and Cohen's kappa.

The statistic is the evaluator's own (``draligned.evaluator.agreement.cohen``); this module
only aligns two evaluators' states and says why kappa is undefined when it is (Table 18).
"""

from __future__ import annotations

from draligned.analysis.rows import StateRow
from draligned.analysis.table import Table
from draligned.evaluator.agreement import Agreement, cohen


def undefined_reason(result: Agreement) -> str | None:
    """Why kappa is undefined: no items, or chance agreement 1 (no rater varied)."""
    if result.kappa is not None:
        return None
    return "no items" if result.n == 0 else "chance agreement is 1: neither rater varied"


def evaluator_agreement(primary: str, states: dict[str, list[StateRow]]) -> Table:
    """Per other evaluator and phase: documents read by both, exact agreement and kappa on states."""
    base = {(s.run_id, s.document, s.axis): s for s in states.get(primary, [])}
    rows = []
    for other, rows_other in sorted(states.items()):
        if other == primary:
            continue
        theirs = {(s.run_id, s.document, s.axis): s for s in rows_other}
        for phase in sorted({s.phase for s in base.values()} | {s.phase for s in theirs.values()}):
            keys = sorted(k for k in base.keys() & theirs.keys() if base[k].phase == phase)
            only_primary = sum(1 for k in base.keys() - theirs.keys() if base[k].phase == phase)
            only_other = sum(1 for k in theirs.keys() - base.keys() if theirs[k].phase == phase)
            k = cohen([base[x].state for x in keys], [theirs[x].state for x in keys], phase)
            agree = sum(base[x].state == theirs[x].state for x in keys)
            rows.append([primary, other, phase, k.n, agree, None if k.exact is None else round(k.exact, 4),
                         None if k.kappa is None else round(k.kappa, 4), undefined_reason(k),
                         only_primary, only_other])
    absent = [e for e in states if e != primary and not states[e]]
    return Table(
        name="evaluator_agreement", title="Agreement between evaluators on the same documents",
        note="Items: (run, document, factor) with a state from both evaluators; states compared as categories "
             "(UNKNOWN and MISSING included). exact = agree / n. Kappa undefined when no rater varied."
             + (f" Evaluators with no states in this archive: {', '.join(absent)}." if absent else ""),
        columns=["evaluator", "other_evaluator", "phase", "n", "agree", "exact", "kappa", "kappa_undefined",
                 "only_evaluator", "only_other"],
        rows=rows, computed_by="draligned.analysis.agreement.evaluator_agreement",
        empty_reason=None if rows else "no second evaluator's states to compare (plan agreement.evaluators)")
