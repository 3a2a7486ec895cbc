"""The PERSPECTRUM benchmark (`draligned cess bench perspectrum`), after the paper's appendix F.

Tuning claims (train + dev) fit everything: the tuning-set mean, a ridge
outcome model on document text (penalty by cross-validation over claims, with
out-of-fold predictions for the tuning trajectories), and λ by MAE on tuning
searches. Test claims are only evaluated: MAE, RMSE, within-question bias,
ranking sensitivity S (Eq. 16), worst-ranking MAE and direction error for each
estimator, 95% question-level cluster-bootstrap CIs of paired differences, MAE
by round (Table 10) and by controller × stopping (Table 7).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimators import (
    opened_mean,
    sequential_dr,
    sequential_ipw,
    weight_diagnostics,
)
from draligned.cess.metrics import (
    BOOTSTRAP_SEED,
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
from draligned.cess.outcome import ConstantModel, CrossFit, cross_fit_ridge
from draligned.cess.perspectrum import PerspectrumClaim, PerspectrumData
from draligned.cess.searches import SearchSettings, run_searches
from draligned.cess.tuning import Variant, cess_variant, tune_lambda
from draligned.records import Record

REPORTED_ROUNDS = (1, 2, 4, 6, 8, 10)
PAPER_LAMBDA = 0.5
"""The preselected coefficient of the paper's ten-round analysis (Eq. 13)."""


class BenchSettings(Record):
    """Benchmark settings; all fixed before test outcomes are seen."""

    search: SearchSettings = Field(default_factory=SearchSettings)
    """How the non-LLM controllers search."""
    outcome: Literal["ridge", "mean"] = "ridge"
    """Outcome model m of DR and CESS: ridge on text, or the tuning-set mean (paper's ten-round choice)."""
    variant: Variant = "clip_then_shrink"
    """CESS formula: Eq. 13 (paper's ten-round choice), Eq. 9 or Eq. 12."""
    n_resamples: int = 10_000
    """Cluster-bootstrap resamples."""
    bootstrap_seed: int = BOOTSTRAP_SEED
    """Cluster-bootstrap seed."""


class MethodRow(Record):
    """Test-set metrics of one estimator."""

    method: str
    """Estimator name."""
    mae: float
    """MAE, within question then across questions."""
    mae_ci: tuple[float, float]
    """95% question-level cluster-bootstrap interval of the MAE."""
    rmse: float
    """RMSE, within question then across questions."""
    bias: float
    """Mean over questions of |within-question mean error|."""
    sensitivity: float
    """Ranking sensitivity S (Eq. 16)."""
    sensitivity_ci: tuple[float, float]
    """95% question-level cluster-bootstrap interval of S."""
    worst_ranking_mae: float
    """MAE under the less favourable ranking."""
    direction_error: float
    """Direction disagreement rate (±0.05 thresholds)."""


class PairedRow(Record):
    """A paired difference between two estimators with its cluster-bootstrap CI."""

    comparison: str
    """``A − B``."""
    metric: str
    """``mae``, ``sensitivity`` or ``direction_error``."""
    difference: float
    """Mean over questions of the per-question difference."""
    lower: float
    """2.5% bootstrap quantile."""
    upper: float
    """97.5% bootstrap quantile."""


class BreakdownRow(Record):
    """MAE of Opened Mean, raw DR (clipped) and CESS within one slice."""

    slice: str
    """Round number (budget k on the first k rounds) or controller/stopping configuration."""
    opened_mean: float
    """Opened Mean MAE."""
    dr_clipped: float
    """Π[raw sequential DR] MAE."""
    cess: float
    """CESS MAE."""


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
    """Table 8-style comparison."""
    paired: list[PairedRow]
    """Paired differences with 95% cluster-bootstrap CIs."""
    by_round: list[BreakdownRow]
    """Table 10-style MAE after each round."""
    by_config: list[BreakdownRow]
    """Table 7-style MAE per controller/stopping."""
    weights: WeightSummary
    """Weight diagnostics on the evaluation runs."""


