"""Agreement between two raters on the same units: exact share and Cohen's kappa (paper Table 18).

Kappa is undefined (None) when chance agreement is 1, i.e. when neither rater varies and both
give the same single answer; a constant rater beside a varying one gives kappa 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable

from pydantic import BaseModel, ConfigDict

from draligned.evaluator.states import StateRow


class Agreement(BaseModel):
    """Agreement of two raters over the units both rated."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    group: str
    """What was compared (a phase, or "all")."""
    n: int
    """Units rated by both."""
    exact: float | None
    """Share of units with equal answers (None when n is 0)."""
    kappa: float | None
    """Cohen's kappa; None when undefined (no units, or chance agreement 1)."""


def cohen(a: list[Hashable], b: list[Hashable], group: str = "all") -> Agreement:
    """Exact agreement and Cohen's kappa of two aligned answer lists."""
    n = len(a)
    if n == 0:
        return Agreement(group=group, n=0, exact=None, kappa=None)
    po = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[k] * cb[k] for k in ca) / (n * n)
    kappa = None if pe >= 1.0 else (po - pe) / (1 - pe)
    return Agreement(group=group, n=n, exact=po, kappa=kappa)


def _key(row: StateRow) -> tuple:
    return (row.run_id, row.document, row.axis_id)


def between_evaluators(rows_a: list[StateRow], rows_b: list[StateRow]) -> list[Agreement]:
    """Per phase (and overall): agreement of two evaluators' states on the same units."""
    b = {_key(r): r.decision.state for r in rows_b}
    pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for r in rows_a:
        if _key(r) in b:
            pairs[r.phase].append((r.decision.state, b[_key(r)]))
            pairs["all"].append((r.decision.state, b[_key(r)]))
    return [cohen([x for x, _ in v], [y for _, y in v], group) for group, v in sorted(pairs.items())]


def between_reads(rows: list[StateRow]) -> list[Agreement]:
    """Per document phase (and overall): agreement of read 1's and read 2's (label, basis)."""
    pairs: dict[str, list[tuple[tuple, tuple]]] = defaultdict(list)
    for r in rows:
        if len(r.reads) == 2:
            one, two = ((x.label, x.basis) for x in r.reads)
            pairs[r.phase].append((one, two))
            pairs["all"].append((one, two))
    return [cohen([x for x, _ in v], [y for _, y in v], group) for group, v in sorted(pairs.items())]
