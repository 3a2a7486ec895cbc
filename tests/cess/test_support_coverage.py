"""The support interval covers θ* on every trajectory, by exact enumeration of small pools.

Policies give some documents probability 0 in some rounds (deterministic or partly
deterministic selection, supports that change with the history), which is where a design
estimate of θ+ restricted to D+ fails (issue 13 §2). Every trajectory the policy can produce
is enumerated; each one that reports an interval must cover θ*, and each one whose rounds all
had full support must report point estimates instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimators import trajectory_estimates
from draligned.cess.trajectory import Trajectory

N, K = 5, 3
Policy = Callable[[tuple[int, ...], np.ndarray], tuple[np.ndarray, float]]
"""(history of chosen indices, pool Y) -> (selection probabilities, stop probability c_t)."""


def _one_hot(j: int) -> np.ndarray:
    return np.eye(N)[j]


def _on(docs: list[int]) -> np.ndarray:
    p = np.zeros(N)
    p[docs] = 1.0 / len(docs)
    return p


def deterministic(history: tuple[int, ...], y: np.ndarray) -> tuple[np.ndarray, float]:
    """Argmax of a fixed preference without repeats; stops after a negative read."""
    order = [2, 0, 4, 1, 3]
    nxt = next(j for j in order if j not in history)
    return _one_hot(nxt), (0.5 if history and y[history[-1]] < 0 else 0.0) if history else 0.0


def partly_deterministic(history: tuple[int, ...], y: np.ndarray) -> tuple[np.ndarray, float]:
    """Round 1 fixed, round 2 random over two documents, round 3 depends on what was read."""
    t = len(history)
    if t == 0:
        return _one_hot(0), 0.0
    if t == 1:
        return _on([1, 2]), 0.0
    return (_one_hot(3) if y[history[-1]] > 0 else _on([3, 4])), 0.25


def varying_full_union(history: tuple[int, ...], y: np.ndarray) -> tuple[np.ndarray, float]:
    """Full support in round 1, then supports that depend on the first read (D+ can be the whole pool)."""
    t = len(history)
    if t == 0:
        return np.array([0.4, 0.3, 0.1, 0.1, 0.1]), 0.0
    if t == 1:
        return (_on([0, 1, 2]) if y[history[0]] > 0 else _on([2, 3, 4])), 0.2
    return _on([j for j in range(N) if j != history[-1]]), 0.4


def full_support(history: tuple[int, ...], y: np.ndarray) -> tuple[np.ndarray, float]:
    """Every document positive in every round: point estimates, never an interval."""
    w = np.array([1.0, 2.0, 3.0, 1.0, 0.5]) + np.bincount(list(history), minlength=N)
    return w / w.sum(), (0.0 if not history else 0.3)


def enumerate_trajectories(policy: Policy, y: np.ndarray) -> list[Trajectory]:
    """Every trajectory with positive probability, stopped ones included."""
    out: list[Trajectory] = []

    def walk(history: tuple[int, ...], rounds: list[dict]) -> None:
        if len(history) == K:
            out.append(_trajectory(len(out), rounds, y))
            return
        probs, stop = policy(history, y)
        if rounds and stop > 0:
            out.append(_trajectory(len(out), rounds, y))  # stopped before this round
        for j in np.flatnonzero(probs > 0):
            walk((*history, int(j)), [*rounds, {"probs": probs.tolist(), "chosen": f"d{j}", "stop_prob": stop}])

    walk((), [])
    return out


def _trajectory(i: int, rounds: list[dict], y: np.ndarray) -> Trajectory:
    return Trajectory.model_validate({
        "trajectory_id": f"t{i}", "task_id": "q", "budget": K,
        "pool": {"doc_ids": [f"d{j}" for j in range(N)], "y": y.tolist(), "m": [0.1] * N},
        "rounds": rounds,
    })


POOLS = [
    np.array([0.9, -1.0, 1.0, -0.4, -1.0]),
    np.array([-1.0, -1.0, -1.0, 1.0, -1.0]),
    np.array([1.0, 1.0, -0.2, 1.0, 1.0]),
    np.array([0.3, -0.7, 0.0, 0.5, -0.1]),
]
POLICIES = [deterministic, partly_deterministic, varying_full_union]


@pytest.mark.parametrize("y", POOLS, ids=[f"pool{i}" for i in range(len(POOLS))])
@pytest.mark.parametrize("policy", POLICIES, ids=[p.__name__ for p in POLICIES])
def test_every_reported_interval_covers_theta_star(policy: Policy, y: np.ndarray) -> None:
    trajectories = enumerate_trajectories(policy, y)
    reports = trajectory_estimates(trajectories, 0.5)
    theta = float(y.mean())
    intervals = [r.support_interval for r in reports if r.support_interval is not None]
    assert intervals, "these policies give some document probability 0 in some round"
    for traj, report in zip(trajectories, reports, strict=True):  # interval iff a logged round had a zero
        assert (report.support_interval is not None) == any(min(r.probs) == 0 for r in traj.rounds)
        assert (report.dr_raw is None) == (report.support_interval is not None)
    for lower, upper in intervals:
        assert lower - 1e-12 <= theta <= upper + 1e-12
        assert -1.0 <= lower <= upper <= 1.0


def test_deterministic_selection_gives_eq10_with_the_exact_theta_plus() -> None:
    y = POOLS[0]
    for traj, report in zip(trajectories := enumerate_trajectories(deterministic, y),
                            trajectory_estimates(trajectories, 0.5), strict=True):
        opened = sorted({int(r.chosen[1:]) for r in traj.rounds})
        rho = 1 - len(opened) / N  # D+ is exactly the opened set
        theta_plus = float(y[opened].mean())
        assert report.support_interval == pytest.approx(
            ((1 - rho) * theta_plus - rho, (1 - rho) * theta_plus + rho))


def test_full_support_in_every_round_keeps_point_estimates() -> None:
    reports = trajectory_estimates(enumerate_trajectories(full_support, POOLS[0]), 0.5)
    assert reports and all(r.support_interval is None and r.dr_raw is not None for r in reports)


def _restricted_dr_interval(trajectories: list[Trajectory]) -> tuple[np.ndarray, np.ndarray]:
    """The former interval: θ+ from Eq. 6 restricted to D+ (N → |D+|, m̄ → m̄ over D+)."""
    b = TrajectoryBatch.from_trajectories(trajectories)
    n_plus = b.reachable.sum(axis=1)
    mbar_plus = np.where(b.reachable, b.doc_m, 0.0).sum(axis=1) / n_plus
    w = np.where(b.mask, 1.0 / (n_plus[:, None] * b.p * b.reach), 0.0)
    theta_plus = np.clip(mbar_plus + (w * (b.y - b.m)).sum(axis=1) / b.budget, -1, 1)
    rho = 1 - n_plus / b.n_docs
    return (1 - rho) * theta_plus - rho, (1 - rho) * theta_plus + rho


def test_the_enumeration_catches_a_design_estimate_of_theta_plus() -> None:
    """The fixture discriminates: the restricted sequential DR misses θ* on some trajectories."""
    y = POOLS[1]
    lower, upper = _restricted_dr_interval(enumerate_trajectories(partly_deterministic, y))
    assert ((y.mean() < lower - 1e-9) | (y.mean() > upper + 1e-9)).any()
