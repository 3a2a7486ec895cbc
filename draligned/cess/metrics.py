"""Evaluation metrics of the CESS paper (appendix F, Eqs. 3–4 and 16).

Run-level arrays (one entry per trajectory) carry labels for question,
configuration and ranking. Every accuracy metric averages within a question
first and then weights questions equally, so each metric is the mean of a
per-question vector; the question-level cluster bootstrap resamples those
vectors, which is the same as resampling whole questions with all their runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from draligned.cess import BOOTSTRAP_SEED

DIRECTION_THRESHOLD = 0.05
"""Estimates above +0.05 are positive, below −0.05 negative, otherwise neutral."""


def group_mean(values: np.ndarray, *keys: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Mean of ``values`` within each distinct combination of ``keys`` (sorted by the keys)."""
    uniques, codes = zip(*(np.unique(k, return_inverse=True) for k in keys), strict=True)
    dims = tuple(len(u) for u in uniques)
    groups, inverse = np.unique(np.ravel_multi_index(codes, dims), return_inverse=True)
    means = np.bincount(inverse, weights=values) / np.bincount(inverse)
    labels = tuple(u[c] for u, c in zip(uniques, np.unravel_index(groups, dims), strict=True))
    return labels, means


def per_question(values: np.ndarray, question: np.ndarray) -> np.ndarray:
    """Mean of ``values`` within each question, in sorted question order."""
    return group_mean(np.asarray(values, float), question)[1]


def per_question_abs_error(est: np.ndarray, target: np.ndarray, question: np.ndarray) -> np.ndarray:
    """Per-question mean absolute error (the summands of MAE)."""
    return per_question(np.abs(est - target), question)


def mae(est: np.ndarray, target: np.ndarray, question: np.ndarray) -> float:
    """MAE: absolute error averaged within each question, then equally across questions."""
    return float(per_question_abs_error(est, target, question).mean())


def rmse(est: np.ndarray, target: np.ndarray, question: np.ndarray) -> float:
    """Root of the squared error averaged within each question, then across questions."""
    return float(np.sqrt(per_question((est - target) ** 2, question).mean()))


def within_question_bias(est: np.ndarray, target: np.ndarray, question: np.ndarray) -> float:
    """Average over questions of |mean signed error within the question|."""
    return float(np.abs(per_question(est - target, question)).mean())


def direction(x: np.ndarray, threshold: float = DIRECTION_THRESHOLD) -> np.ndarray:
    """+1 above ``threshold``, −1 below ``-threshold``, 0 in between."""
    return np.where(x > threshold, 1, np.where(x < -threshold, -1, 0))


def per_question_direction_error(
    est: np.ndarray, target: np.ndarray, question: np.ndarray, threshold: float = DIRECTION_THRESHOLD
) -> np.ndarray:
    """Per-question share of runs whose direction label differs from the target's."""
    return per_question(direction(est, threshold) != direction(target, threshold), question)


def direction_error(
    est: np.ndarray, target: np.ndarray, question: np.ndarray, threshold: float = DIRECTION_THRESHOLD
) -> float:
    """Direction disagreement rate, within question then across questions."""
    return float(per_question_direction_error(est, target, question, threshold).mean())


def per_question_sensitivity(
    est: np.ndarray,
    question: np.ndarray,
    config: np.ndarray,
    ranking: np.ndarray,
    pro: str = "pro",
    anti: str = "anti",
) -> np.ndarray:
    """Summands of Eq. 16: per question, mean over configurations of |θ̄_pro − θ̄_anti|.

    Runs are averaged within (question, configuration, ranking) before the
    rankings are compared. Every (question, configuration) needs both rankings.
    """
    (q, c, r), means = group_mean(np.asarray(est, float), question, config, ranking)
    is_pro, is_anti = r == pro, r == anti
    pro_cells = list(zip(q[is_pro], c[is_pro], strict=True))
    if pro_cells != list(zip(q[is_anti], c[is_anti], strict=True)) or not pro_cells:
        raise ValueError("every (question, configuration) needs runs under both rankings")
    return per_question(np.abs(means[is_pro] - means[is_anti]), q[is_pro])


