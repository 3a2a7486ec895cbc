"""The test-set tables of the PERSPECTRUM benchmark (paper appendix F, Tables 7, 8 and 10).

Every metric averages within a question and then weights questions equally; every CI resamples
whole questions (10,000 times, the paper's seed), keeping all their runs and conditions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimators import opened_mean, sequential_dr, sequential_ipw, weight_diagnostics
from draligned.cess.metrics import (
    ConfidenceInterval,
    bootstrap_ci,
    mae,
    per_question_abs_error,
    per_question_direction_error,
    per_question_sensitivity,
    rmse,
    within_question_bias,
    worst_ranking_mae,
)
from draligned.cess.tuning import Variant, cess_variant, shrink_to_tuning_mean
from draligned.records import Record

REPORTED_ROUNDS = (1, 2, 4, 6, 8, 10)
PAPER_LAMBDA = 0.5
"""The preselected coefficient of the paper's ten-round analysis (Eq. 13): the headline CESS row."""
CESS = "CESS"
"""Name of the headline row (λ = 0.5)."""


class MethodRow(Record):
    """Test-set metrics of one estimator."""

    method: str
    """Estimator name."""
    mae: float
    """MAE, within question then across questions."""
    mae_ci: tuple[float, float]
    """95% question-level bootstrap interval of the MAE."""
    rmse: float
    """RMSE, within question then across questions."""
    bias: float
    """Mean over questions of |within-question mean error|."""
    sensitivity: float
    """Ranking sensitivity S (Eq. 16)."""
    sensitivity_ci: tuple[float, float]
    """95% question-level bootstrap interval of S."""
    worst_ranking_mae: float
    """MAE under the less favourable ranking."""
    direction_error: float
    """Direction disagreement rate (±0.05 thresholds)."""
    direction_error_ci: tuple[float, float]
    """95% question-level bootstrap interval of the direction disagreement."""


class PairedRow(Record):
    """A paired difference between two estimators with its question-level bootstrap CI."""

    comparison: str
    """``A - B``: A minus B."""
    metric: str
    """``mae``, ``sensitivity`` or ``direction_error``."""
    difference: float
    """Mean over questions of the per-question difference A − B."""
    lower: float
    """2.5% bootstrap quantile."""
    upper: float
    """97.5% bootstrap quantile."""


class BreakdownRow(Record):
    """MAE of Opened Mean, raw DR (clipped) and CESS (λ = 0.5) within one slice."""

    slice: str
    """Round number (budget k on the first k rounds) or controller/stopping configuration."""
    opened_mean: float
    """Opened Mean MAE."""
    dr_clipped: float
    """Π[raw sequential DR] MAE."""
    cess: float
    """CESS (λ = 0.5) MAE."""


class WeightSummary(Record):
    """How much information the weights retain (appendix F)."""

    median_ess: float
    """Median Kish effective sample size."""
    p05_ess: float
    """5th percentile ESS."""
    p95_max_weight: float
    """95th percentile of the largest weight per run."""
    min_p_times_s: float
    """Smallest logged p_t s_t."""
    share_dr_outside_range: float
    """Share of runs whose raw DR falls outside [−1, 1]."""


class EvaluationTables(Record):
    """The test-set tables."""

    methods: list[MethodRow]
    """Table 8 rows and the extra estimators."""
    paired: list[PairedRow]
    """CESS (λ = 0.5) minus every other row, with 95% question-level bootstrap CIs."""
    by_round: list[BreakdownRow]
    """Table 10: MAE after each round."""
    by_config: list[BreakdownRow]
    """Table 7-style MAE per controller/stopping."""
    weights: WeightSummary
    """Weight diagnostics on the evaluation runs."""


