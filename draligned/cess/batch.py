"""Many logged trajectories as padded numpy arrays, the input of every estimator.

Trajectories are padded to K_max rounds (``mask`` marks observed rounds) and to
N_max documents (``doc_mask`` marks real documents), so the estimators of
:mod:`draligned.cess.estimators` are single vectorized expressions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from draligned.cess.trajectory import Trajectory


@dataclass(frozen=True)
class TrajectoryBatch:
    """B trajectories; arrays are (B, K_max) per round or (B, N_max) per document."""

    chosen: np.ndarray
    """(B, K) index of the chosen document J_t (0 in unobserved rounds)."""
    y: np.ndarray
    """(B, K) evidence score Y_{J_t} of the chosen document (0 in unobserved rounds)."""
    p: np.ndarray
    """(B, K) logged selection probability p_t of the chosen document (1 in unobserved rounds)."""
    stop: np.ndarray
    """(B, K) logged stop probability c_t before round t (0 in unobserved rounds)."""
    mask: np.ndarray
    """(B, K) True for observed rounds t ≤ T."""
    budget: np.ndarray
    """(B,) maximum budget K of each trajectory."""
    doc_m: np.ndarray
    """(B, N) outcome-model prediction m(X_i) per document (0 for padding)."""
    doc_y: np.ndarray
    """(B, N) evidence score per document, NaN where unknown or padding (target only)."""
    doc_mask: np.ndarray
    """(B, N) True for real pool documents."""
    first_support: np.ndarray
    """(B, N) first observed round (0-based) in which the document had positive probability, K_max if none."""
    full_support: np.ndarray
    """(B, K) True when every pool document had positive probability in round t (and in unobserved rounds)."""

    @property
    def n_rounds(self) -> np.ndarray:
        """(B,) observed rounds T."""
        return self.mask.sum(axis=1)

    @property
    def n_docs(self) -> np.ndarray:
        """(B,) pool size N."""
        return self.doc_mask.sum(axis=1)

    @property
    def m(self) -> np.ndarray:
        """(B, K) prediction m(X_{J_t}) of the chosen document."""
        return np.take_along_axis(self.doc_m, self.chosen, axis=1)

    @property
    def mbar(self) -> np.ndarray:
        """(B,) full-pool mean prediction m̄."""
        return np.where(self.doc_mask, self.doc_m, 0.0).sum(axis=1) / self.n_docs

    @property
    def reach(self) -> np.ndarray:
        """(B, K) reach probability s_t = Π_{k≤t} (1 − c_k) (Eq. 5)."""
        return np.cumprod(1.0 - np.where(self.mask, self.stop, 0.0), axis=1)

    @property
    def reachable(self) -> np.ndarray:
        """(B, N) documents in D+: positive probability in at least one observed round."""
        return self.doc_mask & (self.first_support < self.n_rounds[:, None])

    @property
    def round_varying_support(self) -> np.ndarray:
        """(B,) True when some observed round gave some document probability 0 (Assumption 1 fails)."""
        return ~np.all(self.full_support | ~self.mask, axis=1)

    @property
    def opened(self) -> np.ndarray:
        """(B, N) documents selected in at least one observed round."""
        out = np.zeros(self.doc_mask.shape, bool)
        rows, rounds = np.nonzero(self.mask)
        out[rows, self.chosen[rows, rounds]] = True
        return out

    @property
    def opened_y_sum(self) -> np.ndarray:
        """(B,) Σ Y over the distinct documents opened (each counted once)."""
        y = np.zeros(self.doc_mask.shape)
        rows, rounds = np.nonzero(self.mask)
        y[rows, self.chosen[rows, rounds]] = self.y[rows, rounds]
        return y.sum(axis=1)

    @property
    def theta_star(self) -> np.ndarray:
        """(B,) pool target θ* = mean of Y over the pool (Eq. 1); NaN when some Y is unknown."""
        y = np.where(self.doc_mask, self.doc_y, 0.0)
        complete = ~np.any(self.doc_mask & np.isnan(self.doc_y), axis=1)
        return np.where(complete, y.sum(axis=1) / self.n_docs, np.nan)

    def prefix(self, k: int) -> TrajectoryBatch:
        """The first k rounds with budget k: the estimate 'after round k' (paper Table 10)."""
        cut = slice(0, k)
        return replace(
            self,
            chosen=self.chosen[:, cut],
            y=self.y[:, cut],
            p=self.p[:, cut],
            stop=self.stop[:, cut],
            mask=self.mask[:, cut],
            budget=np.minimum(self.budget, k),
            first_support=np.minimum(self.first_support, k),
            full_support=self.full_support[:, cut],
        )

    def with_predictions(self, doc_m: np.ndarray) -> TrajectoryBatch:
        """The same trajectories under another outcome model."""
        return replace(self, doc_m=np.where(self.doc_mask, doc_m, 0.0))

    def take(self, rows: np.ndarray) -> TrajectoryBatch:
        """A sub-batch of the given trajectory rows (indices or boolean mask)."""
        return TrajectoryBatch(**{name: getattr(self, name)[rows] for name in self.__dataclass_fields__})

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> TrajectoryBatch:
        """Pad validated trajectories into one batch (m ≡ 0 where ``pool.m`` is absent)."""
        b = len(trajectories)
        k = max(max(t.budget, len(t.rounds)) for t in trajectories)
        n = max(len(t.pool.doc_ids) for t in trajectories)
        chosen, y, mask = np.zeros((b, k), int), np.zeros((b, k)), np.zeros((b, k), bool)
        p, stop = np.ones((b, k)), np.zeros((b, k))
        doc_m, doc_y, doc_mask = np.zeros((b, n)), np.full((b, n), np.nan), np.zeros((b, n), bool)
        first_support = np.full((b, n), k)
        full_support = np.ones((b, k), bool)
        for row, traj in enumerate(trajectories):
            size, rounds = len(traj.pool.doc_ids), len(traj.rounds)
            index = {doc: i for i, doc in enumerate(traj.pool.doc_ids)}
            probs = np.array([r.probs for r in traj.rounds])
            chosen[row, :rounds] = [index[r.chosen] for r in traj.rounds]
            p[row, :rounds] = probs[np.arange(rounds), chosen[row, :rounds]]
            stop[row, :rounds] = [r.stop_prob for r in traj.rounds]
            y[row, :rounds] = traj.chosen_scores()
            mask[row, :rounds] = True
            doc_mask[row, :size] = True
            if traj.pool.m is not None:
                doc_m[row, :size] = traj.pool.m
            if traj.pool.y is not None:
                doc_y[row, :size] = [np.nan if v is None else v for v in traj.pool.y]
            positive = probs > 0
            first_support[row, :size] = np.where(positive.any(axis=0), positive.argmax(axis=0), k)
            full_support[row, :rounds] = positive.all(axis=1)
        return cls(
            chosen,
            y,
            p,
            stop,
            mask,
            np.array([t.budget for t in trajectories]),
            doc_m,
            doc_y,
            doc_mask,
            first_support,
            full_support,
        )
