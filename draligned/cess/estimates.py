"""The CESS estimators' results as arrays (:class:`Estimates`), the score bounds and the three CESS
combinations of the raw DR estimate (Eqs. 9, 12, 13).

Apart from :mod:`draligned.cess.estimators` (which computes them over a padded batch and defines the
report records) so that `cess estimate` over columns imports neither pydantic nor the trajectory
models: their import is most of its start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCORE_RANGE = (-1.0, 1.0)
"""Default score bounds [L, U] of Y, used for clipping Π and for the support interval."""


def clip(x: np.ndarray, bounds: tuple[float, float] = SCORE_RANGE) -> np.ndarray:
    """Π_[L,U]: restrict to the valid score range."""
    return np.clip(x, bounds[0], bounds[1])


def cess_shrink_then_clip(dr_raw: np.ndarray, mbar: np.ndarray, lam: float) -> np.ndarray:
    """CESS (Eq. 9): Π[m̄ + λ (θ̂_DR^raw − m̄)]."""
    return clip(mbar + lam * (dr_raw - mbar))


def cess_clip_then_shrink(dr_raw: np.ndarray, mbar: np.ndarray, lam: float) -> np.ndarray:
    """CESS ten-round variant (Eq. 13): Π[m̄ + λ (Π[θ̂_DR^raw] − m̄)]."""
    return clip(mbar + lam * (clip(dr_raw) - mbar))


def cess_opened_anchor(dr_raw: np.ndarray, opened: np.ndarray, lam: float) -> np.ndarray:
    """CESS five-round variant (Eq. 12): Π[θ̂_naive + λ (Π[θ̂_DR^raw] − θ̂_naive)]."""
    return clip(opened + lam * (clip(dr_raw) - opened))


@dataclass(frozen=True)
class WeightDiagnostics:
    """How much information the weights w_t = 1/(N p_t s_t) retain, per trajectory."""

    ess: np.ndarray
    """(B,) Kish effective sample size (Σw)² / Σw²."""
    max_weight: np.ndarray
    """(B,) largest weight."""


@dataclass(frozen=True)
class SupportBounds:
    """Eq. 10 per trajectory, with θ+ bounded by what the trajectory identifies.

    Applies when Assumption 1 fails on the logged history: some document had probability 0 in
    some observed round. The sequential correction is then not design-unbiased (a round with
    support S_t ⊊ D estimates the residual mean over S_t only), so no point estimate is given.
    The opened documents' Y are known; every other document's Y is only known to lie in [L, U]:
    θ* ∈ [(Σ_opened Y + (N − n_opened) L) / N, (Σ_opened Y + (N − n_opened) U) / N].
    When every document of D+ was opened (deterministic selection), θ+ is known exactly and this
    is Eq. 10 with width ρ(U − L). Otherwise it is Eq. 10 widened by (|D+| − n_opened)(U − L) / N:
    the reachable but unopened documents are treated as inaccessible (conservative), since a
    design estimate of their mean need not cover on a given trajectory. Coverage holds for every
    trajectory whose scores lie in [L, U].
    """

    applies: np.ndarray
    """(B,) True when some document had probability 0 in some observed round."""
    rho: np.ndarray
    """(B,) inaccessible target mass ρ = 1 − |D+| / N (D+: positive probability in some observed round)."""
    n_reachable: np.ndarray
    """(B,) |D+|, documents with positive probability in at least one observed round."""
    n_opened: np.ndarray
    """(B,) distinct documents opened, whose Y is known."""
    lower: np.ndarray
    """(B,) lower bound (Σ_opened Y + (N − n_opened) L) / N."""
    upper: np.ndarray
    """(B,) upper bound (Σ_opened Y + (N − n_opened) U) / N."""


@dataclass(frozen=True)
class Estimates:
    """Every estimator and diagnostic for a batch, as (B,) arrays."""

    opened_mean: np.ndarray
    """Mean Y over the selections (repeats counted)."""
    outcome_regression: np.ndarray
    """Full-pool mean prediction m̄."""
    ipw_raw: np.ndarray
    """Sequential IPW (Eq. 6, m ≡ 0)."""
    dr_raw: np.ndarray
    """Raw sequential DR (Eq. 6)."""
    cess: np.ndarray
    """Shrink-then-clip CESS (Eq. 9)."""
    cess_clip_then_shrink: np.ndarray
    """Clip-then-shrink CESS (Eq. 13)."""
    cess_opened_anchor: np.ndarray
    """Opened-Mean-anchored CESS (Eq. 12)."""
    weights: WeightDiagnostics
    """ESS and largest weight."""
    theta_star: np.ndarray
    """Pool target θ*, NaN when some Y is unknown."""
    support: SupportBounds
    """Support interval (Eq. 10) and whether it applies."""
