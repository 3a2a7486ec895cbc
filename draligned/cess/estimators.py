"""CESS pool-target estimators, vectorized over a :class:`TrajectoryBatch`.

All follow the CESS paper (section 3, appendix A.2): Opened Mean, Outcome
Regression m̄, sequential IPW (m ≡ 0), sequential DR raw (Eq. 6, always / K),
CESS shrink-then-clip (Eq. 9), clip-then-shrink (Eq. 13), the Opened-Mean
anchored variant (Eq. 12), weight diagnostics, and the support interval
(Eq. 10) that replaces the point estimates when some document has probability 0
in some round (Assumption 1 fails).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimates import (
    SCORE_RANGE,
    Estimates,
    SupportBounds,
    WeightDiagnostics,
    cess_clip_then_shrink,
    cess_opened_anchor,
    cess_shrink_then_clip,
)
from draligned.cess.trajectory import Trajectory
from draligned.records import Record


def importance_weights(
    batch: TrajectoryBatch,
    *,
    selection: bool = True,
    continuation: bool = True,
    n_docs: np.ndarray | None = None,
) -> np.ndarray:
    """(B, K) weights 1 / (N p_t s_t) of observed rounds, 0 elsewhere.

    ``selection=False`` substitutes p_t = 1/N and ``continuation=False`` sets
    s_t = 1 (the ablations of Table 5 and Eq. 17); ``n_docs`` replaces N (support interval).
    """
    n = (batch.n_docs if n_docs is None else n_docs)[:, None].astype(float)
    p = batch.p if selection else 1.0 / n
    s = batch.reach if continuation else 1.0
    return np.where(batch.mask, 1.0 / (n * p * s), 0.0)


def opened_mean(batch: TrajectoryBatch) -> np.ndarray:
    """Mean of Y over the T selections, repeats counted (A.2, θ̂_naive)."""
    return np.where(batch.mask, batch.y, 0.0).sum(axis=1) / batch.n_rounds


def outcome_regression(batch: TrajectoryBatch) -> np.ndarray:
    """Full-pool mean prediction m̄ (ignores what was opened)."""
    return batch.mbar


def sequential_dr(batch: TrajectoryBatch, *, selection: bool = True, continuation: bool = True) -> np.ndarray:
    """Raw sequential doubly robust estimate (Eq. 6): m̄ + (1/K) Σ_t (Y − m) / (N p_t s_t)."""
    w = importance_weights(batch, selection=selection, continuation=continuation)
    return batch.mbar + (w * (batch.y - batch.m)).sum(axis=1) / batch.budget


def sequential_ipw(
    batch: TrajectoryBatch, *, selection: bool = True, continuation: bool = True
) -> np.ndarray:
    """Sequential IPW: Eq. 6 with m ≡ 0."""
    no_model = batch.with_predictions(np.zeros_like(batch.doc_m))
    return sequential_dr(no_model, selection=selection, continuation=continuation)


def weight_diagnostics(batch: TrajectoryBatch) -> WeightDiagnostics:
    """ESS and largest weight of each trajectory."""
    w = importance_weights(batch)
    return WeightDiagnostics(ess=w.sum(axis=1) ** 2 / (w**2).sum(axis=1), max_weight=w.max(axis=1))


def support_interval(batch: TrajectoryBatch, bounds: tuple[float, float] = SCORE_RANGE) -> SupportBounds:
    """The support interval (Eq. 10) from the opened documents' scores (see :class:`SupportBounds`)."""
    n = batch.n_docs.astype(float)
    n_plus = batch.reachable.sum(axis=1)
    n_opened = batch.opened.sum(axis=1)
    known, unknown = batch.opened_y_sum, n - n_opened
    return SupportBounds(
        applies=batch.round_varying_support,
        rho=1.0 - n_plus / n,
        n_reachable=n_plus,
        n_opened=n_opened,
        lower=(known + unknown * bounds[0]) / n,
        upper=(known + unknown * bounds[1]) / n,
    )


