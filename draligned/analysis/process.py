"""Process vs delivery (paper Tables 24, 25, 32): what a run did next to what it recommended.

The request readout is shown next to the final state on the same factor. The Table 24 pattern
("searching for an alternative is not recommending it") is a run whose request readout has the
opposite endpoint (OTHER or BOTH) while its final is OWN. Process counts need no evaluator.
"""

from __future__ import annotations

from collections import Counter
from statistics import mean

from draligned.analysis.pairs import Pair, StateIndex
from draligned.analysis.rows import RunRow
from draligned.analysis.table import Table


def request_vs_final(pairs: list[Pair], index: StateIndex) -> tuple[Table, Table]:
    """Crosstab of request readout x final state, and the runs showing the Table 24 pattern."""
    cross: Counter[tuple] = Counter()
    pattern = []
    for pair in pairs:
        for run in (pair.run_a, pair.run_b):
            if run is None:
                continue
            req, fin = index.state(run, "requests", pair.axis), index.state(run, "final", pair.axis)
            cross[(pair.comparison, req, fin)] += 1
            if req in ("OTHER", "BOTH") and fin == "OWN":
                pattern.append([run.run_id, run.card_id, run.arm, run.model, run.harness, run.seed,
                                pair.axis, req, fin, run.requests, run.drafts])
    crosstab = Table(
        name="request_vs_final", title="Request readout next to the final state",
        note="Denominator: arm runs of all pairs, on the factor their pair changes. NO_REQUEST and "
             "UNDEFINED (no identified request) are request readouts, never imputed as NONE (Table 15).",
        columns=["comparison", "request_state", "final_state", "runs"],
        rows=[list(k) + [n] for k, n in sorted(cross.items())],
        computed_by="draligned.analysis.process.request_vs_final")
    alt = Table(
        name="searched_alternative", title="Searching for an alternative is not recommending it (Table 24 pattern)",
        note="Runs whose request readout includes the opposite endpoint (OTHER or BOTH) while the final is OWN.",
        columns=["run_id", "card_id", "arm", "model", "harness", "seed", "axis", "request_state",
                 "final_state", "requests", "drafts"],
        rows=sorted(pattern), computed_by="draligned.analysis.process.request_vs_final",
        empty_reason=None if pattern else "no run shows the pattern (or no evaluator states)")
    return crosstab, alt


def process_counts(runs: list[RunRow]) -> tuple[Table, Table]:
    """Per-run request, draft and call counts, and their means per card, arm, model and harness."""
    per_run = Table(
        name="process_runs", title="Process per run",
        note="Every run attempt in the plan's subset, whatever its status. requests = search queries "
             "and page reads.",
        columns=["run_id", "study", "card_id", "arm", "model", "harness", "seed", "attempt", "status",
                 "requests", "drafts", "tool_calls", "model_calls", "has_final"],
        rows=[[r.run_id, r.study, r.card_id, r.arm, r.model, r.harness, r.seed, r.attempt, r.status,
               r.requests, r.drafts, r.tool_calls, r.model_calls, r.has_final] for r in runs],
        computed_by="draligned.analysis.process.process_counts")
    groups: dict[tuple, list[RunRow]] = {}
    for r in runs:
        if r.status == "completed":
            groups.setdefault((r.card_id, r.arm, r.model, r.harness), []).append(r)
    per_arm = Table(
        name="process_by_arm", title="Process by arm (completed runs)",
        note="Means over completed runs of the cell; n is the denominator.",
        columns=["card_id", "arm", "model", "harness", "n", "requests_mean", "drafts_mean",
                 "tool_calls_mean", "model_calls_mean", "runs_without_draft"],
        rows=[list(k) + [len(g), round(mean(r.requests for r in g), 2), round(mean(r.drafts for r in g), 2),
                         round(mean(r.tool_calls for r in g), 2), round(mean(r.model_calls for r in g), 2),
                         sum(r.drafts == 0 for r in g)] for k, g in sorted(groups.items())],
        computed_by="draligned.analysis.process.process_counts")
    return per_run, per_arm
