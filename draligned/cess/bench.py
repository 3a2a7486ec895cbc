"""The PERSPECTRUM benchmark (`draligned cess bench perspectrum`), after the paper's appendix F.

Protocol, all fixed on tuning claims (train + dev) before a test outcome is seen:
- test documents are removed from the tuning pools, so no document is shared (the paper's
  separation; ``shared_documents = "keep"`` reports the leaky alternative, and both runs measure
  the leakage through the text ridge's test correlation on shared vs other documents);
- the searches' ranking strength, temperature, ε and stop-recommendation rule are calibrated to
  the paper's Opened Mean (:mod:`draligned.cess.calibration`); adaptive stopping turns the
  recommendation into a stop probability of 0.75 or 0.10;
- the outcome model m is the paper's one constant per question (the tuning-set mean of θ*) or a
  text ridge (``--outcome ridge``), used by every row that has an m;
- α of the Opened Mean shrunk to the tuning mean and a tuned λ are chosen by tuning MAE.
CESS is Eq. 13 with the paper's preselected λ = 0.5 (the headline row); the tuned λ is a second
row. Test claims are only evaluated: Table 8 rows with MAE, RMSE, bias, S (Eq. 16), worst-ranking
MAE and direction disagreement (±0.05), paired 95% question-level bootstrap CIs of CESS against
every other row, MAE by round (Table 10) and by controller × stopping (Table 7).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from draligned.cess import BOOTSTRAP_SEED
from draligned.cess.batch import TrajectoryBatch
from draligned.cess.bench_tables import EvaluationTables, evaluate
from draligned.cess.calibration import STOP_RULES, Calibration, calibrate, settings_at
from draligned.cess.outcome import ConstantModel, CrossFit, cross_fit_ridge
from draligned.cess.perspectrum import (
    PerspectrumClaim,
    PerspectrumData,
    shared_document_ids,
    without_shared_documents,
)
from draligned.cess.searches import SearchSettings, run_searches
from draligned.cess.stop_rules import StopRule
from draligned.cess.tuning import Variant, tune_alpha, tune_lambda
from draligned.records import Record

Outcome = Literal["mean", "ridge"]


class BenchSettings(Record):
    """Benchmark settings; all fixed before test outcomes are seen."""

    search: SearchSettings = Field(default_factory=SearchSettings)
    """How the non-LLM controllers search (ranking fields replaced by the calibration when it runs)."""
    calibrate: bool = True
    """Calibrate ranking strength, temperature, ε and stop rule on tuning claims (else use ``search``)."""
    stop_rules: list[StopRule] = Field(default_factory=lambda: list(STOP_RULES))
    """Stop-recommendation rules the calibration may choose from."""
    outcome: Outcome = "mean"
    """Outcome model m of Outcome Regression, DR and CESS: the tuning-set mean (one constant, the
    paper's ten-round choice) or a ridge on document text."""
    shared_documents: Literal["drop", "keep"] = "drop"
    """``drop``: test documents are removed from the tuning pools (no document shared); ``keep``: not."""
    variant: Variant = "clip_then_shrink"
    """CESS formula: Eq. 13 (paper's ten-round choice), Eq. 9 or Eq. 12."""
    n_resamples: int = 10_000
    """Question-level bootstrap resamples."""
    bootstrap_seed: int = BOOTSTRAP_SEED
    """Bootstrap seed (the paper's)."""


class Leakage(Record):
    """How much the text ridge gains on test documents it may have seen in tuning pools."""

    shared_test_documents: int
    """Test pool entries whose document also appears in a tuning pool of the release."""
    test_documents: int
    """All test pool entries."""
    ridge_corr_shared: float | None
    """Correlation of the ridge's prediction with Y on the shared test documents."""
    ridge_corr_other: float | None
    """The same on the other test documents."""


class BenchReport(EvaluationTables):
    """Everything the benchmark prints."""

    documents: str
    """Perspectives or evidence paragraphs."""
    n_tuning_claims: int
    """Train + dev claims used for fitting (after removing shared documents)."""
    n_eval_claims: int
    """Test claims evaluated."""
    n_tuning_runs: int
    """Tuning trajectories."""
    n_eval_runs: int
    """Evaluation trajectories."""
    settings: BenchSettings
    """Settings as given."""
    search: SearchSettings
    """Search settings used (after calibration)."""
    calibration: Calibration | None
    """The calibration search and its choice (None when ``calibrate`` is off)."""
    leakage: Leakage
    """Shared documents and the ridge's gain on them."""
    tuning_mean: float
    """Mean θ* over tuning claims (the Tuning-set Mean and, with ``outcome = mean``, m)."""
    ridge_alpha: float
    """Cross-validated ridge penalty."""
    alpha: float
    """α of the Opened Mean shrunk to the tuning mean, chosen on tuning searches."""
    lam: float
    """λ chosen on tuning searches (the tuned-λ CESS row)."""
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
    alpha: float

    def predictions(self, claims: Sequence[PerspectrumClaim], outcome: Outcome) -> dict[int, np.ndarray]:
        """m per document of each (test) claim under the chosen outcome model."""
        model = self.ridge.model if outcome == "ridge" else self.constant
        return {c.claim_id: model.predict(_texts(c)) for c in claims}


def tune(claims: Sequence[PerspectrumClaim], runs: Runs, settings: BenchSettings) -> Tuned:
    """Fit the outcome models, λ and α on tuning claims and their searches only."""
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
    lam = tune_lambda(runs.with_predictions(by_claim), runs.question, settings.variant).lam
    alpha = tune_alpha(runs.batch, runs.question, constant.value).lam
    return Tuned(constant=constant, ridge=ridge, lam=lam, alpha=alpha)


def _corr(x: np.ndarray, y: np.ndarray) -> float | None:
    return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and x.std() > 0 and y.std() > 0 else None


def leakage(original: PerspectrumData, evaluation: Sequence[PerspectrumClaim], ridge: CrossFit) -> Leakage:
    """The ridge's test correlation on documents shared with the release's tuning pools vs the rest."""
    shared = shared_document_ids(original)
    docs = [d for c in evaluation for d in c.pool.documents]
    is_shared = np.array([d.id in shared for d in docs])
    pred = ridge.model.predict([d.text for d in docs])
    y = np.array([d.score for d in docs], float)
    return Leakage(shared_test_documents=int(is_shared.sum()), test_documents=len(docs),
                   ridge_corr_shared=_corr(pred[is_shared], y[is_shared]),
                   ridge_corr_other=_corr(pred[~is_shared], y[~is_shared]))


def run_bench(data: PerspectrumData, settings: BenchSettings | None = None) -> BenchReport:
    """Separate, calibrate and fit on tuning claims, then search and evaluate the test claims."""
    settings = settings or BenchSettings()
    start = time.perf_counter()
    split = without_shared_documents(data) if settings.shared_documents == "drop" else data
    if not split.tuning or not split.evaluation:
        raise ValueError("no eligible tuning or test claims (after removing shared documents from tuning pools)")
    calibration = calibrate(split.tuning, settings.search, settings.stop_rules) if settings.calibrate else None
    search = settings_at(settings.search, calibration.chosen) if calibration else settings.search
    tuning_runs = Runs.search(split.tuning, search)
    tuned = tune(split.tuning, tuning_runs, settings)
    eval_runs = Runs.search(split.evaluation, search)
    tables = evaluate(
        eval_runs.with_predictions(tuned.predictions(split.evaluation, settings.outcome)),
        eval_runs.question, eval_runs.config, eval_runs.ranking, tuned.constant.value, tuned.alpha, tuned.lam,
        settings.variant, settings.n_resamples, settings.bootstrap_seed)
    return BenchReport(
        documents=data.documents,
        n_tuning_claims=len(split.tuning),
        n_eval_claims=len(split.evaluation),
        n_tuning_runs=len(tuning_runs.question),
        n_eval_runs=len(eval_runs.question),
        settings=settings,
        search=search,
        calibration=calibration,
        leakage=leakage(data, split.evaluation, tuned.ridge),
        tuning_mean=tuned.constant.value,
        ridge_alpha=tuned.ridge.alpha,
        alpha=tuned.alpha,
        lam=tuned.lam,
        **dict(tables),
        seconds=time.perf_counter() - start,
    )
