"""Agreement between two raters on the same units: exact share and Cohen's kappa (paper Table 18).

Kappa is undefined (None) when chance agreement is 1, i.e. when neither rater varies and both
give the same single answer; a constant rater beside a varying one gives kappa 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable

from draligned.evaluator.aggregate import read_label
from draligned.evaluator.packets import Manifest
from draligned.evaluator.states import StateRow
from draligned.evaluator.storage import ReadRecord, ReadStore
from draligned.records import Record


class Agreement(Record):
    """Agreement of two raters over the units both rated."""

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
    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
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


def _answers(record: ReadRecord, manifest: Manifest) -> dict[tuple[str, ...], Hashable]:
    """A read's answers by unit: (label, basis) per axis for documents, the side per request and axis."""
    if manifest.kind == "document":
        labels = {axis: read_label(record.items, axis) for axis in manifest.axes}
        return {(axis,): (lab.label, lab.basis) for axis, lab in labels.items()}
    return {(lab.request_id, lab.axis_id): lab.side for lab in record.labels}


def between_reads(store: ReadStore) -> list[Agreement]:
    """Per phase: read 1 against read 2 of one evaluator, on the units both read OK.

    Documents compare (label, basis) per axis; requests compare each request's restored label.
    """
    units: dict[tuple, dict[int, Manifest]] = defaultdict(dict)
    for m in store.manifests():
        units[(m.run_id, m.document, m.chunk)][m.read] = m
    reads = store.reads()
    pairs: dict[str, list[tuple[Hashable, Hashable]]] = defaultdict(list)
    for unit in units.values():
        recs = [reads.get(unit[n].packet_id) if n in unit else None for n in (1, 2)]
        ok = [r for r in recs if r is not None and r.status == "OK"]
        if len(ok) < len(recs):
            continue
        one, two = (_answers(r, unit[1]) for r in ok)
        pairs[unit[1].phase] += [(one[key], two[key]) for key in sorted(one)]
    return [cohen([x for x, _ in v], [y for _, y in v], group) for group, v in sorted(pairs.items())]
