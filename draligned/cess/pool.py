"""Logged candidate-pool search: the controller behind a pool-backed `search` tool.

On every search the controller computes a probability vector over the WHOLE
pool — TF-IDF relevance to the query (optionally MMR for diversity) → softmax
with temperature, a ranking tilt (supporting-first / opposing-first), a
repetition penalty, and an ε-uniform share so every document keeps positive
probability (Assumption 1) — then samples one document by inverse CDF with a
common random number that depends only on (pair seed, round). Paired branches
(P vs Q arms, pro vs anti rankings, agent vs uniform selection) therefore share
their draws. Stopping is ``fixed`` (K rounds) or ``adaptive`` (the agent's wish
becomes a sampled decision with a logged probability, own CRN stream).
Each round is logged in the trajectory format of :mod:`draligned.cess.trajectory`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from draligned.cess.text import TfidfIndex, tokenize
from draligned.cess.trajectory import Ranking, Trajectory, TrajectoryPool, TrajectoryRound
from draligned.records import Record

_STREAMS = {"select": 0, "stop": 1}
_TILT = {"original": 0.0, "pro": 1.0, "anti": -1.0}


class PoolDocument(Record):
    """One candidate document."""

    id: str
    """Stable document id (logged as the chosen id)."""
    title: str = ""
    """Title shown to the agent; also used for relevance."""
    text: str
    """Document text returned to the agent; used for relevance."""
    score: float | None = Field(default=None, ge=-1.0, le=1.0)
    """Optional evidence score (ranking attribute): +1 favours the P endpoint (supporting), −1 Q."""


class CandidatePool(Record):
    """A fixed candidate pool (the contents of a pool file)."""

    documents: list[PoolDocument] = Field(min_length=1)
    """The candidate documents in their canonical order (the order of every probability vector)."""

    @model_validator(mode="after")
    def _unique_ids(self) -> CandidatePool:
        if len({d.id for d in self.documents}) != len(self.documents):
            raise ValueError("document ids must be unique")
        return self


class ControllerConfig(Record):
    """Settings of the pool search controller (fixed before any search); every value finite and bounded."""

    budget: int = Field(default=10, ge=1, le=10_000)
    """Maximum number of searches K."""
    selection: Literal["agent", "uniform"] = "agent"
    """``agent``: relevance-driven probabilities; ``uniform``: 1/N for every document."""
    stopping: Literal["fixed", "adaptive"] = "fixed"
    """``fixed``: exactly K searches; ``adaptive``: the agent's stop wish becomes a sampled decision."""
    temperature: float = Field(default=0.1, gt=0.0, le=1000.0, allow_inf_nan=False)
    """Softmax temperature on cosine relevance (smaller = greedier)."""
    ranking_strength: float = Field(default=1.0, ge=0.0, le=1000.0, allow_inf_nan=False)
    """Logit tilt per unit score under supporting-first (+) or opposing-first (−) ranking."""
    repetition_penalty: float = Field(default=2.0, ge=0.0, le=1000.0, allow_inf_nan=False)
    """Logit penalty per earlier opening of the same document."""
    epsilon: float = Field(default=0.1, ge=0.0, le=1.0)
    """Uniform exploration share: p = (1 − ε) softmax + ε / N."""
    mmr_lambda: float | None = Field(default=None, ge=0.0, le=1.0)
    """If set, relevance becomes MMR: λ·rel − (1 − λ)·max similarity to opened documents."""
    stop_prob_wish_stop: float = Field(default=0.75, ge=0.0, lt=1.0)
    """Stop probability when the agent wishes to stop (paper: 0.75)."""
    stop_prob_wish_continue: float = Field(default=0.10, ge=0.0, lt=1.0)
    """Stop probability when the agent wishes to continue (paper: 0.10)."""


class SearchRound(Record):
    """The log of one search round."""

    round: int
    """Round number t, starting at 1."""
    query: str
    """The query as issued."""
    probs: list[float]
    """Selection probability of every pool document, in pool order."""
    chosen: str
    """Id of the sampled document."""
    chosen_index: int
    """Position of the sampled document in the pool."""
    stop_prob: float
    """Logged probability c_t of stopping before this round."""
    u_select: float
    """The common uniform draw used for inverse-CDF selection."""
    u_stop: float | None
    """The common uniform draw of the stop decision (None when no decision was sampled)."""

    def to_trajectory_round(self, y: float | None = None) -> TrajectoryRound:
        """This round in the trajectory file format."""
        return TrajectoryRound(probs=self.probs, chosen=self.chosen, stop_prob=self.stop_prob, y=y)


def crn_uniform(pair_seed: int, round_: int, stream: Literal["select", "stop"]) -> float:
    """Common random number in [0, 1) that depends only on (pair seed, round, stream)."""
    return float(np.random.default_rng([pair_seed, _STREAMS[stream], round_]).random())


def inverse_cdf(probs: np.ndarray, u: np.ndarray | float) -> np.ndarray:
    """Index whose CDF interval contains u, along the last axis (zero-probability entries are never hit)."""
    cdf = np.cumsum(probs, axis=-1)
    hits = (cdf <= np.asarray(u)[..., None] * cdf[..., -1:]).sum(axis=-1)
    return np.minimum(hits, probs.shape[-1] - 1)


