"""The estimators of :mod:`draligned.cess.estimators` over :class:`TrajectoryColumns` (segment sums).

Same formulas, same results to floating-point tolerance (sums run in another order), but no padding
and no per-trajectory Python: a million trajectories of 20 documents and 10 rounds take well under a
second. ``estimate_rows`` turns the arrays into the `cess estimate` report fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from draligned.cess.columns import TrajectoryColumns
from draligned.cess.estimators import (
    SCORE_RANGE,
    Estimates,
    SupportBounds,
    WeightDiagnostics,
    cess_clip_then_shrink,
    cess_opened_anchor,
    cess_shrink_then_clip,
)


def _sums(starts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum of each segment ``values[starts[b]:starts[b + 1]]`` (segments are never empty: N, T ≥ 1)."""
    return np.add.reduceat(values.astype(float, copy=False), starts[:-1]) if len(starts) > 1 else np.zeros(0)


def reach(cols: TrajectoryColumns) -> np.ndarray:
    """(R,) s_t = Π_{k≤t} (1 − c_k), multiplied in round order as ``np.cumprod`` does (Eq. 5)."""
    s = 1.0 - cols.stop
    starts, t_obs = cols.round_start[:-1], cols.n_rounds
    for t in range(1, int(t_obs.max(initial=0))):
        idx = starts[t_obs > t] + t
        s[idx] = s[idx - 1] * s[idx]
    return s


def estimate_columns(cols: TrajectoryColumns, lam: float, bounds: tuple[float, float] = SCORE_RANGE) -> Estimates:
    """Every estimator and diagnostic of :func:`draligned.cess.estimators.estimate`, per trajectory."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    rs, ds = cols.round_start, cols.doc_start
    n, t_obs = cols.n_docs.astype(float), cols.n_rounds
    w = 1.0 / (np.repeat(n, t_obs) * cols.p * reach(cols))
    chosen_doc = cols.chosen_doc
    mbar = _sums(ds, cols.doc_m) / n
    dr = mbar + _sums(rs, w * (cols.y - cols.doc_m[chosen_doc])) / cols.budget
    opened = _sums(rs, cols.y) / t_obs
    w_sum = _sums(rs, w)
    unknown = np.isnan(cols.doc_y)
    complete = _sums(ds, unknown) == 0
    theta = np.where(complete, _sums(ds, np.where(unknown, 0.0, cols.doc_y)) / n, np.nan)
    opened_docs = np.zeros(len(cols.doc_m), bool)
    opened_docs[chosen_doc] = True
    opened_y = np.zeros(len(cols.doc_m))
    opened_y[chosen_doc] = cols.y
    n_plus = _sums(ds, cols.first_support < np.repeat(t_obs, cols.n_docs))
    n_opened = _sums(ds, opened_docs)
    known, left = _sums(ds, opened_y), n - n_opened
    return Estimates(
        opened_mean=opened,
        outcome_regression=mbar,
        ipw_raw=_sums(rs, w * cols.y) / cols.budget,
        dr_raw=dr,
        cess=cess_shrink_then_clip(dr, mbar, lam),
        cess_clip_then_shrink=cess_clip_then_shrink(dr, mbar, lam),
        cess_opened_anchor=cess_opened_anchor(dr, opened, lam),
        weights=WeightDiagnostics(ess=w_sum**2 / _sums(rs, w**2),
                                  max_weight=np.maximum.reduceat(w, rs[:-1]) if len(cols) else w),
        theta_star=theta,
        support=SupportBounds(
            applies=_sums(rs, ~cols.full_support) > 0, rho=1.0 - n_plus / n, n_reachable=n_plus,
            n_opened=n_opened, lower=(known + left * bounds[0]) / n, upper=(known + left * bounds[1]) / n),
    )


POINT_ESTIMATES = ("ipw_raw", "dr_raw", "cess", "cess_clip_then_shrink", "cess_opened_anchor")
"""Estimates hidden (None) where the support interval applies."""


def estimate_rows(cols: TrajectoryColumns, est: Estimates, batch: int = 100_000) -> Iterator[dict[str, Any]]:
    """One dict per trajectory with the fields of ``TrajectoryEstimate``, in its field order (made
    ``batch`` trajectories at a time: a million at once would hold every value as a Python float)."""
    for lo in range(0, len(cols), batch):
        part = slice(lo, lo + batch)
        hidden = est.support.applies[part].tolist()
        points = [[None if h else v for v, h in zip(getattr(est, name)[part].tolist(), hidden, strict=True)]
                  for name in POINT_ESTIMATES]
        theta = [None if v != v else v for v in est.theta_star[part].tolist()]  # NaN: some Y unknown
        columns = zip(cols.trajectory_id[part], cols.task_id[part], cols.n_rounds[part].tolist(),
                      est.opened_mean[part].tolist(), est.outcome_regression[part].tolist(), *points,
                      est.weights.ess[part].tolist(), est.weights.max_weight[part].tolist(), theta, hidden,
                      est.support.lower[part].tolist(), est.support.upper[part].tolist(), strict=True)
        for (tid, task, t, om, orr, ipw, dr, c9, c13, c12, ess, mw, th, hide, lo_, hi) in columns:
            yield {"trajectory_id": tid, "task_id": task, "rounds": t, "opened_mean": om,
                   "outcome_regression": orr, "ipw_raw": ipw, "dr_raw": dr, "cess": c9,
                   "cess_clip_then_shrink": c13, "cess_opened_anchor": c12, "ess": ess, "max_weight": mw,
                   "theta_star": th, "support_interval": [lo_, hi] if hide else None}
