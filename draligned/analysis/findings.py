"""Findings first: the plan's questions answered in sentences, every number linked to its table.

The questions are the report's: do the primary-phase recommendations distinguish the two user
conditions, which endpoint do they recommend when they do not, does that survive rewriting (draft to
final), and does it hold across models, harnesses and evaluators? Each number is a ``Fact`` that
names the table it was read from, so report.md and report.html can link it. Shares come with a
Wilson 95% interval (pairs are counted as independent; seeds of one setting are not).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from math import sqrt

from draligned.analysis.plan import Plan
from draligned.analysis.table import Table
from draligned.records import Record


class Fact(Record, frozen=True):
    """A piece of a finding: plain text, or a number with the table it comes from."""

    text: str
    """What is shown."""
    table: str | None = None
    """The table the number is read from (linked), None for plain text."""


Finding = list[Fact]
"""One sentence."""


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share_text(k: int, n: int) -> str:
    """'12 of 18 (67%, 95% CI 44–84%)'."""
    if n == 0:
        return f"{k} of 0"
    lo, hi = wilson(k, n)
    return f"{k} of {n} ({100 * k / n:.0f}%, 95% CI {100 * lo:.0f}–{100 * hi:.0f}%)"


def _t(text: str) -> Fact:
    return Fact(text=text)


def _distinguished(index: Table, comparison: str, phase: str) -> Finding:
    rows = [r for r in index.records() if r["comparison"] == comparison]
    n, own = len(rows), sum(r["reading"] == "each its own" for r in rows)
    out = [_t(f"{phase.capitalize()} reports distinguish the two conditions in "),
           Fact(text=share_text(own, n), table="pair_summary"), _t(f" {comparison} pairs")]
    readings = Counter(r["reading"] for r in rows if r["reading"] != "each its own")
    for reading, k in sorted(readings.items(), key=lambda x: (-x[1], x[0])):
        if reading.startswith("both recommend"):
            texts = sorted({f'{r["recommends_a"].split(" side ", 1)[1][1:-1]} in {r["card_id"]}'
                            for r in rows if r["reading"] == reading})
            what = "; ".join(texts[:3]) + ("; …" if len(texts) > 3 else "")
            out += [_t("; in "), Fact(text=str(k), table="pair_index"), _t(f" {reading}: {what}")]
        elif reading not in ("unknown", "absent"):
            out += [_t("; in "), Fact(text=str(k), table="pair_index"), _t(f" {reading}")]
    reasons = Counter(reason for r in rows if r["reading"] == "unknown"
                      for reason in {r["reason_a"], r["reason_b"]} if reason and reason != "READS_AGREE")
    unknown = sum(r["reading"] == "unknown" for r in rows)
    if unknown:
        why = ", ".join(f"{reason} {k}" for reason, k in sorted(reasons.items()))
        out += [_t("; "), Fact(text=str(unknown), table="pair_index"),
                _t(f" pair{'s are' if unknown != 1 else ' is'} UNKNOWN ({why})")]
    absent = sum(r["reading"] == "absent" for r in rows)
    if absent:
        out += [_t("; "), Fact(text=str(absent), table="pair_index"),
                _t(" lack a state for an arm (no run, not read, no document or a missing read)")]
    return out + [_t(".")]


def _by_group(summary: Table, evaluator: str, phase: str, primary: Sequence[str], group_by: str) -> Finding | None:
    rows = [r for r in summary.records() if r["evaluator"] == evaluator and r["phase"] == phase
            and r["group_by"] == group_by and r["comparison"] in primary]
    totals: dict[str, Counter[str]] = {}
    for r in rows:
        c = totals.setdefault(r["group"], Counter())
        c["pairs"] += r["pairs"]
        c["own"] += r["both_own"]
    if len(totals) < 2:
        return None
    out = [_t(f"By {group_by} ({' + '.join(primary)} pairs, both OWN): ")]
    for i, (group, c) in enumerate(sorted(totals.items())):
        out += [_t(("; " if i else "") + f"{group} "),
                Fact(text=share_text(c["own"], c["pairs"]), table="pair_summary")]
    return out + [_t(".")]


def findings(tables: dict[str, Table], plan: Plan, evaluator: str) -> list[Finding]:
    """The sentences of the findings section, from the report's tables."""
    phase = plan.primary_phase
    if "pair_index" not in tables:
        return [[_t(f"No evaluator reads for '{evaluator}' in this archive, so no directional finding; see "),
                 Fact(text="coverage", table="coverage_states"), _t(".")]]
    index = tables["pair_index"]
    present = [c for c in plan.comparisons.primary if any(r["comparison"] == c for r in index.records())]
    out = [_distinguished(index, c, phase) for c in present]
    if not present:
        out.append([_t("No pair of the primary comparisons "), Fact(text="0", table="pair_index"),
                    _t(f" {' + '.join(plan.comparisons.primary)} in this subset.")])
    for r in tables["retention_summary"].records() if "retention_summary" in tables else []:
        if r["comparison"] in present and r["readable"]:
            out.append([_t(f"Draft to final ({r['comparison']}): the final keeps the {plan.retention.draft} "
                           f"draft's state in "), Fact(text=share_text(r["kept"], r["readable"]),
                                                       table="retention_summary"),
                        _t(" readable runs; pairs distinguished at the draft and still at the final: "),
                        Fact(text=f"{r['pairs_distinguished_both']} of {r['pairs_distinguished_draft']}",
                             table="retention_summary"), _t(".")])
    for group_by in ("model", "harness"):
        found = _by_group(tables["pair_summary"], evaluator, phase, present, group_by)
        if found:
            out.append(found)
    for r in tables["evaluator_agreement"].records() if "evaluator_agreement" in tables else []:
        if r["phase"] == phase and r["n"]:
            kappa = "undefined" if r["kappa"] is None else f"{r['kappa']:.2f}"
            out.append([_t(f"Evaluators {r['evaluator']} and {r['other_evaluator']} give the same {phase} state "
                           f"for "), Fact(text=share_text(r["agree"], r["n"]), table="evaluator_agreement"),
                        _t(" documents (Cohen's kappa "), Fact(text=kappa, table="evaluator_agreement"), _t(").")])
    return out


def plain(finding: Finding) -> str:
    """A finding as plain text."""
    return "".join(f.text for f in finding)