def estimate(batch: TrajectoryBatch, lam: float) -> Estimates:
    """All estimators with shrinkage coefficient λ for the three CESS variants."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    dr = sequential_dr(batch)
    opened = opened_mean(batch)
    return Estimates(
        opened_mean=opened,
        outcome_regression=outcome_regression(batch),
        ipw_raw=sequential_ipw(batch),
        dr_raw=dr,
        cess=cess_shrink_then_clip(dr, batch.mbar, lam),
        cess_clip_then_shrink=cess_clip_then_shrink(dr, batch.mbar, lam),
        cess_opened_anchor=cess_opened_anchor(dr, opened, lam),
        weights=weight_diagnostics(batch),
        theta_star=batch.theta_star,
        support=support_interval(batch),
    )


class PoolEstimates(Record):
    """One trajectory's estimators and weight diagnostics, as `cess estimate` reports them and as
    the ``cess_runs`` table stores them; None marks a point estimate hidden by the support interval."""

    opened_mean: float
    """Mean Y over the T selections (repeats counted); describes what was read, not the pool."""
    outcome_regression: float
    """Full-pool mean prediction m̄ (0 when no predictions were logged)."""
    ipw_raw: float | None
    """Sequential IPW (Eq. 6 with m ≡ 0); None where the support interval applies."""
    dr_raw: float | None
    """Raw sequential DR (Eq. 6); None where the support interval applies."""
    cess: float | None
    """CESS shrink-then-clip (Eq. 9) with the given λ; None where the support interval applies."""
    cess_clip_then_shrink: float | None
    """CESS clip-then-shrink (Eq. 13); None where the support interval applies."""
    cess_opened_anchor: float | None
    """CESS anchored at the Opened Mean (Eq. 12); None where the support interval applies."""
    ess: float
    """Kish effective sample size of the weights 1/(N p_t s_t)."""
    max_weight: float
    """Largest weight 1/(N p_t s_t)."""
    theta_star: float | None
    """Pool target θ* (Eq. 1) when every document's Y is logged."""


class _TrajectoryIdentity(Record):
    """Which trajectory a report is about."""

    trajectory_id: str
    """Id of the trajectory."""
    task_id: str
    """Task whose pool was searched."""
    rounds: int
    """Observed rounds T."""


class TrajectoryEstimate(PoolEstimates, _TrajectoryIdentity):
    """The report of `draligned cess estimate` for one trajectory.

    pydantic orders inherited fields from the last base to the first, so the report reads
    identity, estimates, then the support interval.
    """

    support_interval: tuple[float, float] | None
    """[lower, upper] of Eq. 10 when some document had probability 0 in some round, else None."""


def trajectory_estimates(trajectories: Sequence[Trajectory], lam: float) -> list[TrajectoryEstimate]:
    """Per-trajectory reports: point estimates, or the support interval where it applies."""
    if not trajectories:
        return []
    est = estimate(TrajectoryBatch.from_trajectories(trajectories), lam)
    hidden = est.support.applies
    points = {
        name: [None if hide else float(v) for v, hide in zip(getattr(est, name), hidden, strict=True)]
        for name in ("ipw_raw", "dr_raw", "cess", "cess_clip_then_shrink", "cess_opened_anchor")
    }
    return [
        TrajectoryEstimate(
            trajectory_id=traj.trajectory_id,
            task_id=traj.task_id,
            rounds=len(traj.rounds),
            opened_mean=float(est.opened_mean[i]),
            outcome_regression=float(est.outcome_regression[i]),
            **{name: values[i] for name, values in points.items()},
            ess=float(est.weights.ess[i]),
            max_weight=float(est.weights.max_weight[i]),
            theta_star=None if np.isnan(est.theta_star[i]) else float(est.theta_star[i]),
            support_interval=(float(est.support.lower[i]), float(est.support.upper[i]))
            if hidden[i]
            else None,
        )
        for i, traj in enumerate(trajectories)
    ]