class BenchReport(EvaluationTables):
    """Everything the benchmark prints."""

    documents: str
    """Perspectives or evidence paragraphs."""
    n_tuning_claims: int
    """Train + dev claims used for fitting."""
    n_eval_claims: int
    """Test claims evaluated."""
    n_tuning_runs: int
    """Tuning trajectories."""
    n_eval_runs: int
    """Evaluation trajectories."""
    settings: BenchSettings
    """Settings used."""
    tuning_mean: float
    """Mean θ* over tuning claims."""
    ridge_alpha: float
    """Cross-validated ridge penalty."""
    lam: float
    """λ chosen on tuning searches."""
    seconds: float
    """Wall time."""


@dataclass(frozen=True)
class Runs:
    """Trajectories of some claims with their labels."""

    batch: TrajectoryBatch
    question: np.ndarray
    config: np.ndarray
    ranking: np.ndarray

    @classmethod
    def search(cls, claims: Sequence[PerspectrumClaim], settings: SearchSettings) -> Runs:
        """Run every search design over ``claims``."""
        trajectories, labels = run_searches(claims, settings)
        return cls(
            batch=TrajectoryBatch.from_trajectories(trajectories),
            question=np.array([label.claim_id for label in labels]),
            config=np.array([label.config for label in labels]),
            ranking=np.array([label.ranking for label in labels]),
        )

    def with_predictions(self, by_claim: dict[int, np.ndarray]) -> TrajectoryBatch:
        """The batch with per-document predictions looked up by claim."""
        doc_m = np.zeros_like(self.batch.doc_m)
        for row, claim_id in enumerate(self.question):
            values = by_claim[int(claim_id)]
            doc_m[row, : len(values)] = values
        return self.batch.with_predictions(doc_m)


def _texts(claim: PerspectrumClaim) -> list[str]:
    return [d.text for d in claim.pool.documents]


@dataclass(frozen=True)
class Tuned:
    """Everything fit on tuning claims."""

    constant: ConstantModel
    ridge: CrossFit
    lam: float


def tune(claims: Sequence[PerspectrumClaim], runs: Runs, settings: BenchSettings) -> Tuned:
    """Fit the outcome models and λ on tuning claims and their searches only."""
    constant = ConstantModel.fit([c.theta_star for c in claims])
    ridge = cross_fit_ridge(
        [t for c in claims for t in _texts(c)],
        np.concatenate([c.y for c in claims]),
        np.concatenate([[c.claim_id] * len(c.pool.documents) for c in claims]),
    )
    if settings.outcome == "ridge":
        splits = np.cumsum([len(c.pool.documents) for c in claims])[:-1]
        by_claim = dict(zip((c.claim_id for c in claims), np.split(ridge.out_of_fold, splits), strict=True))
    else:
        by_claim = {c.claim_id: constant.predict(_texts(c)) for c in claims}
    fit = tune_lambda(runs.with_predictions(by_claim), runs.question, settings.variant)
    return Tuned(constant=constant, ridge=ridge, lam=fit.lam)


def _per_question(est: np.ndarray, runs: Runs, target: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "mae": per_question_abs_error(est, target, runs.question),
        "sensitivity": per_question_sensitivity(est, runs.question, runs.config, runs.ranking),
        "direction_error": per_question_direction_error(est, target, runs.question),
    }


def _breakdown(
    name: str,
    target: np.ndarray,
    question: np.ndarray,
    batch: TrajectoryBatch,
    cess: Callable[[TrajectoryBatch], np.ndarray],
) -> BreakdownRow:
    return BreakdownRow(
        slice=name,
        opened_mean=mae(opened_mean(batch), target, question),
        dr_clipped=mae(np.clip(sequential_dr(batch), -1, 1), target, question),
        cess=mae(cess(batch), target, question),
    )


