"""Directional consistency (paper Table 32 and the abstract's "differences recur"): final states
across model families, harnesses (reasoning settings are separate model declarations) and seeds.
"""

from __future__ import annotations

from collections import Counter

from draligned.analysis.pairs import Pair, StateIndex
from draligned.analysis.plan import Plan
from draligned.analysis.rows import DIRECTIONAL
from draligned.analysis.table import Table, share


def state_distribution(pairs: list[Pair], index: StateIndex, plan: Plan) -> Table:
    """Primary-phase state counts per card, arm, model and harness (each run once per factor)."""
    seen: set[tuple[str, str]] = set()
    counts: Counter[tuple] = Counter()
    for p in pairs:
        for arm, run in ((p.comparison.split("-")[0], p.run_a), (p.comparison.split("-")[1], p.run_b)):
            key = (run.run_id if run else f"{p.card_id}/{arm}/{p.model}/{p.harness}/{p.seed}", p.axis)
            if key in seen:
                continue
            seen.add(key)
            counts[(p.card_id, p.axis, arm, p.model, p.harness, index.state(run, plan.primary_phase, p.axis))] += 1
    return Table(
        name="state_distribution", title=f"States at {plan.primary_phase} by card, arm, model and harness",
        note="Denominator: the runs of the cell (seeds), each counted once per factor; absent runs are NO_RUN.",
        columns=["card_id", "axis", "arm", "model", "harness", "state", "runs"],
        rows=[list(k) + [n] for k, n in sorted(counts.items())],
        computed_by="draligned.analysis.consistency.state_distribution")


def recurrence(pairs: list[Pair], index: StateIndex, plan: Plan) -> tuple[Table, Table]:
    """Per setting: readable and distinguished pairs; per card: in how many settings it recurs."""
    cells: dict[tuple, Counter[str]] = {}
    for p in pairs:
        a = index.state(p.run_a, plan.primary_phase, p.axis)
        b = index.state(p.run_b, plan.primary_phase, p.axis)
        c = cells.setdefault((p.card_id, p.comparison, p.model, p.harness), Counter())
        c["pairs"] += 1
        c["readable"] += a in DIRECTIONAL and b in DIRECTIONAL
        c["distinguished"] += a == b == "OWN"
    by_setting = Table(
        name="consistency_settings", title=f"Distinguished pairs per setting ({plan.primary_phase})",
        note="Denominator of the share: readable pairs (both arms directional). Pairs counts seeds.",
        columns=["card_id", "comparison", "model", "harness", "pairs", "readable", "distinguished",
                 "distinguished_share"],
        rows=[list(k) + [c["pairs"], c["readable"], c["distinguished"], share(c["distinguished"], c["readable"])]
              for k, c in sorted(cells.items())],
        computed_by="draligned.analysis.consistency.recurrence")
    cards: dict[tuple, Counter[str]] = {}
    for (card, comp, _, _), c in cells.items():
        t = cards.setdefault((card, comp), Counter())
        t["settings"] += 1
        t["settings_readable"] += c["readable"] > 0
        t["settings_recurring"] += c["distinguished"] > 0
        t["pairs"] += c["pairs"]
        t["distinguished"] += c["distinguished"]
    by_card = Table(
        name="consistency_cards", title="How often the directional difference recurs across settings",
        note="settings = model x harness cells; recurring = at least one pair with both arms OWN. "
             "recurrence_share denominator: settings with a readable pair.",
        columns=["card_id", "comparison", "settings", "settings_readable", "settings_recurring",
                 "recurrence_share", "pairs", "distinguished"],
        rows=[list(k) + [t["settings"], t["settings_readable"], t["settings_recurring"],
                         share(t["settings_recurring"], t["settings_readable"]), t["pairs"], t["distinguished"]]
              for k, t in sorted(cards.items())],
        computed_by="draligned.analysis.consistency.recurrence")
    return by_setting, by_card
