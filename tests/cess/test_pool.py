"""Pool controller: probability vectors, common random numbers, stopping, logging."""

from __future__ import annotations

import json

import numpy as np
import pytest

from draligned.cess.pool import (
    CandidatePool,
    ControllerConfig,
    PoolController,
    PoolDocument,
    PoolIndex,
    crn_uniform,
    inverse_cdf,
    selection_probs,
)
from draligned.cess.trajectory import parse_trajectory

DOCS = [
    ("a", "vaccines prevent measles outbreaks in schools", 1.0),
    ("b", "vaccines cause rare side effects", -1.0),
    ("c", "school funding and class sizes", 0.5),
    ("d", "measles outbreaks were traced to unvaccinated children", 1.0),
    ("e", "mandatory vaccination limits parental choice", -1.0),
    ("f", "weather forecasts for the coming week", -0.5),
]
INDEX = PoolIndex.build(CandidatePool(documents=[PoolDocument(id=i, text=t, score=s) for i, t, s in DOCS]))
QUERY = "should vaccination against measles be compulsory"


def _probs(ranking: str = "original", counts: list[float] | None = None, **config: object) -> np.ndarray:
    c = np.zeros(len(DOCS)) if counts is None else np.array(counts, float)
    return selection_probs(INDEX, QUERY, ranking, c, ControllerConfig(**config))  # type: ignore[arg-type]


def test_probabilities_cover_the_whole_pool() -> None:
    p = _probs(epsilon=0.1)
    assert p.shape == (len(DOCS),)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p.min() >= 0.1 / len(DOCS) - 1e-15
    assert p[0] > p[5]  # relevant beats irrelevant


def test_uniform_selection() -> None:
    assert np.allclose(_probs(selection="uniform", ranking="pro"), 1 / len(DOCS))


def test_ranking_tilt_moves_mass_by_score() -> None:
    scores = np.array([s for *_, s in DOCS])
    original, pro, anti = (_probs(r) for r in ("original", "pro", "anti"))
    assert pro @ scores > original @ scores > anti @ scores


def test_ranking_needs_scores() -> None:
    index = PoolIndex.build(
        CandidatePool(documents=[PoolDocument(id="a", text="x"), PoolDocument(id="b", text="y")])
    )
    with pytest.raises(ValueError, match="score"):
        selection_probs(index, "x", "pro", np.zeros(2), ControllerConfig())


def test_repetition_penalty_and_mmr() -> None:
    fresh = _probs()
    assert _probs(counts=[2, 0, 0, 0, 0, 0])[0] < fresh[0]
    mmr_fresh = _probs(mmr_lambda=0.5, repetition_penalty=0.0)
    mmr_after_a = _probs(counts=[1, 0, 0, 0, 0, 0], mmr_lambda=0.5, repetition_penalty=0.0)
    assert mmr_after_a[3] / mmr_after_a[5] < mmr_fresh[3] / mmr_fresh[5]  # d overlaps a ("measles outbreaks")


def test_inverse_cdf_skips_zero_probability_documents() -> None:
    p = np.array([0.0, 0.25, 0.0, 0.75])
    assert [int(inverse_cdf(p, u)) for u in (0.0, 0.2499, 0.25, 0.9999)] == [1, 1, 3, 3]
    batch = np.array([p, [0.5, 0.5, 0.0, 0.0]])
    assert inverse_cdf(batch, np.array([0.3, 0.6])).tolist() == [3, 1]


def test_common_random_numbers() -> None:
    assert crn_uniform(7, 3, "select") == crn_uniform(7, 3, "select")
    draws = {crn_uniform(7, t, s) for t in range(1, 6) for s in ("select", "stop")}
    assert len(draws) == 10
    assert crn_uniform(7, 1, "select") != crn_uniform(8, 1, "select")


def _run(ranking: str, seed: int, config: ControllerConfig, wish_stop: bool = False) -> PoolController:
    ctrl = PoolController(INDEX, config, ranking=ranking, pair_seed=seed)  # type: ignore[arg-type]
    while not ctrl.done:
        if ctrl.step(QUERY, wish_stop=wish_stop) is None:
            break
    return ctrl


def test_paired_branches_share_draws() -> None:
    config = ControllerConfig(budget=5, stopping="adaptive")
    pro, anti = _run("pro", 11, config), _run("anti", 11, config)
    shared = min(len(pro.rounds), len(anti.rounds))
    assert shared >= 1
    for a, b in zip(pro.rounds, anti.rounds, strict=False):
        assert a.u_select == b.u_select and a.u_stop == b.u_stop
    assert pro.rounds[0].probs != anti.rounds[0].probs
    other = _run("pro", 12, config)
    assert other.rounds[0].u_select != pro.rounds[0].u_select
    again = _run("pro", 11, config)
    assert [r.chosen for r in again.rounds] == [r.chosen for r in pro.rounds]


def test_fixed_stopping_runs_exactly_k_rounds() -> None:
    ctrl = _run("original", 3, ControllerConfig(budget=4), wish_stop=True)
    assert len(ctrl.rounds) == 4 and all(r.stop_prob == 0.0 for r in ctrl.rounds)
    with pytest.raises(RuntimeError):
        ctrl.step(QUERY)


@pytest.mark.parametrize(("wish", "expected"), [(True, 0.75), (False, 0.10)])
def test_adaptive_stopping_logs_the_sampled_probability(wish: bool, expected: float) -> None:
    seeds_stopped = 0
    for seed in range(40):
        ctrl = _run("original", seed, ControllerConfig(budget=3, stopping="adaptive"), wish_stop=wish)
        assert ctrl.rounds[0].stop_prob == 0.0 and ctrl.rounds[0].u_stop is None
        assert all(r.stop_prob == expected for r in ctrl.rounds[1:])
        seeds_stopped += len(ctrl.rounds) < 3
    assert (seeds_stopped > 20) == wish


def test_log_round_trips_through_the_trajectory_format() -> None:
    ctrl = _run("anti", 5, ControllerConfig(budget=3, stopping="adaptive"))
    y = [s for *_, s in DOCS]
    traj = ctrl.trajectory("t", "q", y=y)
    parsed = parse_trajectory(traj.model_dump_json())
    assert parsed == traj
    for record in ctrl.rounds:
        assert DOCS[record.chosen_index][0] == record.chosen
        assert record.chosen_index == int(inverse_cdf(np.array(record.probs), record.u_select))
    assert json.loads(traj.model_dump_json())["ranking"] == "anti"


def test_stop_recommendation_rules() -> None:
    from draligned.cess.searches import SearchSettings, wish_stop

    one, both = SearchSettings(stop_rule="one_sided"), SearchSettings(stop_rule="both_sides")
    assert not wish_stop(np.array([1.0]), one) and not wish_stop(np.array([1.0]), both)  # < 2 read
    assert wish_stop(np.array([1.0, 1.0]), one) and not wish_stop(np.array([1.0, 1.0]), both)
    assert not wish_stop(np.array([1.0, -1.0]), one) and wish_stop(np.array([1.0, -1.0]), both)
    assert wish_stop(np.array([1.0, -0.5, 1.0, 1.0]), one) and wish_stop(np.array([1.0, -0.5, 1.0, 1.0]), both)