def evaluate(
    claims: Sequence[PerspectrumClaim], runs: Runs, tuned: Tuned, settings: BenchSettings
) -> EvaluationTables:
    """All test-set tables for fixed tuned settings."""
    ridge_batch = runs.with_predictions({c.claim_id: tuned.ridge.model.predict(_texts(c)) for c in claims})
    constant = {c.claim_id: tuned.constant.predict(_texts(c)) for c in claims}
    batch = ridge_batch if settings.outcome == "ridge" else runs.with_predictions(constant)
    target, q = batch.theta_star, runs.question

    def cess(b: TrajectoryBatch) -> np.ndarray:
        return cess_variant(b, tuned.lam, settings.variant)

    estimates = {
        "Tuning-set Mean": np.full(len(target), tuned.constant.value),
        "Outcome Regression": ridge_batch.mbar,
        "Opened Mean": opened_mean(batch),
        "Sequential IPW": sequential_ipw(batch),
        "Sequential DR": sequential_dr(batch),
        "CESS": cess(batch),
        f"CESS (lambda={PAPER_LAMBDA})": cess_variant(batch, PAPER_LAMBDA, settings.variant),
    }
    per_q = {name: _per_question(est, runs, target) for name, est in estimates.items()}

    def ci(values: np.ndarray) -> ConfidenceInterval:
        return bootstrap_ci(values, n_resamples=settings.n_resamples, seed=settings.bootstrap_seed)

    methods = []
    for name, est in estimates.items():
        mae_ci, s_ci = ci(per_q[name]["mae"]), ci(per_q[name]["sensitivity"])
        methods.append(
            MethodRow(
                method=name,
                mae=mae_ci.estimate,
                mae_ci=(mae_ci.lower, mae_ci.upper),
                rmse=rmse(est, target, q),
                bias=within_question_bias(est, target, q),
                sensitivity=s_ci.estimate,
                sensitivity_ci=(s_ci.lower, s_ci.upper),
                worst_ranking_mae=worst_ranking_mae(est, target, q, runs.ranking),
                direction_error=float(per_q[name]["direction_error"].mean()),
            )
        )
    paired = []
    for other in ("Opened Mean", "Sequential DR"):
        for metric in ("mae", "sensitivity", "direction_error"):
            diff = ci(per_q["CESS"][metric] - per_q[other][metric])
            paired.append(
                PairedRow(
                    comparison=f"CESS - {other}",
                    metric=metric,
                    difference=diff.estimate,
                    lower=diff.lower,
                    upper=diff.upper,
                )
            )
    budget = settings.search.budget
    by_round = [_breakdown(str(k), target, q, batch.prefix(k), cess) for k in REPORTED_ROUNDS if k <= budget]
    by_config = [
        _breakdown(str(c), target[runs.config == c], q[runs.config == c], batch.take(runs.config == c), cess)
        for c in np.unique(runs.config)
    ]
    diag = weight_diagnostics(batch)
    weights = WeightSummary(
        median_ess=float(np.median(diag.ess)),
        p05_ess=float(np.quantile(diag.ess, 0.05)),
        p95_max_weight=float(np.quantile(diag.max_weight, 0.95)),
        min_p_times_s=float((batch.p * batch.reach)[batch.mask].min()),
        share_dr_outside_range=float((np.abs(estimates["Sequential DR"]) > 1).mean()),
    )
    return EvaluationTables(
        methods=methods, paired=paired, by_round=by_round, by_config=by_config, weights=weights
    )


def run_bench(data: PerspectrumData, settings: BenchSettings | None = None) -> BenchReport:
    """Search tuning and test claims, fit on tuning, evaluate on test."""
    settings = settings or BenchSettings()
    start = time.perf_counter()
    tuning_runs = Runs.search(data.tuning, settings.search)
    tuned = tune(data.tuning, tuning_runs, settings)
    eval_runs = Runs.search(data.evaluation, settings.search)
    tables = evaluate(data.evaluation, eval_runs, tuned, settings)
    return BenchReport(
        documents=data.documents,
        n_tuning_claims=len(data.tuning),
        n_eval_claims=len(data.evaluation),
        n_tuning_runs=len(tuning_runs.question),
        n_eval_runs=len(eval_runs.question),
        settings=settings,
        tuning_mean=tuned.constant.value,
        ridge_alpha=tuned.ridge.alpha,
        lam=tuned.lam,
        **dict(tables),
        seconds=time.perf_counter() - start,
    )
