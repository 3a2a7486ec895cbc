"""Estimators: exact hand-computed cases, design unbiasedness by enumeration, clipping order, intervals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimators import (
    cess_clip_then_shrink,
    cess_opened_anchor,
    cess_shrink_then_clip,
    estimate,
    sequential_dr,
    sequential_ipw,
    support_interval,
    trajectory_estimates,
)
from draligned.cess.trajectory import Trajectory

Y = [1.0, -1.0, 0.5, 0.0]
M = [0.5, 0.0, 0.0, 0.0]  # m̄ = 0.125 = θ*


def _traj(
    rounds: list[tuple[list[float], str, float]], budget: int = 2, m: list[float] | None = M
) -> Trajectory:
    return Trajectory.model_validate(
        {
            "trajectory_id": "t",
            "task_id": "q",
            "ranking": None,
            "budget": budget,
            "pool": {"doc_ids": ["d0", "d1", "d2", "d3"], "y": Y, "m": m},
            "rounds": [{"probs": p, "chosen": c, "stop_prob": s} for p, c, s in rounds],
        }
    )


R1 = ([0.4, 0.3, 0.2, 0.1], "d0", 0.0)


def _est(traj: Trajectory, lam: float = 0.5):
    return estimate(TrajectoryBatch.from_trajectories([traj]), lam)


def test_fixed_stopping_by_hand() -> None:
    # DR = 0.125 + (1/2)[(1 − 0.5)/(4·0.4) + (−1 − 0)/(4·0.5)] = 0.125 + 0.5(0.3125 − 0.5)
    est = _est(_traj([R1, ([0.1, 0.5, 0.2, 0.2], "d1", 0.0)]))
    assert est.dr_raw[0] == pytest.approx(0.03125, abs=1e-15)
    assert est.ipw_raw[0] == pytest.approx(0.5 * (1 / 1.6 - 1 / 2.0), abs=1e-15)
    assert est.opened_mean[0] == 0.0
    assert est.outcome_regression[0] == 0.125
    assert est.theta_star[0] == 0.125
    assert est.cess[0] == pytest.approx(0.125 + 0.5 * (0.03125 - 0.125))
    assert est.cess_clip_then_shrink[0] == pytest.approx(0.078125)
    assert est.cess_opened_anchor[0] == pytest.approx(0.015625)
    assert est.weights.ess[0] == pytest.approx(1.125**2 / (0.625**2 + 0.5**2))
    assert est.weights.max_weight[0] == 0.625
    assert not est.support.applies[0]


def test_adaptive_stopping_by_hand() -> None:
    # c_2 = 0.2 → s_2 = 0.8: second weight 1/(4·0.5·0.8) = 0.625
    est = _est(_traj([R1, ([0.1, 0.5, 0.2, 0.2], "d1", 0.2)]))
    assert est.dr_raw[0] == pytest.approx(0.125 + 0.5 * (0.3125 - 0.625), abs=1e-15)
    assert est.ipw_raw[0] == pytest.approx(0.0, abs=1e-15)
    assert est.weights.ess[0] == pytest.approx(2.0)


def test_repeated_selection_counts_each_round() -> None:
    est = _est(_traj([R1, ([0.5, 0.2, 0.2, 0.1], "d0", 0.0)]))
    assert est.opened_mean[0] == 1.0
    assert est.dr_raw[0] == pytest.approx(0.125 + 0.5 * (0.5 / 1.6 + 0.5 / 2.0), abs=1e-15)


def test_fewer_rounds_than_budget_still_divides_by_k() -> None:
    est = _est(_traj([R1, ([0.1, 0.5, 0.2, 0.2], "d1", 0.2)], budget=3))
    assert est.dr_raw[0] == pytest.approx(0.125 + (0.3125 - 0.625) / 3, abs=1e-15)
    assert est.opened_mean[0] == 0.0


def test_missing_predictions_mean_ipw() -> None:
    est = _est(_traj([R1, ([0.1, 0.5, 0.2, 0.2], "d1", 0.0)], m=None))
    assert est.dr_raw[0] == pytest.approx(est.ipw_raw[0])
    assert est.outcome_regression[0] == 0.0


def test_padding_does_not_change_estimates() -> None:
    short = _traj([R1], budget=1)
    long = _traj([R1, ([0.1, 0.5, 0.2, 0.2], "d1", 0.2)], budget=3)
    together = estimate(TrajectoryBatch.from_trajectories([short, long]), 0.5)
    for i, traj in enumerate((short, long)):
        alone = _est(traj)
        assert together.dr_raw[i] == pytest.approx(alone.dr_raw[0], abs=1e-15)
        assert together.weights.ess[i] == pytest.approx(alone.weights.ess[0])


def test_clipping_order() -> None:
    dr, mbar, opened = np.array([3.0]), np.array([0.2]), np.array([0.4])
    assert cess_shrink_then_clip(dr, mbar, 0.5)[0] == 1.0  # Π[0.2 + 0.5·2.8] = Π[1.6]
    assert cess_clip_then_shrink(dr, mbar, 0.5)[0] == pytest.approx(0.6)  # 0.2 + 0.5·(1 − 0.2)
    assert cess_opened_anchor(dr, opened, 0.5)[0] == pytest.approx(0.7)  # 0.4 + 0.5·(1 − 0.4)
    assert cess_shrink_then_clip(dr, mbar, 0.0)[0] == pytest.approx(0.2)
    assert cess_clip_then_shrink(np.array([-5.0]), mbar, 1.0)[0] == -1.0


def test_lambda_outside_unit_interval_is_rejected() -> None:
    with pytest.raises(ValueError):
        _est(_traj([R1]), lam=1.5)


def _enumerate_policy(y: np.ndarray, m: np.ndarray, budget: int) -> tuple[TrajectoryBatch, np.ndarray]:
    """Every trajectory of a small adaptive policy with its probability.

    Selection depends on the previous document; stopping depends on the evidence seen.
    """
    first = np.array([0.5, 0.3, 0.2])
    after = np.array([[0.6, 0.1, 0.3], [0.2, 0.2, 0.6], [0.1, 0.7, 0.2]])

    def stop_prob(history: tuple[int, ...]) -> float:
        return 0.3 if y[list(history)].mean() > 0 else 0.1

    rows, probs = [], []
    for length in range(1, budget + 1):
        for history in itertools.product(range(3), repeat=length):
            prob, p_chosen, stops = 1.0, [], []
            for t, j in enumerate(history):
                c = 0.0 if t == 0 else stop_prob(history[:t])
                p = (first if t == 0 else after[history[t - 1]])[j]
                prob *= (1 - c) * p
                p_chosen.append(p)
                stops.append(c)
            if length < budget:
                prob *= stop_prob(history)
            rows.append((history, p_chosen, stops))
            probs.append(prob)
    b, k, n = len(rows), budget, len(y)
    chosen, pp, stop, mask = np.zeros((b, k), int), np.ones((b, k)), np.zeros((b, k)), np.zeros((b, k), bool)
    for r, (history, p_chosen, stops) in enumerate(rows):
        t = len(history)
        chosen[r, :t], pp[r, :t], stop[r, :t], mask[r, :t] = history, p_chosen, stops, True
    batch = TrajectoryBatch(
        chosen=chosen,
        y=np.where(mask, y[chosen], 0.0),
        p=pp,
        stop=stop,
        mask=mask,
        budget=np.full(b, k),
        doc_m=np.tile(m, (b, 1)),
        doc_y=np.tile(y, (b, 1)),
        doc_mask=np.ones((b, n), bool),
        first_support=np.zeros((b, n), int),
        full_support=np.ones((b, k), bool),
    )
    return batch, np.array(probs)


def test_raw_dr_is_exactly_unbiased_by_enumeration() -> None:
    y = np.array([1.0, -0.5, 0.2])
    m = np.array([0.0, 0.9, -0.7])  # badly misspecified
    batch, probs = _enumerate_policy(y, m, budget=3)
    assert probs.sum() == pytest.approx(1.0, abs=1e-15)
    theta = y.mean()
    assert abs(probs @ sequential_dr(batch) - theta) < 1e-12
    assert abs(probs @ sequential_ipw(batch) - theta) < 1e-12
    # Removing either correction biases the estimator under this adaptive policy.
    assert abs(probs @ sequential_dr(batch, selection=False) - theta) > 1e-3
    assert abs(probs @ sequential_dr(batch, continuation=False) - theta) > 1e-3


def _limited(y_outside: float) -> TrajectoryBatch:
    traj = Trajectory.model_validate(
        {
            "trajectory_id": "t",
            "task_id": "q",
            "budget": 1,
            "pool": {
                "doc_ids": ["a", "b", "c", "d"],
                "y": [0.4, -0.2, y_outside, y_outside],
                "m": [0.4, -0.2, 0, 0],
            },
            "rounds": [{"probs": [0.5, 0.5, 0.0, 0.0], "chosen": "a", "stop_prob": 0.0}],
        }
    )
    return TrajectoryBatch.from_trajectories([traj])


@pytest.mark.parametrize("y_outside", [-1.0, 1.0, 0.3])
def test_support_interval_bounds_unopened_documents(y_outside: float) -> None:
    batch = _limited(y_outside)
    bounds = support_interval(batch)
    assert bounds.applies[0] and bounds.n_reachable[0] == 2 and bounds.n_opened[0] == 1
    assert bounds.rho[0] == 0.5
    # b was reachable but not opened: its Y is only known to lie in [-1, 1], so the interval is
    # Eq. 10 widened from 2ρ = 1 to 2 · 3/4: (0.4 -/+ 3) / 4.
    assert (bounds.lower[0], bounds.upper[0]) == pytest.approx((-0.65, 0.85))
    theta = batch.theta_star[0]
    assert bounds.lower[0] - 1e-12 <= theta <= bounds.upper[0] + 1e-12


def test_point_estimates_are_withheld_where_the_interval_applies() -> None:
    traj = Trajectory.model_validate(
        {
            "trajectory_id": "t",
            "task_id": "q",
            "budget": 1,
            "pool": {"doc_ids": ["a", "b"], "y": [0.4, -0.2]},
            "rounds": [{"probs": [1.0, 0.0], "chosen": "a", "stop_prob": 0.0}],
        }
    )
    full = _traj([R1])
    limited, ok = trajectory_estimates([traj, full], 0.5)
    assert limited.support_interval == pytest.approx((0.5 * 0.4 - 0.5, 0.5 * 0.4 + 0.5))  # θ+ = 0.4 exactly
    assert limited.dr_raw is None and limited.cess is None and limited.ipw_raw is None
    assert limited.cess_clip_then_shrink is None and limited.cess_opened_anchor is None
    assert limited.opened_mean == 0.4
    assert ok.support_interval is None and ok.dr_raw is not None
