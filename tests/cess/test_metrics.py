"""Appendix F metrics, intervention effects, ICC, and the cluster bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from draligned.cess.metrics import (
    bootstrap_ci,
    bootstrap_means,
    direction,
    direction_error,
    icc1k,
    intervention_effects,
    mae,
    per_question_sensitivity,
    rmse,
    within_question_bias,
    worst_ranking_mae,
)

# Question 1 has three runs, question 2 one: question-first averaging differs from pooling runs.
EST = np.array([0.5, 0.1, 0.3, -0.4])
TARGET = np.array([0.0, 0.0, 0.0, -0.2])
Q = np.array([1, 1, 1, 2])


def test_mae_averages_within_question_first() -> None:
    assert mae(EST, TARGET, Q) == pytest.approx((0.9 / 3 + 0.2) / 2)
    assert mae(EST, TARGET, Q) != pytest.approx(np.abs(EST - TARGET).mean())


def test_rmse_and_bias() -> None:
    assert rmse(EST, TARGET, Q) == pytest.approx(np.sqrt(((0.25 + 0.01 + 0.09) / 3 + 0.04) / 2))
    signed = np.array([0.5, -0.5, 0.3, -0.4])
    assert within_question_bias(signed, TARGET, Q) == pytest.approx((0.1 + 0.2) / 2)


def test_direction_error_thresholds() -> None:
    assert list(direction(np.array([0.06, 0.05, -0.05, -0.051]))) == [1, 0, 0, -1]
    est, target, q = np.array([0.2, 0.0, -0.3, 0.3]), np.array([0.1, 0.1, 0.1, 0.04]), np.array([1, 1, 1, 2])
    assert direction_error(est, target, q) == pytest.approx((2 / 3 + 1) / 2)


def ranking_sensitivity(est: np.ndarray, q: np.ndarray, c: np.ndarray, r: np.ndarray) -> float:
    """S of Eq. 16 as the bench reports it: the mean over questions of the per-question summands."""
    return float(per_question_sensitivity(est, q, c, r).mean())


def test_ranking_sensitivity_averages_runs_before_comparing() -> None:
    # One question, one configuration, two runs per ranking: pro = {0.4, 0.0}, anti = {0.0, 0.4}.
    est = np.array([0.4, 0.0, 0.0, 0.4])
    q, c = np.zeros(4, int), np.array(["x"] * 4)
    r = np.array(["pro", "pro", "anti", "anti"])
    assert ranking_sensitivity(est, q, c, r) == 0.0  # runs-averaged; pairwise would give 0.4
    # Two questions with two configurations each: S = mean_q mean_c |pro − anti|.
    est = np.array([0.5, 0.1, 0.2, 0.2, 0.0, -0.6, 0.3, 0.1])
    q = np.array([1, 1, 1, 1, 2, 2, 2, 2])
    c = np.array(["a", "a", "b", "b", "a", "a", "b", "b"])
    r = np.array(["pro", "anti"] * 4)
    assert ranking_sensitivity(est, q, c, r) == pytest.approx(((0.4 + 0.0) / 2 + (0.6 + 0.2) / 2) / 2)


def test_ranking_sensitivity_needs_both_rankings() -> None:
    with pytest.raises(ValueError):
        ranking_sensitivity(np.zeros(2), np.array([1, 2]), np.array(["a", "a"]), np.array(["pro", "anti"]))


def test_worst_ranking_mae() -> None:
    est, target = np.array([0.5, 0.1, 0.0, 0.2]), np.zeros(4)
    q, r = np.array([1, 1, 2, 2]), np.array(["pro", "anti", "pro", "anti"])
    assert worst_ranking_mae(est, target, q, r) == pytest.approx(max((0.5 + 0.0) / 2, (0.1 + 0.2) / 2))


def test_intervention_effects_decompose_the_total() -> None:
    t00, t10, t01, t11 = np.array([0.1]), np.array([0.4]), np.array([0.0]), np.array([0.6])
    eff = intervention_effects(t00, t10, t01, t11)
    assert eff.selection[0] == pytest.approx(0.3)
    assert eff.stopping[0] == pytest.approx(-0.1)
    assert eff.interaction[0] == pytest.approx(0.6 - 0.4 - 0.0 + 0.1)
    assert eff.selection[0] + eff.stopping[0] + eff.interaction[0] == pytest.approx(eff.total[0])


def test_icc1k_by_hand() -> None:
    # Row means 1.5, 3.5, 5.5: MSB = 2·8/2 = 8, MSW = 1.5/3 = 0.5, ICC(1,2) = 7.5/8.
    assert icc1k(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])) == pytest.approx(0.9375)
    noise = np.random.default_rng(0).normal(size=(200, 3))
    assert abs(icc1k(noise)) < 0.2


def test_bootstrap_is_deterministic_and_resamples_questions() -> None:
    values = np.random.default_rng(2).normal(0.3, 1.0, size=50)
    first, second = bootstrap_ci(values), bootstrap_ci(values)
    assert first == second
    assert first.estimate == pytest.approx(values.mean())
    assert first.lower < first.estimate < first.upper
    assert bootstrap_ci(values, seed=1) != first
    boot = bootstrap_means(np.c_[values, 2 * values], n_resamples=300)
    assert boot.shape == (300, 2) and np.allclose(boot[:, 1], 2 * boot[:, 0])
    # Width is close to the normal approximation 2·1.96·sd/√Q.
    width = first.upper - first.lower
    assert width == pytest.approx(2 * 1.96 * values.std(ddof=1) / np.sqrt(50), rel=0.15)
