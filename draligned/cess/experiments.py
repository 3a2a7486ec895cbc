"""The CESS paper's controlled experiments on the simulator (`draligned cess simulate`).

(a) Identification (Table 5): bias of the raw sequential DR with full
correction, without selection weights and without continuation weights,
under uniform/biased selection × fixed/informative stopping.
(b) Ranking (appendix A.4): 30 documents, K = 4, supporting-first vs
opposing-first with shared pools and draws; Opened Mean gap vs raw DR gap.
(c) Limited support (appendix A.3): deterministic selection leaves few
documents reachable; the Eq. 10 interval should cover every target.
Standard errors are across pools; repeated runs of a pool are kept together.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from draligned.cess.estimators import opened_mean, sequential_dr, support_interval
from draligned.cess.simulate import Policy, SimPools, common_draws, fit_predictions, make_pools, run_search
from draligned.records import Record

# Informative stopping of the simulator: wish to stop once the mean opened evidence
# exceeds 0.5, stop with probability 0.5 (else 0.05). The paper's LLM rule (0.75/0.10)
# makes 1/s_t reach 64 at K = 4 and triples the across-pool standard errors.
_INFORMATIVE = Policy(informative_stopping=True, stop_probs=(0.5, 0.05), stop_threshold=0.5)
_BIASED = {"tilt": 1.5, "epsilon": 0.2}


class BiasRow(Record):
    """One design of the identification experiment."""

    selection: str
    """``none`` (uniform) or ``biased`` (attribute-driven with query drift)."""
    stopping: str
    """``none`` (fixed K) or ``informative`` (depends on opened evidence)."""
    full: float
    """Mean bias of the raw DR with both weights."""
    full_se: float
    """Standard error of ``full`` across pools."""
    no_selection_weights: float
    """Mean bias with p_t replaced by 1/N."""
    no_selection_weights_se: float
    """Standard error across pools."""
    no_continuation_weights: float
    """Mean bias with s_t replaced by 1."""
    no_continuation_weights_se: float
    """Standard error across pools."""


class RankingRow(Record):
    """One estimator in the ranking experiment."""

    estimator: str
    """``opened_mean`` or ``dr_raw``."""
    mean_pro: float
    """Mean estimate under supporting-first ranking."""
    mean_anti: float
    """Mean estimate under opposing-first ranking."""
    gap: float
    """Ranking gap |mean_pro − mean_anti| (appendix A.4)."""
    gap_se: float
    """Standard error of the paired difference across pools."""
    mae: float
    """Mean absolute error against θ* over both rankings."""


class SupportSummary(Record):
    """The limited-support experiment."""

    n_targets: int
    """Number of simulated pool targets."""
    reachable_share: float
    """Mean |D+| / N."""
    coverage: float
    """Share of targets inside their Eq. 10 interval."""
    mean_width: float
    """Mean interval width 2ρ."""
    mean_width_se: float
    """Standard error of the width across pools."""
    opened_mean_mae: float
    """MAE of the Opened Mean for contrast (a point estimate the interval replaces)."""


class SimulationReport(Record):
    """Everything `draligned cess simulate` prints."""

    seed: int
    """Master seed."""
    identification_pools: int
    """Pools in (a) (each with ``identification_runs`` runs)."""
    identification_runs: int
    """Runs per pool in (a)."""
    ranking_pools: int
    """Paired pools in (b)."""
    support_pools: int
    """Pools in (c)."""
    identification: list[BiasRow]
    """(a) Table 5 pattern."""
    ranking: list[RankingRow]
    """(b) A.4 ranking experiment."""
    support: SupportSummary
    """(c) limited support."""
    seconds: float
    """Wall time of the whole simulation."""


def _mean_se(per_pool: np.ndarray) -> tuple[float, float]:
    return float(per_pool.mean()), float(per_pool.std(ddof=1) / np.sqrt(len(per_pool)))


def identification(
    rng: np.random.Generator,
    tuning: SimPools,
    n_pools: int,
    n_runs: int = 12,
    n_docs: int = 30,
    budget: int = 6,
) -> list[BiasRow]:
    """(a) Remove one probability correction at a time under each selection × stopping design."""
    pools = make_pools(rng, n_pools, n_docs)
    predictions = fit_predictions(tuning, pools)
    draws = common_draws(rng, n_pools, n_runs, budget)
    theta = np.repeat(pools.theta_star, n_runs)
    rows = []
    for sel_name, selection in (("none", {"selection": "uniform"}), ("biased", _BIASED)):
        for stop_name, informative in (("none", False), ("informative", True)):
            policy = replace(_INFORMATIVE, informative_stopping=informative, **selection)
            batch = run_search(pools, policy, draws, predictions)
            stats = [
                _mean_se((sequential_dr(batch, **flags) - theta).reshape(n_pools, n_runs).mean(axis=1))
                for flags in ({}, {"selection": False}, {"continuation": False})
            ]
            rows.append(
                BiasRow(
                    selection=sel_name,
                    stopping=stop_name,
                    full=stats[0][0],
                    full_se=stats[0][1],
                    no_selection_weights=stats[1][0],
                    no_selection_weights_se=stats[1][1],
                    no_continuation_weights=stats[2][0],
                    no_continuation_weights_se=stats[2][1],
                )
            )
    return rows


def ranking(
    rng: np.random.Generator,
    tuning: SimPools,
    n_pools: int,
    n_docs: int = 30,
    budget: int = 4,
    strength: float = 1.4,
) -> list[RankingRow]:
    """(b) Supporting-first vs opposing-first on the same pools with the same draws."""
    pools = make_pools(rng, n_pools, n_docs)
    predictions = fit_predictions(tuning, pools)
    draws = common_draws(rng, n_pools, 1, budget)
    batches = {
        name: run_search(pools, replace(_INFORMATIVE, tilt=sign * strength), draws, predictions)
        for name, sign in (("pro", 1.0), ("anti", -1.0))
    }
    rows = []
    for name, estimator in (("opened_mean", opened_mean), ("dr_raw", sequential_dr)):
        pro, anti = estimator(batches["pro"]), estimator(batches["anti"])
        diff_mean, diff_se = _mean_se(pro - anti)
        mae = float(np.mean(np.abs(np.r_[pro, anti] - np.r_[pools.theta_star, pools.theta_star])))
        rows.append(
            RankingRow(
                estimator=name,
                mean_pro=float(pro.mean()),
                mean_anti=float(anti.mean()),
                gap=abs(diff_mean),
                gap_se=diff_se,
                mae=mae,
            )
        )
    return rows


def limited_support(
    rng: np.random.Generator, tuning: SimPools, n_pools: int, n_docs: int = 110, budget: int = 4
) -> SupportSummary:
    """(c) Deterministic selection; Eq. 10 intervals instead of point estimates.

    Every reachable document is opened, so θ+ is known exactly and the interval
    covers every target by construction (see :class:`SupportBounds`).
    """
    pools = make_pools(rng, n_pools, n_docs)
    draws = common_draws(rng, n_pools, 1, budget)
    policy = Policy(selection="deterministic", tilt=1.5, repetition_penalty=1e6)
    batch = run_search(pools, policy, draws, fit_predictions(tuning, pools))
    bounds = support_interval(batch)
    theta = pools.theta_star
    width = bounds.upper - bounds.lower
    covered = (bounds.lower <= theta) & (theta <= bounds.upper)
    mean_width, width_se = _mean_se(width)
    return SupportSummary(
        n_targets=n_pools,
        reachable_share=float((bounds.n_reachable / n_docs).mean()),
        coverage=float(covered.mean()),
        mean_width=mean_width,
        mean_width_se=width_se,
        opened_mean_mae=float(np.abs(opened_mean(batch) - theta).mean()),
    )


def simulate(seed: int = 0, pools: int | None = None) -> SimulationReport:
    """Run (a), (b) and (c); ``pools`` overrides the paper's sizes (500 × 12 runs, 8,000, 16,000)."""
    start = time.perf_counter()
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    tuning = make_pools(streams[0], 400, 30)
    sizes = (pools or 500, pools or 8000, pools or 16000)
    runs = 12
    return SimulationReport(
        seed=seed,
        identification_pools=sizes[0],
        identification_runs=runs,
        ranking_pools=sizes[1],
        support_pools=sizes[2],
        identification=identification(streams[1], tuning, sizes[0], runs),
        ranking=ranking(streams[2], tuning, sizes[1]),
        support=limited_support(streams[3], tuning, sizes[2]),
        seconds=time.perf_counter() - start,
    )
