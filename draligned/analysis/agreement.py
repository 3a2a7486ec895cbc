"""Agreement between evaluators on the same documents: exact share and Cohen's kappa.

Kappa is undefined (None, with the reason) when chance agreement is 1, i.e. when neither rater
varied over the same single category (the paper's Table 18 case), or when there are no items.
Named ``analysis_cohen_kappa`` so it can be deduplicated against the evaluator's own at merge.
"""

from __future__ import annotations

from collections import Counter

from draligned.analysis.rows import Row, StateRow
from draligned.analysis.table import Table


class KappaResult(Row):
    """Agreement of two raters over the same items."""

    n: int
    """Items rated by both."""
    agree: int
    """Items with identical categories."""
    exact: float | None
    """agree / n (None when n = 0)."""
    kappa: float | None
    """Cohen's kappa; None when undefined."""
    undefined_reason: str | None = None
    """Why kappa is undefined: no items, or chance agreement 1 (no rater varied)."""


def analysis_cohen_kappa(a: list[str], b: list[str]) -> KappaResult:
    """Cohen's kappa (p_o - p_e) / (1 - p_e) over paired categorical ratings."""
    if len(a) != len(b):
        raise ValueError("ratings must be paired")
    n = len(a)
    if n == 0:
        return KappaResult(n=0, agree=0, exact=None, kappa=None, undefined_reason="no items")
    agree = sum(x == y for x, y in zip(a, b))
    ca, cb = Counter(a), Counter(b)
    p_o = agree / n
    p_e = sum(ca[c] * cb[c] for c in ca) / (n * n)
    if p_e == 1:
        return KappaResult(n=n, agree=agree, exact=round(p_o, 4), kappa=None,
                           undefined_reason="chance agreement is 1: neither rater varied")
    return KappaResult(n=n, agree=agree, exact=round(p_o, 4), kappa=round((p_o - p_e) / (1 - p_e), 4))


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
            k = analysis_cohen_kappa([base[x].state for x in keys], [theirs[x].state for x in keys])
            rows.append([primary, other, phase, k.n, k.agree, k.exact, k.kappa, k.undefined_reason,
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
