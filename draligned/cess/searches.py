"""Non-LLM searches over PERSPECTRUM pools with the logged pool controller.

Two controllers (TF-IDF relevance, and MMR for diversity) search each claim's
pool with query drift — the query is the claim plus the documents just read —
under supporting-first and opposing-first rankings and fixed or adaptive
stopping. Under adaptive stopping the searcher recommends stopping by a rule
(``one_sided``: the evidence read looks one-sided; ``both_sides``: both sides
have been read), and the controller turns the recommendation into a stop
probability of 0.75 or 0.10 and samples it (paper appendix F).
Both rankings of a (claim, controller, stopping, seed) cell share one pair seed,
so their uniform draws are common random numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from draligned.cess.perspectrum import PerspectrumClaim
from draligned.cess.pool import ControllerConfig, PoolController, PoolIndex
from draligned.cess.stop_rules import StopRule
from draligned.cess.trajectory import Ranking, Trajectory
from draligned.records import Record

Stopping = Literal["fixed", "adaptive"]
CONTROLLERS = ("tfidf", "mmr")
STOPPING: tuple[Stopping, Stopping] = ("fixed", "adaptive")
RANKINGS: tuple[Ranking, Ranking] = ("pro", "anti")


class SearchSettings(Record):
    """How the benchmark searches (fixed before any outcome is seen)."""

    seeds: int = Field(default=3, ge=1)
    """Paired replicates per (claim, controller, stopping)."""
    budget: int = Field(default=10, ge=1)
    """Maximum rounds K."""
    epsilon: float = 0.2
    """Uniform exploration share of the controller."""
    temperature: float = 0.3
    """Softmax temperature on relevance."""
    ranking_strength: float = 1.0
    """Logit tilt per unit of visible evidence direction under pro / anti ranking."""
    repetition_penalty: float = 2.0
    """Logit penalty per earlier opening."""
    mmr_lambda: float = 0.5
    """Relevance weight of the MMR controller."""
    drift_docs: int = 2
    """The query is the claim plus the texts of this many most recent documents read."""
    stop_rule: StopRule = "one_sided"
    """Adaptive stopping recommendation (≥ 2 documents read): ``one_sided`` once |mean Y read| ≥
    ``stop_wish_threshold``; ``both_sides`` once a supporting and an opposing document were read."""
    stop_wish_threshold: float = 0.5
    """Threshold of the ``one_sided`` rule."""


def wish_stop(y_read: np.ndarray, settings: SearchSettings) -> bool:
    """The searcher's stop recommendation from the scores of the documents read so far."""
    if len(y_read) < 2:
        return False
    if settings.stop_rule == "both_sides":
        return bool((y_read > 0).any() and (y_read < 0).any())
    return abs(float(y_read.mean())) >= settings.stop_wish_threshold


@dataclass(frozen=True)
class SearchLabel:
    """Design labels of one trajectory."""

    claim_id: int
    controller: str
    stopping: Stopping
    ranking: Ranking
    seed: int

    @property
    def config(self) -> str:
        """The (controller, stopping) combination c of Eq. 16."""
        return f"{self.controller}/{self.stopping}"


def pair_seed(claim_id: int, controller: str, stopping: str, seed: int) -> int:
    """Seed shared by the pro and anti branches of one cell."""
    entropy = [claim_id, CONTROLLERS.index(controller), STOPPING.index(stopping), seed]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def search_claim(
    claim: PerspectrumClaim, index: PoolIndex, label: SearchLabel, settings: SearchSettings
) -> Trajectory:
    """One logged search of a claim's pool."""
    config = ControllerConfig(
        budget=settings.budget,
        stopping=label.stopping,
        temperature=settings.temperature,
        ranking_strength=settings.ranking_strength,
        repetition_penalty=settings.repetition_penalty,
        epsilon=settings.epsilon,
        mmr_lambda=settings.mmr_lambda if label.controller == "mmr" else None,
    )
    seed = pair_seed(label.claim_id, label.controller, label.stopping, label.seed)
    controller = PoolController(index, config, ranking=label.ranking, pair_seed=seed)
    docs, y = claim.pool.documents, claim.y
    read: list[int] = []
    query = claim.text
    while not controller.done:
        record = controller.step(query, wish_stop=wish_stop(y[read], settings))
        if record is None:
            break
        read.append(record.chosen_index)
        recent = " ".join(docs[j].text for j in read[-settings.drift_docs :])
        query = f"{claim.text} {recent}"
    trajectory_id = f"c{label.claim_id}-{label.config}-{label.ranking}-s{label.seed}"
    return controller.trajectory(trajectory_id, str(label.claim_id), y=y.tolist())


def run_searches(
    claims: Sequence[PerspectrumClaim], settings: SearchSettings
) -> tuple[list[Trajectory], list[SearchLabel]]:
    """Every claim × controller × stopping × seed × ranking."""
    trajectories, labels = [], []
    for claim in claims:
        index = PoolIndex.build(claim.pool)
        for controller in CONTROLLERS:
            for stopping in STOPPING:
                for seed in range(settings.seeds):
                    for ranking in RANKINGS:
                        label = SearchLabel(claim.claim_id, controller, stopping, ranking, seed)
                        trajectories.append(search_claim(claim, index, label, settings))
                        labels.append(label)
    return trajectories, labels
