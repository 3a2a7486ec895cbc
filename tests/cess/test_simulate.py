"""The simulator and the paper's controlled experiments at small size."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from draligned.cess.experiments import simulate
from draligned.cess.simulate import Policy, common_draws, fit_predictions, make_pools, run_search


def test_paired_conditions_share_draws() -> None:
    rng = np.random.default_rng(0)
    pools = make_pools(rng, 20, 30)
    draws = common_draws(rng, 20, 3, 4)
    m = fit_predictions(pools, pools)
    base = Policy(informative_stopping=True)
    a, b = run_search(pools, base, draws, m), run_search(pools, replace(base, tilt=0.0), draws, m)
    assert np.array_equal(a.chosen, b.chosen) and np.array_equal(a.mask, b.mask)
    pro = run_search(pools, replace(base, tilt=1.5), draws, m)
    anti = run_search(pools, replace(base, tilt=-1.5), draws, m)
    assert pro.y[pro.mask].mean() > anti.y[anti.mask].mean()
    other = run_search(pools, base, common_draws(np.random.default_rng(1), 20, 3, 4), m)
    assert not np.array_equal(other.chosen, a.chosen)


def test_logged_probabilities_match_the_rounds() -> None:
    rng = np.random.default_rng(1)
    pools = make_pools(rng, 10, 30)
    batch = run_search(
        pools, Policy(informative_stopping=True), common_draws(rng, 10, 4, 5), np.zeros((10, 30))
    )
    assert np.all(batch.p[batch.mask] > 0) and np.all(batch.p[batch.mask] <= 1)
    assert np.all(batch.stop[:, 0] == 0)
    assert np.all(batch.mask[:, 0]) and np.all(batch.mask[:, :-1] >= batch.mask[:, 1:])
    assert batch.reachable.all()  # ε > 0: every document has positive probability


def test_simulation_reproduces_the_paper_pattern() -> None:
    report = simulate(seed=0, pools=500)
    rows = {(r.selection, r.stopping): r for r in report.identification}
    for row in rows.values():
        assert abs(row.full) < 3 * row.full_se
    for design in (("biased", "none"), ("biased", "informative")):
        row = rows[design]
        assert row.no_selection_weights > 4 * row.no_selection_weights_se
    for design in (("none", "informative"), ("biased", "informative")):
        row = rows[design]
        assert -row.no_continuation_weights > 3 * row.no_continuation_weights_se
    none = rows[("none", "none")]
    assert none.no_selection_weights == none.full == none.no_continuation_weights
    ranking = {r.estimator: r for r in report.ranking}
    assert ranking["opened_mean"].gap > 0.5
    assert ranking["dr_raw"].gap < 3 * ranking["dr_raw"].gap_se + 0.02
    assert report.support.coverage == 1.0
    assert report.support.reachable_share < 0.05
    assert report.seconds < 30
