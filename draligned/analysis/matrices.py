"""Pair matrices (paper Figure 2, Table 22): arm a state x arm b state counts per phase.

For each pair the two arms' states on the changed factor are crossed. Summary shares use all
pairs of the group as denominator: both OWN (the conditions are distinguished), the same
directional state in both arms (coincide), either UNKNOWN, either absent (NO_RUN, NOT_READ, NO_DOCUMENT, MISSING),
either an undefined request readout (NO_REQUEST, UNDEFINED; Table 15 keeps them as missing states).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from draligned.analysis.pairs import Pair, StateIndex
from draligned.analysis.plan import PhaseSpec, Plan
from draligned.analysis.rows import ABSENT, DIRECTIONAL, UNDEFINED_REQUESTS
from draligned.analysis.table import Table, share


def _groups(pair: Pair) -> Iterator[tuple[str, str]]:
    yield "all", "all"
    yield "card", pair.card_id
    yield "model", pair.model
    yield "harness", pair.harness


def pair_states(pairs: list[Pair], index: StateIndex, phase: PhaseSpec) -> list[tuple[Pair, str, str]]:
    """(pair, state of arm a, state of arm b) at a phase."""
    return [(p, index.state(p.run_a, phase, p.axis), index.state(p.run_b, phase, p.axis)) for p in pairs]


def pair_matrices(pairs: list[Pair], indexes: dict[str, StateIndex], plan: Plan) -> tuple[Table, Table]:
    """The long count table and the summary shares, per evaluator, phase, comparison and group."""
    counts: Counter[tuple] = Counter()
    totals: dict[tuple, Counter[str]] = {}
    for evaluator, index in indexes.items():
        for phase in plan.phases:
            for pair, a, b in pair_states(pairs, index, phase):
                for group_by, group in _groups(pair):
                    key = (evaluator, phase, pair.comparison, group_by, group)
                    counts[key + (a, b)] += 1
                    t = totals.setdefault(key, Counter())
                    t["pairs"] += 1
                    t["both_own"] += a == b == "OWN"
                    t["coincide"] += a == b and a in DIRECTIONAL
                    t["either_unknown"] += "UNKNOWN" in (a, b)
                    t["either_absent"] += a in ABSENT or b in ABSENT
                    t["either_undefined"] += a in UNDEFINED_REQUESTS or b in UNDEFINED_REQUESTS
    order = {e: i for i, e in enumerate(indexes)}
    main = next(iter(indexes), None)

    def sort_key(item: tuple[tuple, object]) -> tuple:
        return (order[item[0][0]], plan.phases.index(item[0][1])) + item[0][2:]

    def headline(row: list) -> bool:
        return row[0] == main and row[3] == "all" and row[2] in plan.comparisons.primary

    keys = ["evaluator", "phase", "comparison", "group_by", "group"]
    long_rows = [list(k) + [n] for k, n in sorted(counts.items(), key=sort_key)]
    summary_rows = [list(k) + [t["pairs"]] + [v for c in ("both_own", "coincide", "either_unknown", "either_absent",
                                                                "either_undefined")
                                              for v in (t[c], share(t[c], t["pairs"]))]
                    for k, t in sorted(totals.items(), key=sort_key)]
    view_note = (f"shown: evaluator {main}, all groups pooled, primary comparisons "
                 f"{', '.join(plan.comparisons.primary)}; per card, model, harness and evaluator in the CSV")
    long = Table(
        name="pair_matrix", title="Pair matrices: arm a state x arm b state",
        note="One row per non-empty cell. Denominator of a matrix: all pairs of its evaluator, phase, "
             "comparison and group (including pairs with an absent arm).",
        columns=keys + ["state_a", "state_b", "pairs"],
        rows=long_rows, view=[i for i, r in enumerate(long_rows) if headline(r)], view_note=view_note,
        computed_by="draligned.analysis.matrices.pair_matrices")
    summary = Table(
        name="pair_summary", title="Pair matrices: distinguished, coinciding, unknown, absent, undefined requests",
        note="Denominator: pairs in the group. both_own = both arms OWN (conditions distinguished); "
             "coincide = the same directional state (OWN/OTHER/BOTH/NONE) in both arms; either_unknown = at "
             "least one UNKNOWN; either_absent = at least "
             "one of NO_RUN, NOT_READ, NO_DOCUMENT, MISSING; either_undefined = at least one request readout "
             "NO_REQUEST or UNDEFINED (no request / none identified; missing, never NONE).",
        columns=keys + ["pairs", "both_own", "both_own_share", "coincide", "coincide_share",
                        "either_unknown", "either_unknown_share", "either_absent", "either_absent_share",
                        "either_undefined", "either_undefined_share"],
        rows=summary_rows, view=[i for i, r in enumerate(summary_rows) if headline(r)], view_note=view_note,
        computed_by="draligned.analysis.matrices.pair_matrices")
    return long, summary
