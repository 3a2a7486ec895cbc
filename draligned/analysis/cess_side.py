"""CESS side by side with the Opened Mean, per arm and per pair.

The Opened Mean describes what a run opened; the CESS estimate targets the pool the run could
search (CESS paper). They are different estimands and are shown next to each other, never
subtracted. A comparison named ``A-B`` is arm A minus arm B (as in `draligned cess pairs`), over
pairs where both arms have the value. Means and CIs weight units equally within a cluster and
clusters equally (``draligned.cess.metrics.cluster_ci``); the cluster is the card by default, or
the coarser study (the plan's ``cess.cluster``), and every table names it.
"""

from __future__ import annotations

from statistics import mean

import numpy as np

from draligned.analysis.pairs import Pair, finished_runs
from draligned.analysis.plan import Cess
from draligned.analysis.rows import CessRow, Row, RunRow
from draligned.analysis.table import Table
from draligned.cess import metrics


class Interval(Row):
    """A mean with its bootstrap interval."""

    n: int
    """Units in the mean."""
    mean: float | None
    """Mean (None with no units)."""
    low: float | None
    """Lower bound."""
    high: float | None
    """Upper bound."""


def cluster_bootstrap(values: list[float], clusters: list[str], cfg: Cess) -> Interval:
    """Mean within cluster, then across clusters, with a percentile CI resampling whole clusters."""
    if not values:
        return Interval(n=0, mean=None, low=None, high=None)
    ci = metrics.cluster_ci(np.asarray(values, float), np.asarray(clusters), level=cfg.confidence,
                            n_resamples=cfg.bootstrap, seed=cfg.seed)
    return Interval(n=len(values), mean=round(ci.estimate, 4), low=round(ci.lower, 4), high=round(ci.upper, 4))


def cluster_of(cfg: Cess, card_id: str, study: str) -> str:
    """The bootstrap cluster of a unit: its card (question) or, coarser, its study."""
    return card_id if cfg.cluster == "card" else study


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def cess_by_arm(runs: list[RunRow], cess: dict[str, CessRow]) -> Table:
    """Per card, arm, model, harness and search cell: Opened Mean and CESS (point estimates; intervals
    counted). Cells of a 2x2 search design are different policies and are never averaged together."""
    groups: dict[tuple, list[RunRow]] = {}
    for r in finished_runs(runs).values():
        groups.setdefault((r.card_id, r.arm, r.model, r.harness, r.search_cell), []).append(r)
    rows = []
    for key, rs in sorted(groups.items()):
        got = [cess[r.run_id] for r in rs if r.run_id in cess]
        points = [c.estimate for c in got if c.estimate is not None]
        ivs = [(c.interval_low, c.interval_high) for c in got
               if c.estimate is None and c.interval_low is not None and c.interval_high is not None]
        rows.append(list(key) + [len(rs), len(got), _r(mean(c.opened_mean for c in got)) if got else None,
                                 len(points), _r(mean(points)) if points else None, len(ivs),
                                 _r(mean(low for low, _ in ivs)) if ivs else None,
                                 _r(mean(high for _, high in ivs)) if ivs else None])
    has_data = any(r[6] for r in rows)
    return Table(
        name="cess_by_arm", title="Opened Mean and CESS per arm (different estimands)",
        note="runs: finished runs of the cell; with_cess: runs with a CESS row. cess_mean averages point "
             "estimates only; runs where the support interval applies are counted in interval_runs with mean "
             "bounds. Opened Mean = what was opened; CESS = the searchable pool.",
        columns=["card_id", "arm", "model", "harness", "search_cell", "runs", "with_cess", "opened_mean", "cess_points",
                 "cess_mean", "interval_runs", "interval_low_mean", "interval_high_mean"],
        rows=rows if has_data else [], computed_by="draligned.analysis.cess_side.cess_by_arm",
        empty_reason=None if has_data else "no run in this archive searched a candidate pool (no rows in cess_runs)")


def cess_by_pair(pairs: list[Pair], cess: dict[str, CessRow], cfg: Cess) -> Table:
    """Per comparison and search cell: Opened Mean difference next to the CESS difference, with
    cluster-bootstrap CIs."""
    by_comp: dict[tuple[str, str], list[tuple[Pair, CessRow, CessRow]]] = {}
    for p in pairs:
        if p.run_a and p.run_b and p.run_a.run_id in cess and p.run_b.run_id in cess:
            arms = (cess[p.run_a.run_id], cess[p.run_b.run_id])
            by_comp.setdefault((p.comparison, p.search_cell), []).append((p, *arms))
    rows = []
    for (comp, search_cell), ps in sorted(by_comp.items()):
        om = cluster_bootstrap([a.opened_mean - b.opened_mean for _, a, b in ps],
                               [cluster_of(cfg, p.card_id, p.study) for p, _, _ in ps], cfg)
        pts = [(p, a.estimate - b.estimate) for p, a, b in ps if a.estimate is not None and b.estimate is not None]
        ce = cluster_bootstrap([d for _, d in pts], [cluster_of(cfg, p.card_id, p.study) for p, _ in pts], cfg)
        rows.append([comp, search_cell, cfg.cluster, om.n, om.mean, om.low, om.high, ce.n, ce.mean, ce.low, ce.high,
                     len(ps) - len(pts)])
    level = round(cfg.confidence * 100)
    return Table(
        name="cess_by_pair",
        title=f"Arm difference A - B (comparison A-B): Opened Mean next to CESS, {level}% {cfg.cluster}-cluster "
              "bootstrap CIs",
        note=f"A comparison A-B is arm A minus arm B, as in `draligned cess pairs`. Pairs with CESS rows for both "
             f"arms; the CESS difference only over pairs where both arms have a point estimate (pairs_interval_only "
             f"counts the rest). Mean within {cfg.cluster}, then {cfg.cluster}s equally; bootstrap of whole "
             f"{cfg.cluster}s, {cfg.bootstrap} replicates, seed {cfg.seed}. The two differences are different "
             "estimands.",
        columns=["comparison", "search_cell", "cluster", "om_pairs", "opened_mean_a_minus_b", "om_low", "om_high",
                 "cess_pairs", "cess_a_minus_b", "cess_low", "cess_high", "pairs_interval_only"],
        rows=rows, computed_by="draligned.analysis.cess_side.cess_by_pair",
        empty_reason=None if rows else "no pair has CESS estimates for both arms")
