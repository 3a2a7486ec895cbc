"""PERSPECTRUM v1.0 (Chen et al., NAACL 2019; CC BY-SA 4.0) as CESS candidate pools.

Each claim is a task. Its candidate documents are the perspectives of its
gold clusters (text from the perspective pool) with Y = +1 for a SUPPORT
cluster and −1 for UNDERMINE, averaged over clusters when a perspective is in
several. If ``evidence_pool_v1.0.json`` is present the documents can instead be
the evidence paragraphs linked to the clusters, Y averaged over links (Eq. 11).
Claims with at least ``min_docs`` documents and both signs are kept; train+dev
claims are tuning tasks, test claims are evaluation tasks. The release shares
documents between splits (a perspective can belong to a train and a test claim);
:func:`without_shared_documents` removes them from the tuning pools, so that, as in
the paper, no document is shared between tuning and test.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

import numpy as np

from draligned.cess.pool import CandidatePool, PoolDocument
from draligned.records import Record

CLAIMS_FILE = "perspectrum_with_answers_v1.0.json"
PERSPECTIVES_FILE = "perspective_pool_v1.0.json"
EVIDENCE_FILE = "evidence_pool_v1.0.json"
SPLIT_FILE = "dataset_split_v1.0.json"
_STANCE = {"support": 1.0, "undermine": -1.0}

Documents = Literal["auto", "perspectives", "evidence"]


class PerspectrumClaim(Record):
    """One claim with its candidate pool; every document's ``score`` is its Y."""

    claim_id: int
    """The release's cId."""
    text: str
    """The claim text (the first query of a search)."""
    split: Literal["train", "dev", "test"]
    """The release's split."""
    pool: CandidatePool
    """Candidate documents (perspectives or evidence paragraphs) with Y as score."""

    @property
    def y(self) -> np.ndarray:
        """Evidence scores in pool order."""
        return np.array([d.score for d in self.pool.documents], dtype=float)

    @property
    def theta_star(self) -> float:
        """Pool target θ* (Eq. 1)."""
        return float(self.y.mean())


class PerspectrumData(Record):
    """Eligible claims split into tuning (train + dev) and evaluation (test) tasks."""

    documents: Literal["perspectives", "evidence"]
    """What the candidate documents are."""
    tuning: list[PerspectrumClaim]
    """Train and dev claims: fit outcome models and λ here only."""
    evaluation: list[PerspectrumClaim]
    """Test claims: evaluation only."""


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _links(claim: dict, key: str) -> dict[int, list[float]]:
    """Stance labels (±1) per linked item id (``pids`` or ``evidence``) over the claim's clusters."""
    links: dict[int, list[float]] = defaultdict(list)
    for cluster in claim["perspectives"]:
        label = _STANCE.get(str(cluster["stance_label_3"]).lower())
        if label is not None:
            for item in cluster[key]:
                links[int(item)].append(label)
    return links


def _eligible(docs: list[PoolDocument], min_docs: int) -> bool:
    scores = np.array([d.score for d in docs])
    return len(docs) >= min_docs and bool((scores > 0).any()) and bool((scores < 0).any())


def shared_document_ids(data: PerspectrumData) -> set[str]:
    """Ids of test documents that also appear in some tuning pool."""
    tuning = {d.id for c in data.tuning for d in c.pool.documents}
    return {d.id for c in data.evaluation for d in c.pool.documents} & tuning


def without_shared_documents(data: PerspectrumData, min_docs: int = 10) -> PerspectrumData:
    """The data with every test document removed from the tuning pools (claims re-checked for eligibility)."""
    shared = shared_document_ids(data)
    tuning = []
    for claim in data.tuning:
        docs = [d for d in claim.pool.documents if d.id not in shared]
        if _eligible(docs, min_docs):
            tuning.append(claim.model_copy(update={"pool": CandidatePool(documents=docs)}))
    return data.model_copy(update={"tuning": tuning})


def load_perspectrum(
    data_dir: str | Path, min_docs: int = 10, documents: Documents = "auto"
) -> PerspectrumData:
    """Load the release from ``data_dir`` (``auto`` uses evidence paragraphs only when their file exists)."""
    root = Path(data_dir)
    if documents == "auto":
        documents = "evidence" if (root / EVIDENCE_FILE).exists() else "perspectives"
    if documents == "evidence":
        texts = {int(e["eId"]): e["text"] for e in _read(root / EVIDENCE_FILE)}
        key, prefix = "evidence", "e"
    else:
        texts = {int(p["pId"]): p["text"] for p in _read(root / PERSPECTIVES_FILE)}
        key, prefix = "pids", "p"
    splits = {int(cid): split for cid, split in _read(root / SPLIT_FILE).items()}
    tuning: list[PerspectrumClaim] = []
    evaluation: list[PerspectrumClaim] = []
    for claim in _read(root / CLAIMS_FILE):
        cid = int(claim["cId"])
        links = _links(claim, key)
        missing = sorted(set(links) - set(texts))
        if missing:
            raise ValueError(f"claim {cid}: {key} ids {missing[:5]} are not in the {documents} pool file")
        docs = [
            PoolDocument(id=f"{prefix}{i}", text=texts[i], score=float(np.mean(links[i])))
            for i in sorted(links)
        ]
        if not _eligible(docs, min_docs) or cid not in splits:
            continue
        item = PerspectrumClaim(
            claim_id=cid, text=claim["text"], split=splits[cid], pool=CandidatePool(documents=docs)
        )
        (evaluation if item.split == "test" else tuning).append(item)
    return PerspectrumData(documents=documents, tuning=tuning, evaluation=evaluation)