def explore_softmax(logits: np.ndarray, epsilon: float) -> np.ndarray:
    """(1 − ε) softmax(logits) + ε / N along the last axis: every entry keeps probability ≥ ε / N."""
    soft = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (1.0 - epsilon) * soft / soft.sum(axis=-1, keepdims=True) + epsilon / logits.shape[-1]


@dataclass(frozen=True)
class PoolIndex:
    """TF-IDF vectors of a candidate pool (fit on the pool's own texts)."""

    pool: CandidatePool
    tfidf: TfidfIndex
    vectors: np.ndarray

    @classmethod
    def build(cls, pool: CandidatePool, tokenizer: Callable[[str], list[str]] = tokenize) -> PoolIndex:
        """Index title + text of every document (study pools pass the corpus's CJK-aware tokenizer)."""
        texts = [f"{d.title} {d.text}" for d in pool.documents]
        tfidf = TfidfIndex.fit(texts, tokenizer=tokenizer)
        return cls(pool, tfidf, tfidf.transform(texts))

    @property
    def scores(self) -> np.ndarray:
        """Evidence scores (the ranking attribute); error if any is missing."""
        if any(d.score is None for d in self.pool.documents):
            raise ValueError("a ranked condition needs an evidence score for every pool document")
        return np.array([d.score for d in self.pool.documents])

    def relevance(self, query: str, counts: np.ndarray, mmr_lambda: float | None) -> np.ndarray:
        """Cosine relevance to the query, or MMR against the documents opened so far."""
        rel = self.vectors @ self.tfidf.transform([query])[0]
        if mmr_lambda is None:
            return rel
        opened = counts > 0
        redundancy = (self.vectors @ self.vectors[opened].T).max(axis=1) if opened.any() else 0.0
        return mmr_lambda * rel - (1.0 - mmr_lambda) * redundancy


def selection_probs(
    index: PoolIndex, query: str, ranking: Ranking, counts: np.ndarray, config: ControllerConfig
) -> np.ndarray:
    """Probability of every pool document for this search (``counts`` = earlier openings per document)."""
    n = len(counts)
    if config.selection == "uniform":
        return np.full(n, 1.0 / n)
    logits = index.relevance(query, counts, config.mmr_lambda) / config.temperature
    logits = logits - config.repetition_penalty * counts
    if ranking != "original":
        logits = logits + _TILT[ranking] * config.ranking_strength * index.scores
    return explore_softmax(logits, config.epsilon)


class SampledStop(Record):
    """The logged decision to stop before a round (adaptive stopping)."""

    round: int
    """The round t that was not run."""
    stop_prob: float
    """Probability c_t with which the stop was sampled."""
    u_stop: float
    """The common uniform draw (stop when u_stop < c_t)."""


class PoolController:
    """Stateful search over one pool for one trajectory; every decision is logged."""

    def __init__(
        self, index: PoolIndex, config: ControllerConfig, ranking: Ranking = "original", pair_seed: int = 0
    ) -> None:
        self.index, self.config, self.ranking, self.pair_seed = index, config, ranking, pair_seed
        self.counts = np.zeros(len(index.pool.documents))
        self.rounds: list[SearchRound] = []
        self.stopped: SampledStop | None = None
        self.done = False

    def step(self, query: str, wish_stop: bool = False) -> SearchRound | None:
        """One search: sample stopping (rounds ≥ 2, adaptive only), then a document; None once stopped."""
        if self.done:
            raise RuntimeError("the search has already ended")
        t = len(self.rounds) + 1
        stop_prob, u_stop = 0.0, None
        if self.config.stopping == "adaptive" and t > 1:
            cfg = self.config
            stop_prob = cfg.stop_prob_wish_stop if wish_stop else cfg.stop_prob_wish_continue
            u_stop = crn_uniform(self.pair_seed, t, "stop")
            if u_stop < stop_prob:
                self.stopped = SampledStop(round=t, stop_prob=stop_prob, u_stop=u_stop)
                self.done = True
                return None
        probs = selection_probs(self.index, query, self.ranking, self.counts, self.config)
        u = crn_uniform(self.pair_seed, t, "select")
        j = int(inverse_cdf(probs, u))
        self.counts[j] += 1
        record = SearchRound(
            round=t,
            query=query,
            probs=probs.tolist(),
            chosen=self.index.pool.documents[j].id,
            chosen_index=j,
            stop_prob=stop_prob,
            u_select=u,
            u_stop=u_stop,
        )
        self.rounds.append(record)
        self.done = t >= self.config.budget
        return record

    def trajectory(
        self,
        trajectory_id: str,
        task_id: str,
        y: Sequence[float] | None = None,
        m: Sequence[float] | None = None,
    ) -> Trajectory:
        """The logged search as a trajectory record (``y``/``m`` per pool document when known)."""
        docs = self.index.pool.documents
        return Trajectory(
            trajectory_id=trajectory_id,
            task_id=task_id,
            ranking=self.ranking,
            budget=self.config.budget,
            pool=TrajectoryPool(
                doc_ids=[d.id for d in docs],
                y=None if y is None else list(y),
                m=None if m is None else list(m),
            ),
            rounds=[r.to_trajectory_round() for r in self.rounds],
        )
