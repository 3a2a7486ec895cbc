"""Logged candidate-pool search as the ``search`` tool of an executor (CESS paper, section 3).

A study's ``[search]`` table selects the backend. With ``backend = "pool"`` every run gets
its own :class:`PoolSearchBackend`: each ``search(query)`` asks the CESS
:class:`~draligned.cess.pool.PoolController` for a probability vector over the whole pool
(query relevance, ranking tilt, repetition penalty, ε share), samples ONE document with
common random numbers, logs a :class:`~draligned.records.PoolRoundEvent` through the run's
writer (the one the executor writes with) and returns that document as a one-result list, so
the result block, ``read(url)`` and the simulated agent work unchanged.

Adaptive stopping (Eq. 5): every search call is a step the agent wants to take; its
*wish* is read from what it did since the previous search. A draft saved in between
(``write_report``) is a wish to stop — the agent judged its research good enough to
write up — otherwise a wish to continue. The controller turns the wish into c_t = 0.75
or 0.10 (defaults), samples the decision with its own common random number and logs it.
After a sampled stop, or once K documents were opened, searches answer
:data:`SPENT_MESSAGE`. An agent that ends its run on its own before that leaves an
unlogged stop; such runs are flagged (``ended_by = "agent"``) by :mod:`draligned.cess.archive_runs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from draligned.archive.writer import RunWriter
from draligned.cess.pool import PoolController, PoolIndex
from draligned.hashing import sha256_json
from draligned.records import DraftEvent, PoolRoundEvent, RunRecord, Slot
from draligned.tools.acquisition import Backend, SearchSpent
from draligned.tools.corpus import Corpus, CorpusDocument, SearchHit, load_corpus, tokenize
from draligned.tools.pool_file import LoadedPool, load_pool
from draligned.tools.search_spec import SearchSpec
from draligned.tools.web import open_web

if TYPE_CHECKING:  # the web backend imports httpx: only a study that uses it loads it (in open_web)
    from draligned.tools.web.backend import StudyWeb

SPENT_MESSAGE = (
    "The search budget for this pool is spent: search returns no more documents in this run. "
    "Continue with the sources you have already found."
)


def pair_seed(slot: Slot) -> int:
    """Seed of the common random numbers: card, model, harness and replicate seed only, so the
    P and Q arms, the rankings and the selection × stopping cells of a replicate share draws."""
    key = {"card_id": slot.card_id, "model": slot.model, "harness": slot.harness, "seed": slot.seed}
    return int(sha256_json(key)[:16], 16)


def _wish_stop(record: RunRecord) -> bool:
    """A draft saved since the previous pool round (or since the start) is a wish to stop."""
    for ev in reversed(record.events):
        if isinstance(ev, PoolRoundEvent):
            return False
        if isinstance(ev, DraftEvent):
            return True
    return False


class PoolSearchBackend:
    """The search backend of ONE run over one pool; logs every round through the run's writer."""

    def __init__(self, pool: LoadedPool, controller: PoolController, writer: RunWriter) -> None:
        self.pool, self.controller, self.writer = pool, controller, writer
        self.sha256 = pool.sha256
        self.pool_blob = writer.archive.put_blob(pool.path.read_bytes())
        if self.pool_blob != pool.sha256:
            raise ValueError(f"{pool.path}: pool file changed while the study was running")
        self._opened: dict[str, CorpusDocument] = {}

    def search(self, query: str, k: int) -> list[SearchHit]:
        """One controller round: one sampled document, or :class:`SearchSpent` once stopped."""
        if self.controller.done:
            raise SearchSpent(SPENT_MESSAGE)
        wish = _wish_stop(self.writer.record)
        chosen = self.controller.step(query, wish_stop=wish)
        budget = self.controller.config.budget
        if chosen is None:
            stop = self.controller.stopped
            assert stop is not None  # step returns None only after a sampled stop
            self.writer.pool_round(self.pool_blob, budget, round=stop.round, query=query, wish_stop=wish,
                                   stop_prob=stop.stop_prob, u_stop=stop.u_stop)
            raise SearchSpent(SPENT_MESSAGE)
        self.writer.pool_round(self.pool_blob, budget, round=chosen.round, query=query, wish_stop=wish,
                               stop_prob=chosen.stop_prob, u_stop=chosen.u_stop, probs=chosen.probs,
                               chosen=chosen.chosen, p_chosen=chosen.probs[chosen.chosen_index],
                               u_select=chosen.u_select)
        page = self.pool.documents[chosen.chosen_index].page()
        self._opened[page.url] = page
        return [SearchHit(doc_id=page.id, title=page.title, url=page.url, text=page.text, score=1.0)]

    def page(self, url: str) -> CorpusDocument | None:
        """Only documents this run's search returned can be read: what was opened is what was logged."""
        return self._opened.get(url)


@dataclass(frozen=True)
class StudySearch:
    """The search data of a study, loaded once, and the per-run backend factory."""

    spec: SearchSpec
    sha256: str
    """Identity recorded as ``Slot.search_sha256``: the corpus sha, a hash of pools + controller, or of the web
    backend's declaration."""
    corpus: Corpus | None
    pools: dict[str, LoadedPool]
    indexes: dict[str, PoolIndex]
    web: StudyWeb | None = None
    """The study's shared web (web backends only)."""

    def backend_for(self, slot: Slot, writer: RunWriter) -> Backend:
        """The corpus, the study's web seen from this run's archive, or a fresh logged pool backend for this
        run's card and cell, logging through ``writer``."""
        if self.web is not None:
            from draligned.tools.web.backend import RunWeb  # loaded already by open_web

            return RunWeb(self.web, writer.archive)
        cond = slot.search_condition
        if cond is None:
            assert self.corpus is not None
            return self.corpus
        config = self.spec.controller.model_copy(update={"selection": cond.selection, "stopping": cond.stopping})
        controller = PoolController(self.indexes[slot.card_id], config, cond.ranking, pair_seed(slot))
        return PoolSearchBackend(self.pools[slot.card_id], controller, writer)

    async def aclose(self) -> None:
        """Close the web backend's clients (nothing to close for corpus and pool search)."""
        if self.web is not None:
            await self.web.aclose()


def open_search(spec: SearchSpec, corpus_path: Path | None, pool_paths: dict[str, Path],
                store_root: Path | None = None) -> StudySearch:
    """Load the corpus or the pools (validated), or open the web and its store at ``store_root``, and compute
    the search identity. Raises ValueError (a :class:`~draligned.tools.web.WebConfigError` names its field)."""
    if spec.is_web:
        assert store_root is not None
        web = open_web(spec, store_root)
        return StudySearch(spec, web.sha256, None, {}, {}, web)
    if spec.backend == "corpus":
        assert corpus_path is not None
        corpus = load_corpus(corpus_path)
        return StudySearch(spec, corpus.sha256, corpus, {}, {})
    pools = {card: load_pool(p) for card, p in sorted(pool_paths.items())}
    for card, pool in pools.items():
        if any(c.ranking != "original" for c in spec.conditions() if c) and None in pool.scores:
            raise ValueError(f"{pool.path}: pro/anti rankings need a score for every document (card {card})")
    identity = {"pools": {c: p.sha256 for c, p in pools.items()},
                "controller": spec.controller.model_dump(mode="json", exclude={"selection", "stopping"})}
    # The corpus tokenizer: CJK bigrams and "6,000" == "6000", as in corpus search.
    indexes = {card: PoolIndex.build(pool.candidates, tokenize) for card, pool in pools.items()}
    return StudySearch(spec, sha256_json(identity), None, pools, indexes)
