"""Coverage accounting (paper Tables 1 and 15): what was started, finished, paired and read.

Each table has its own denominator and every missing or non-directional category is counted by
its own name (UNKNOWN and MISSING split by reason); nothing is dropped silently.
"""

from __future__ import annotations

from collections import Counter

from draligned.analysis.pairs import Pair, StateIndex, finished_runs
from draligned.analysis.plan import Plan
from draligned.analysis.rows import RunRow
from draligned.analysis.table import Table, share
from draligned.cards import Card

STATUSES = ("completed", "budget_exhausted", "failed", "started")


def run_coverage(runs: list[RunRow]) -> Table:
    """Per study: slots, attempts started and how they ended (status 'started' = interrupted)."""
    by_study: dict[str, list[RunRow]] = {}
    for r in runs:
        by_study.setdefault(r.study, []).append(r)
    rows = []
    for study, rs in sorted(by_study.items()):
        status = Counter(r.status for r in rs)
        slots = {r.slot_id for r in rs}
        finished = {r.slot_id for r in finished_runs(rs).values()}
        rows.append([study, len(slots), len(finished), len(rs), *(status[s] for s in STATUSES),
                     share(status["completed"], len(rs)), sum(r.has_final for r in rs)])
    return Table(
        name="coverage_runs", title="Runs started and completed per study (cf. paper Table 1)",
        note="Attempts count agent executions (retries of a slot are separate attempts); completed_rate = "
             "completed / attempts. interrupted = a started marker without a final record.",
        columns=["study", "slots", "slots_finished", "attempts", "completed", "budget_exhausted", "failed",
                 "interrupted", "completed_rate", "finals_delivered"],
        rows=rows, computed_by="draligned.analysis.coverage.run_coverage")


def pair_coverage(pairs: list[Pair]) -> Table:
    """Per comparison: pairs formed and how many lack a finished run on either side."""
    c: dict[str, Counter[str]] = {}
    for p in pairs:
        t = c.setdefault(p.comparison, Counter())
        t["pairs"] += 1
        t["both_runs"] += p.run_a is not None and p.run_b is not None
        t["missing_a"] += p.run_a is None
        t["missing_b"] += p.run_b is None
    return Table(
        name="coverage_pairs", title="Pairs formed per comparison",
        note="Denominator: (study, card, model, harness, seed, pool-search cell) cells with any run, times the "
             "comparisons the card defines and the plan includes.",
        columns=["comparison", "pairs", "both_runs", "both_runs_share", "missing_arm_a", "missing_arm_b"],
        rows=[[k, t["pairs"], t["both_runs"], share(t["both_runs"], t["pairs"]), t["missing_a"], t["missing_b"]]
              for k, t in sorted(c.items())],
        computed_by="draligned.analysis.coverage.pair_coverage")


def state_coverage(runs: list[RunRow], cards: dict[str, Card], indexes: dict[str, StateIndex],
                   plan: Plan) -> Table:
    """Per evaluator and phase: every finished run x factor of its card, counted by state (and reason)."""
    counts: Counter[tuple] = Counter()
    totals: Counter[tuple] = Counter()
    for evaluator, index in indexes.items():
        for run in finished_runs(runs).values():
            for factor in cards[run.card_id].factors:
                for phase in plan.phases:
                    row = index.row(run, phase, factor.factor_id)
                    state = index.state(run, phase, factor.factor_id)
                    reason = row.reason if row is not None and state in ("UNKNOWN", "MISSING") else None
                    counts[(evaluator, phase, state, reason or "")] += 1
                    totals[(evaluator, phase)] += 1
    return Table(
        name="coverage_states", title="Every state category by name, per evaluator and phase",
        note="Denominator (documents): finished runs x factors of their card, per phase. UNKNOWN and MISSING "
             "are split by reason; NOT_READ = no state from this evaluator; NO_DOCUMENT = nothing to read.",
        columns=["evaluator", "phase", "state", "reason", "documents", "share", "denominator"],
        rows=[list(k) + [n, share(n, totals[k[:2]]), totals[k[:2]]] for k, n in sorted(counts.items())],
        computed_by="draligned.analysis.coverage.state_coverage")
