"""A vectorized simulator of adaptive search over finite candidate pools.

Each pool has N documents with features X (correlated with the evidence score
Y through a nonlinear link and a pool-level shift) and a visible ranking
attribute correlated with Y. A search keeps a query vector that drifts toward
the features of the documents it opens, so early evidence steers later
selection; the controller's probabilities mix a softmax over relevance, an
attribute tilt (biased selection or a ranking condition) and a repetition
penalty with an ε-uniform share. Informative stopping turns a wish to stop
(mean opened evidence above a threshold) into stop probability 0.75, else 0.10.
Uniform draws are shared across paired conditions (common random numbers).
The experiments built on this engine live in :mod:`draligned.cess.experiments`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.outcome import ridge_fit
from draligned.cess.pool import explore_softmax, inverse_cdf

N_FEATURES = 6
_BETA = np.linspace(1.0, 0.25, N_FEATURES) / np.sqrt(N_FEATURES)


@dataclass(frozen=True)
class SimPools:
    """P simulated pools of N documents."""

    x: np.ndarray
    """(P, N, d) pre-search features."""
    y: np.ndarray
    """(P, N) evidence scores in (−1, 1)."""
    attr: np.ndarray
    """(P, N) visible ranking attribute, correlated with Y."""
    query: np.ndarray
    """(P, d) initial query vector."""

    @property
    def theta_star(self) -> np.ndarray:
        """(P,) pool targets."""
        return self.y.mean(axis=1)


def make_pools(rng: np.random.Generator, n_pools: int, n_docs: int, shift_sd: float = 0.9) -> SimPools:
    """Pools with Y = tanh(2Xβ + pool shift + noise) and attribute = Y + noise.

    The pool shift (sd ``shift_sd``) is invisible to the features, so a linear
    outcome model leaves a pool-level residual that informative stopping can exploit.
    """
    x = rng.normal(size=(n_pools, n_docs, N_FEATURES))
    shift = rng.normal(0.0, shift_sd, size=(n_pools, 1))
    y = np.tanh(x @ _BETA * 2.0 + shift + rng.normal(0.0, 0.5, size=(n_pools, n_docs)))
    attr = y + rng.normal(0.0, 0.5, size=y.shape)
    query = rng.normal(size=(n_pools, N_FEATURES)) / np.sqrt(N_FEATURES)
    return SimPools(x=x, y=y, attr=attr, query=query)


def fit_predictions(tuning: SimPools, pools: SimPools, alpha: float = 1.0) -> np.ndarray:
    """(P, N) predictions of a linear ridge model fit on separate tuning pools (misspecified on purpose)."""
    weights, intercept = ridge_fit(tuning.x.reshape(-1, N_FEATURES), tuning.y.reshape(-1), alpha)
    return np.clip(pools.x @ weights + intercept, -1.0, 1.0)


@dataclass(frozen=True)
class Policy:
    """A search policy over simulated pools."""

    selection: Literal["uniform", "agent", "deterministic"] = "agent"
    """uniform: 1/N; agent: softmax with ε mixing; deterministic: argmax (no exploration)."""
    tilt: float = 0.0
    """Logit weight on the ranking attribute (> 0 biased / supporting-first, < 0 opposing-first)."""
    informative_stopping: bool = False
    """Adaptive stopping driven by the opened evidence; otherwise fixed K rounds."""
    drift: float = 0.5
    """Query update q ← (1 − drift) q + drift · x_opened."""
    epsilon: float = 0.1
    """Uniform exploration share of the agent policy."""
    temperature: float = 0.5
    """Softmax temperature on relevance x·q."""
    repetition_penalty: float = 1.0
    """Logit penalty per earlier opening."""
    stop_probs: tuple[float, float] = (0.75, 0.10)
    """Stop probability when the search wishes to stop / to continue."""
    stop_threshold: float = 0.0
    """The search wishes to stop once the mean opened evidence exceeds this value."""


def common_draws(
    rng: np.random.Generator, n_pools: int, n_runs: int, budget: int
) -> tuple[np.ndarray, np.ndarray]:
    """(selection, stopping) uniforms of shape (P, R, K), shared by every paired condition."""
    return rng.random((n_pools, n_runs, budget)), rng.random((n_pools, n_runs, budget))


def _probabilities(pools: SimPools, policy: Policy, query: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(P, R, N) selection probabilities of one round."""
    n = counts.shape[-1]
    if policy.selection == "uniform":
        return np.full(counts.shape, 1.0 / n)
    logits = np.einsum("pnd,prd->prn", pools.x, query) / policy.temperature
    logits += policy.tilt * pools.attr[:, None, :] - policy.repetition_penalty * counts
    if policy.selection == "deterministic":
        return (np.arange(n) == logits.argmax(axis=-1)[..., None]).astype(float)
    return explore_softmax(logits, policy.epsilon)


def run_search(
    pools: SimPools, policy: Policy, draws: tuple[np.ndarray, np.ndarray], predictions: np.ndarray
) -> TrajectoryBatch:
    """Run R searches per pool for K rounds; rows are ordered pool-major (P·R trajectories)."""
    u_select, u_stop = draws
    n_pools, n_runs, budget = u_select.shape
    n = pools.y.shape[1]
    shape = (n_pools, n_runs)
    query = np.broadcast_to(pools.query[:, None, :], (*shape, N_FEATURES)).copy()
    counts = np.zeros((*shape, n))
    active = np.ones(shape, bool)
    first_support = np.full((*shape, n), budget)
    full_support = np.ones((*shape, budget), bool)
    chosen = np.zeros((*shape, budget), int)
    p_chosen, stop = np.ones((*shape, budget)), np.zeros((*shape, budget))
    y_chosen, mask = np.zeros((*shape, budget)), np.zeros((*shape, budget), bool)
    pool_rows = np.arange(n_pools)[:, None]
    for t in range(budget):
        if policy.informative_stopping and t > 0:
            opened_mean = y_chosen[..., :t].sum(-1) / np.maximum(mask[..., :t].sum(-1), 1)
            stop[..., t] = np.where(opened_mean > policy.stop_threshold, *policy.stop_probs)
            active &= u_stop[..., t] >= stop[..., t]
        probs = _probabilities(pools, policy, query, counts)
        j = inverse_cdf(probs, u_select[..., t])
        mask[..., t] = active
        chosen[..., t] = j
        p_chosen[..., t] = np.take_along_axis(probs, j[..., None], -1)[..., 0]
        y_chosen[..., t] = np.where(active, pools.y[pool_rows, j], 0.0)
        newly = active[..., None] & (probs > 0) & (first_support == budget)
        first_support[newly] = t
        full_support[..., t] = (probs > 0).all(axis=-1)
        counts += active[..., None] * (np.arange(n) == j[..., None])
        x_open = pools.x[pool_rows, j]
        query = np.where(active[..., None], (1 - policy.drift) * query + policy.drift * x_open, query)
    rows = n_pools * n_runs

    def flat(a: np.ndarray) -> np.ndarray:
        return a.reshape(rows, *a.shape[2:])

    def per_run(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, n_runs, axis=0)

    return TrajectoryBatch(
        chosen=flat(chosen),
        y=flat(y_chosen),
        p=np.where(flat(mask), flat(p_chosen), 1.0),
        stop=np.where(flat(mask), flat(stop), 0.0),
        mask=flat(mask),
        budget=np.full(rows, budget),
        doc_m=per_run(predictions),
        doc_y=per_run(pools.y),
        doc_mask=np.ones((rows, n), bool),
        first_support=flat(first_support),
        full_support=flat(full_support),
    )