def worst_ranking_mae(
    est: np.ndarray, target: np.ndarray, question: np.ndarray, ranking: np.ndarray
) -> float:
    """MAE under the less favourable ranking: the largest MAE among the ranking conditions."""
    return max(
        mae(est[ranking == r], target[ranking == r], question[ranking == r]) for r in np.unique(ranking)
    )


@dataclass(frozen=True)
class InterventionEffects:
    """Paired 2×2 selection × stopping effects on the Opened Mean (Eqs. 3–4), one entry per block."""

    selection: np.ndarray
    """Δ_sel = θ10 − θ00 (agent vs uniform selection, fixed stopping)."""
    stopping: np.ndarray
    """Δ_stop = θ01 − θ00 (adaptive vs fixed stopping, uniform selection)."""
    interaction: np.ndarray
    """Δ_int = θ11 − θ10 − θ01 + θ00."""
    total: np.ndarray
    """θ11 − θ00 = Δ_sel + Δ_stop + Δ_int."""


def intervention_effects(
    theta00: np.ndarray, theta10: np.ndarray, theta01: np.ndarray, theta11: np.ndarray
) -> InterventionEffects:
    """Effects from the Opened Means θ_ab of the four paired conditions (a: agent selection, b: adaptive)."""
    return InterventionEffects(
        selection=theta10 - theta00,
        stopping=theta01 - theta00,
        interaction=theta11 - theta10 - theta01 + theta00,
        total=theta11 - theta00,
    )


def icc1k(x: np.ndarray) -> float:
    """One-way random-effects ICC(1,k) = (MSB − MSW) / MSB of an (n targets, k replicates) array."""
    n, k = x.shape
    row_means = x.mean(axis=1)
    msb = k * ((row_means - x.mean()) ** 2).sum() / (n - 1)
    msw = ((x - row_means[:, None]) ** 2).sum() / (n * (k - 1))
    return float((msb - msw) / msb)


@dataclass(frozen=True)
class ConfidenceInterval:
    """A point estimate with a percentile cluster-bootstrap interval."""

    estimate: float
    lower: float
    upper: float


def bootstrap_means(
    per_question_values: np.ndarray, n_resamples: int = 10_000, seed: int = BOOTSTRAP_SEED
) -> np.ndarray:
    """Means over questions in ``n_resamples`` resamples of whole questions: (R,) or (R, M)."""
    values = np.asarray(per_question_values, float)
    q = values.shape[0]
    counts = np.random.default_rng(seed).multinomial(q, np.full(q, 1.0 / q), size=n_resamples)
    return counts @ values / q


def bootstrap_ci(
    per_question_values: np.ndarray,
    level: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = BOOTSTRAP_SEED,
) -> ConfidenceInterval:
    """Percentile CI of the mean over questions (e.g. of per-question paired differences)."""
    boot = bootstrap_means(per_question_values, n_resamples, seed)
    lower, upper = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return ConfidenceInterval(float(np.mean(per_question_values)), float(lower), float(upper))


def cluster_means(values: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """Mean within each cluster (sorted cluster order): every unit of a cluster weighs the same."""
    return per_question(np.asarray(values, float), np.asarray(clusters))


def cluster_ci(
    values: np.ndarray,
    clusters: np.ndarray,
    level: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = BOOTSTRAP_SEED,
) -> ConfidenceInterval:
    """Mean within cluster, then equally across clusters, with a percentile bootstrap of whole clusters.

    The one within-cluster weighting of the project (the paper's: average within a question, then
    give every question equal weight); `draligned cess pairs` and the report both use it.
    """
    return bootstrap_ci(cluster_means(values, clusters), level, n_resamples, seed)

