"""λ tuning on tuning batches and the outcome models (closed-form ridge, cross-fitting)."""

from __future__ import annotations

import numpy as np
import pytest

from draligned.cess.outcome import ConstantModel, cross_fit_ridge, ridge_fit, ridge_path
from draligned.cess.simulate import Policy, common_draws, make_pools, run_search
from draligned.cess.tuning import LAMBDA_GRID, shrink_to_tuning_mean, tune_alpha, tune_lambda


def test_grid() -> None:
    assert len(LAMBDA_GRID) == 21 and LAMBDA_GRID[1] == 0.05 and LAMBDA_GRID[-1] == 1.0


def _uniform_batch(budget: int, predictions: float | None):
    rng = np.random.default_rng(3)
    pools = make_pools(rng, 60, 30)
    m = (
        pools.y.mean(axis=1, keepdims=True).repeat(30, axis=1)
        if predictions is None
        else np.full((60, 30), predictions)
    )
    batch = run_search(pools, Policy(selection="uniform"), common_draws(rng, 60, 2, budget), m)
    return batch, np.repeat(np.arange(60), 2)


def test_lambda_follows_the_better_source() -> None:
    # Long uniform searches make the correction precise while m̄ = 0.8 is wrong: keep all of it.
    batch, question = _uniform_batch(budget=300, predictions=0.8)
    assert tune_lambda(batch, question, "clip_then_shrink").lam == 1.0
    # One round with an oracle m̄ (every prediction = θ*): the correction only adds noise.
    batch, question = _uniform_batch(budget=1, predictions=None)
    fit = tune_lambda(batch, question, "shrink_then_clip")
    assert fit.lam == 0.0 and fit.mae[0] == pytest.approx(0.0, abs=1e-12)
    assert np.all(np.diff(fit.mae) >= -1e-12)


def test_tuning_needs_known_targets() -> None:
    batch, question = _uniform_batch(budget=2, predictions=0.0)
    doc_y = batch.doc_y.copy()
    doc_y[0, 0] = np.nan
    from dataclasses import replace

    with pytest.raises(ValueError, match="complete"):
        tune_lambda(replace(batch, doc_y=doc_y), question, "opened_anchor")


def test_ridge_closed_form() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 5))
    y = x @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + 4.0
    w, b = ridge_fit(x, y, 1e-10)
    assert np.allclose(w, [1.0, -2.0, 0.5, 0.0, 3.0]) and b == pytest.approx(4.0)
    xc, yc = x - x.mean(0), y - y.mean()
    w, _ = ridge_fit(x, y, 2.0)
    assert np.allclose(w, np.linalg.solve(xc.T @ xc + 2.0 * np.eye(5), xc.T @ yc))
    # Dual form (fewer rows than features) equals the primal solution.
    xs, ys = x[:4], y[:4]
    xsc, ysc = xs - xs.mean(0), ys - ys.mean()
    ((w_dual, b_dual),) = ridge_path(xs, ys, [0.7])
    assert np.allclose(w_dual, np.linalg.solve(xsc.T @ xsc + 0.7 * np.eye(5), xsc.T @ ysc))
    assert b_dual == pytest.approx(ys.mean() - xs.mean(0) @ w_dual)


def test_cross_fit_predictions_are_out_of_fold() -> None:
    texts = ["good strong support", "weak bad evidence", "good support again", "bad weak claim"] * 5
    y = np.array([1.0, -1.0, 1.0, -1.0] * 5)
    groups = np.repeat(np.arange(10), 2)
    fit = cross_fit_ridge(texts, y, groups, n_folds=5, alphas=(1.0,))
    changed = y.copy()
    changed[groups == 3] = -changed[groups == 3]
    refit = cross_fit_ridge(texts, changed, groups, n_folds=5, alphas=(1.0,))
    assert np.allclose(fit.out_of_fold[groups == 3], refit.out_of_fold[groups == 3])
    assert fit.model.predict(["good support"])[0] > 0 > fit.model.predict(["bad weak"])[0]
    assert ConstantModel.fit([0.2, 0.4]).predict(["a", "b"]).tolist() == pytest.approx([0.3, 0.3])


def test_alpha_of_the_shrink_to_tuning_mean_baseline() -> None:
    assert shrink_to_tuning_mean(np.array([0.8, -0.4]), 0.2, 0.75).tolist() == pytest.approx([0.35, 0.05])
    # Long uniform searches: the Opened Mean is nearly θ*, moving toward a wrong constant only hurts.
    batch, question = _uniform_batch(budget=300, predictions=0.0)
    assert tune_alpha(batch, question, 0.9).lam == 0.0
    # One round: the Opened Mean is one document's ±1-ish score; the tuning mean (here the mean θ*) helps.
    batch, question = _uniform_batch(budget=1, predictions=0.0)
    fit = tune_alpha(batch, question, float(batch.theta_star.mean()))
    assert fit.lam > 0.5 and fit.mae[int(fit.lam * 20)] == fit.mae.min()
