"""Draft-to-final retention (paper Tables 25, 32 and 38 "subset read as propagation").

Direction: for each arm run of a pair, the state of the plan's draft (first or last) next to
the final state on the pair's factor. A run is *readable* when both states are directional
(OWN/OTHER/BOTH/NONE); only readable runs enter the kept share, the full transition table keeps
every category. Text change: 1 - Jaccard similarity of word k-shingles (tokens are lower-cased
Latin/digit words and single CJK characters; k from the plan). For file-delivering harnesses the
final can be the saved file, so identical draft and final texts are flagged as structural.
"""

from __future__ import annotations

import re
from collections import Counter

from draligned.analysis.pairs import Pair, StateIndex
from draligned.analysis.plan import PhaseSpec, Plan
from draligned.analysis.rows import DIRECTIONAL, RunRow, RunTexts
from draligned.analysis.table import Table, share

_TOKEN = re.compile(r"[a-z0-9]+|[\u3400-\u9fff\uf900-\ufaff]")


def shingles(text: str, k: int) -> set[tuple[str, ...]]:
    """Word k-shingles of a text (the whole token list when it is shorter than k)."""
    tokens = _TOKEN.findall(text.lower())
    if len(tokens) < k:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i:i + k]) for i in range(len(tokens) - k + 1)}


def jaccard(a: str, b: str, k: int) -> float:
    """Jaccard similarity of the k-shingle sets (1.0 for two texts without tokens)."""
    sa, sb = shingles(a, k), shingles(b, k)
    return 1.0 if not sa and not sb else len(sa & sb) / len(sa | sb)


def _arm_runs(pairs: list[Pair]) -> list[tuple[Pair, RunRow]]:
    return [(p, r) for p in pairs for r in (p.run_a, p.run_b) if r is not None]


def direction_retention(pairs: list[Pair], index: StateIndex, plan: Plan) -> tuple[Table, Table]:
    """Draft->final state transitions per run, and kept shares per comparison among readable runs."""
    draft: PhaseSpec = "draft:first" if plan.retention.draft == "first" else "draft:last"
    flows: Counter[tuple] = Counter()
    summary: dict[tuple, Counter[str]] = {}
    for pair, run in _arm_runs(pairs):
        d, f = index.state(run, draft, pair.axis), index.state(run, "final", pair.axis)
        flows[(pair.comparison, d, f)] += 1
        s = summary.setdefault((pair.comparison,), Counter())
        s["runs"] += 1
        if d in DIRECTIONAL and f in DIRECTIONAL:
            s["readable"] += 1
            s["kept"] += d == f
            s["own_kept"] += d == f == "OWN"
            s["own_at_draft"] += d == "OWN"
    for pair in pairs:
        states = [index.state(r, ph, pair.axis) for r in (pair.run_a, pair.run_b) for ph in (draft, "final")]
        if all(s in DIRECTIONAL for s in states):
            s = summary.setdefault((pair.comparison,), Counter())
            s["pairs_readable"] += 1
            s["pairs_distinguished_draft"] += states[0] == states[2] == "OWN"
            s["pairs_distinguished_both"] += states[0] == states[1] == states[2] == states[3] == "OWN"
    flow = Table(
        name="retention_flows", title=f"Draft ({plan.retention.draft}) to final: state transitions per run",
        note="Denominator: arm runs of all pairs (each run on the factor its pair changes). Absent "
             "categories are kept by name.",
        columns=["comparison", "draft_state", "final_state", "runs"],
        rows=[list(k) + [n] for k, n in sorted(flows.items())],
        computed_by="draligned.analysis.retention.direction_retention")
    kept = Table(
        name="retention_summary", title="Does the final keep the draft's direction?",
        note="kept_share: runs whose final state equals the draft state / readable runs (both states "
             "directional). Pair columns: pairs whose four states are directional; distinguished = both "
             "arms OWN at the draft, and additionally at the final.",
        columns=["comparison", "runs", "readable", "kept", "kept_share", "own_at_draft", "own_kept",
                 "pairs_readable", "pairs_distinguished_draft", "pairs_distinguished_both"],
        rows=[[k[0], c["runs"], c["readable"], c["kept"], share(c["kept"], c["readable"]), c["own_at_draft"],
               c["own_kept"], c["pairs_readable"], c["pairs_distinguished_draft"], c["pairs_distinguished_both"]]
              for k, c in sorted(summary.items())],
        computed_by="draligned.analysis.retention.direction_retention")
    return flow, kept


def text_change(runs: list[RunRow], texts: dict[str, RunTexts], plan: Plan) -> Table:
    """Per run: how much the final's text differs from the compared draft; structural identity flagged."""
    k = plan.retention.shingle_words
    rows = []
    for run in runs:
        t = texts.get(run.run_id)
        if t is None or not t.drafts or t.final is None:
            continue
        version = min(t.drafts) if plan.retention.draft == "first" else max(t.drafts)
        sim = jaccard(t.drafts[version], t.final, k)
        identical = t.drafts[version] == t.final
        rows.append([run.run_id, run.card_id, run.arm, run.model, run.harness, run.seed, version,
                     len(t.drafts), round(sim, 4), round(1 - sim, 4), identical,
                     identical and run.harness in plan.retention.structural_harnesses])
    return Table(
        name="text_change", title=f"Draft-to-final text change (1 - Jaccard of word {k}-shingles)",
        note=f"One row per finished run with at least one draft and a final. Similarity: Jaccard of word "
             f"{k}-shingle sets (lower-cased Latin/digit words, single CJK characters). structural: identical "
             f"texts under {', '.join(plan.retention.structural_harnesses)}, where the final is the saved file.",
        columns=["run_id", "card_id", "arm", "model", "harness", "seed", "draft_version", "drafts",
                 "jaccard", "text_change", "identical", "structural"],
        rows=rows, computed_by="draligned.analysis.retention.text_change",
        empty_reason=None if rows else "no run has both a saved draft and a final")
