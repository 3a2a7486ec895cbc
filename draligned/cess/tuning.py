"""Coefficients chosen on tuning tasks only (CESS paper, section 3.3, appendix F).

λ of CESS and α of the Opened Mean shrunk to the tuning mean are the grid values
0, 0.05, ..., 1 with the smallest MAE (within question, then across questions)
on the tuning batch; evaluation outcomes never enter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimates import cess_clip_then_shrink, cess_opened_anchor, cess_shrink_then_clip, clip
from draligned.cess.estimators import opened_mean, sequential_dr
from draligned.cess.metrics import mae

LAMBDA_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)
"""The tuning grid 0, 0.05, ..., 1."""

Variant = Literal["shrink_then_clip", "clip_then_shrink", "opened_anchor"]


@dataclass(frozen=True)
class LambdaFit:
    """The chosen coefficient (λ or α) and the tuning MAE of every grid value."""

    lam: float
    grid: np.ndarray
    mae: np.ndarray


def cess_variant(batch: TrajectoryBatch, lam: float, variant: Variant) -> np.ndarray:
    """CESS estimates of one variant: Eq. 9, Eq. 13 or Eq. 12."""
    dr = sequential_dr(batch)
    if variant == "shrink_then_clip":
        return cess_shrink_then_clip(dr, batch.mbar, lam)
    if variant == "clip_then_shrink":
        return cess_clip_then_shrink(dr, batch.mbar, lam)
    return cess_opened_anchor(dr, opened_mean(batch), lam)


def tune_lambda(
    tuning: TrajectoryBatch, question: np.ndarray, variant: Variant, grid: np.ndarray = LAMBDA_GRID
) -> LambdaFit:
    """Grid-search λ by MAE against θ* on tuning trajectories (ties → smallest λ)."""
    target = tuning.theta_star
    if np.isnan(target).any():
        raise ValueError("tuning trajectories need complete pool scores to compute θ*")
    errors = np.array([mae(cess_variant(tuning, float(lam), variant), target, question) for lam in grid])
    return LambdaFit(lam=float(grid[int(np.argmin(errors))]), grid=grid, mae=errors)


ALPHA_GRID = LAMBDA_GRID
"""α grid of the shrink-to-tuning-mean baseline: 0, 0.05, ..., 1 (appendix F)."""


def shrink_to_tuning_mean(opened: np.ndarray, tuning_mean: float, alpha: float) -> np.ndarray:
    """Opened Mean shrunk to the tuning mean a (appendix F): Π[o + α (a − o)]."""
    return clip(opened + alpha * (tuning_mean - opened))


def tune_alpha(
    tuning: TrajectoryBatch, question: np.ndarray, tuning_mean: float, grid: np.ndarray = ALPHA_GRID
) -> LambdaFit:
    """Grid-search α by MAE against θ* averaged equally over tuning questions (ties → smallest α)."""
    opened, target = opened_mean(tuning), tuning.theta_star
    errors = np.array([mae(shrink_to_tuning_mean(opened, tuning_mean, float(a)), target, question) for a in grid])
    return LambdaFit(lam=float(grid[int(np.argmin(errors))]), grid=grid, mae=errors)