def estimates(batch: TrajectoryBatch, tuning_mean: float, alpha: float, lam: float,
              variant: Variant) -> dict[str, np.ndarray]:
    """Every row's estimates; m (Outcome Regression, DR, CESS) is whatever ``batch`` carries."""
    opened = opened_mean(batch)
    return {
        "Opened Mean": opened,
        "Outcome Regression": batch.mbar,
        "Tuning-set Mean": np.full(len(opened), tuning_mean),
        "Opened Mean shrunk to Tuning Mean": shrink_to_tuning_mean(opened, tuning_mean, alpha),
        CESS: cess_variant(batch, PAPER_LAMBDA, variant),
        f"CESS (tuned lambda = {lam:g})": cess_variant(batch, lam, variant),
        "Sequential IPW (raw)": sequential_ipw(batch),
        "Sequential DR (raw)": sequential_dr(batch),
    }


def _breakdown(name: str, batch: TrajectoryBatch, question: np.ndarray,
               cess: Callable[[TrajectoryBatch], np.ndarray]) -> BreakdownRow:
    target = batch.theta_star
    return BreakdownRow(
        slice=name,
        opened_mean=mae(opened_mean(batch), target, question),
        dr_clipped=mae(np.clip(sequential_dr(batch), -1, 1), target, question),
        cess=mae(cess(batch), target, question),
    )


def evaluate(
    batch: TrajectoryBatch, question: np.ndarray, config: np.ndarray, ranking: np.ndarray,
    tuning_mean: float, alpha: float, lam: float, variant: Variant, n_resamples: int, seed: int,
) -> EvaluationTables:
    """All test-set tables for fixed tuned settings."""
    target = batch.theta_star
    rows = estimates(batch, tuning_mean, alpha, lam, variant)
    per_q = {name: {"mae": per_question_abs_error(est, target, question),
                    "sensitivity": per_question_sensitivity(est, question, config, ranking),
                    "direction_error": per_question_direction_error(est, target, question)}
             for name, est in rows.items()}

    def ci(values: np.ndarray) -> ConfidenceInterval:
        return bootstrap_ci(values, n_resamples=n_resamples, seed=seed)

    methods = []
    for name, est in rows.items():
        m, s, d = (ci(per_q[name][k]) for k in ("mae", "sensitivity", "direction_error"))
        methods.append(MethodRow(
            method=name, mae=m.estimate, mae_ci=(m.lower, m.upper), rmse=rmse(est, target, question),
            bias=within_question_bias(est, target, question), sensitivity=s.estimate,
            sensitivity_ci=(s.lower, s.upper), worst_ranking_mae=worst_ranking_mae(est, target, question, ranking),
            direction_error=d.estimate, direction_error_ci=(d.lower, d.upper)))
    paired = [
        PairedRow(comparison=f"{CESS} - {other}", metric=metric, difference=diff.estimate, lower=diff.lower,
                  upper=diff.upper)
        for other in rows if other != CESS
        for metric in ("mae", "sensitivity", "direction_error")
        for diff in [ci(per_q[CESS][metric] - per_q[other][metric])]
    ]

    def cess(b: TrajectoryBatch) -> np.ndarray:
        return cess_variant(b, PAPER_LAMBDA, variant)

    budget = int(batch.budget.max())
    by_round = [_breakdown(str(k), batch.prefix(k), question, cess) for k in REPORTED_ROUNDS if k <= budget]
    by_config = [_breakdown(str(c), batch.take(config == c), question[config == c], cess) for c in np.unique(config)]
    diag = weight_diagnostics(batch)
    weights = WeightSummary(
        median_ess=float(np.median(diag.ess)),
        p05_ess=float(np.quantile(diag.ess, 0.05)),
        p95_max_weight=float(np.quantile(diag.max_weight, 0.95)),
        min_p_times_s=float((batch.p * batch.reach)[batch.mask].min()),
        share_dr_outside_range=float((np.abs(rows["Sequential DR (raw)"]) > 1).mean()),
    )
    return EvaluationTables(methods=methods, paired=paired, by_round=by_round, by_config=by_config, weights=weights)
