"""Outcome models m(X_i), fit on tuning tasks only (CESS paper, section 3).

Two models share one interface: the tuning-set mean (a constant) and a ridge
regression on pre-search text features (TF-IDF of each document's text),
solved in closed form with numpy. Predictions are clipped to the score range.
The ridge penalty is chosen by cross-validation over folds of whole tuning
tasks, whose out-of-fold predictions serve for tuning λ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from draligned.cess.estimates import clip
from draligned.cess.text import TfidfIndex


def ridge_path(x: np.ndarray, y: np.ndarray, alphas: Sequence[float]) -> list[tuple[np.ndarray, float]]:
    """Closed-form ridge with an unpenalised intercept for several penalties: [(weights, intercept)].

    The Gram matrix of the centred features is formed once: primal
    (XcᵀXc + αI)⁻¹Xcᵀyc, or dual Xcᵀ(XcXcᵀ + αI)⁻¹yc when there are fewer rows than features.
    """
    x_mean, y_mean = x.mean(axis=0), float(y.mean())
    xc, yc = x - x_mean, y - y_mean
    n, d = xc.shape
    if n < d:
        gram = xc @ xc.T
        paths = [xc.T @ np.linalg.solve(gram + alpha * np.eye(n), yc) for alpha in alphas]
    else:
        gram, rhs = xc.T @ xc, xc.T @ yc
        paths = [np.linalg.solve(gram + alpha * np.eye(d), rhs) for alpha in alphas]
    return [(w, y_mean - float(x_mean @ w)) for w in paths]


def ridge_fit(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Closed-form ridge for one penalty: (weights, intercept)."""
    return ridge_path(x, y, [alpha])[0]


@dataclass(frozen=True)
class ConstantModel:
    """Predicts the mean target of the tuning tasks for every document."""

    value: float

    @classmethod
    def fit(cls, tuning_targets: Sequence[float]) -> ConstantModel:
        """The tuning-set mean of the task targets θ*."""
        return cls(float(np.mean(tuning_targets)))

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """The constant for each text."""
        return np.full(len(texts), self.value)


@dataclass(frozen=True)
class TextRidgeModel:
    """Ridge regression of Y on TF-IDF features of the document text."""

    features: TfidfIndex
    weights: np.ndarray
    intercept: float

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """Clipped predictions for new documents."""
        return clip(self.features.transform(texts) @ self.weights + self.intercept)


RIDGE_ALPHAS = (0.1, 1.0, 10.0, 100.0)
"""Candidate ridge penalties for cross-validation."""


class CrossFit(NamedTuple):
    """A ridge model fit on all tuning documents, its penalty, and out-of-fold tuning predictions."""

    model: TextRidgeModel
    alpha: float
    out_of_fold: np.ndarray


def cross_fit_ridge(
    texts: Sequence[str],
    y: ArrayLike,
    groups: ArrayLike,
    n_folds: int = 5,
    alphas: Sequence[float] = RIDGE_ALPHAS,
    max_features: int = 1000,
) -> CrossFit:
    """Choose α by squared error over folds of whole tasks (``groups``), then refit on everything."""
    y_arr, group_arr = np.asarray(y, float), np.asarray(groups)
    features = TfidfIndex.fit(texts, max_features=max_features)
    x = features.transform(texts)
    fold = np.unique(group_arr, return_inverse=True)[1] % n_folds
    oof = np.zeros((len(alphas), len(y_arr)))
    for k in range(n_folds):
        train = fold != k
        for a, (weights, intercept) in enumerate(ridge_path(x[train], y_arr[train], alphas)):
            oof[a, ~train] = clip(x[~train] @ weights + intercept)
    best = int(np.argmin(((oof - y_arr) ** 2).mean(axis=1)))
    weights, intercept = ridge_fit(x, y_arr, alphas[best])
    return CrossFit(TextRidgeModel(features, weights, intercept), float(alphas[best]), oof[best])
