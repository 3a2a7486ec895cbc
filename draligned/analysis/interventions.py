"""2x2 intervention effects on the Opened Mean with their repeatability (CESS paper Eq. 4, App. C).

Uniform vs agent document selection (a = 0/1) is crossed with fixed vs adaptive stopping
(b = 0/1); within each paired block (card; arm, model, harness, ranking; replicate) with all
four cells: selection = θ10 − θ00, stopping = θ01 − θ00, interaction = θ11 − θ10 − θ01 + θ00,
total = θ11 − θ00. The card (the question) is the cluster, as in the paper: means are taken
within card, then cards weigh equally, with card-cluster bootstrap CIs (or the coarser study,
from the plan). Repeatability across replicates is the one-way ICC(1,k) = (MSB − MSW) / MSB over
cards: per card and replicate the block effects are averaged, so the k replicates of a card are
compared, never its arms or models as if they were other questions. These are effects of
changing the policy, a different estimand from a CESS contrast.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Literal

import numpy as np

from draligned.analysis.cess_side import cluster_bootstrap, cluster_of
from draligned.analysis.plan import Cess
from draligned.analysis.rows import Row
from draligned.analysis.table import Table
from draligned.cess import metrics

EFFECTS = ("selection", "stopping", "interaction", "total")


class InterventionRow(Row):
    """One intervention run's Opened Mean and its cell."""

    study: str
    """Study (the coarser cluster)."""
    card_id: str
    """Card: the question, and the bootstrap and ICC cluster."""
    block: str
    """Design labels shared by the four cells of a block within the card (arm/model/harness/ranking)."""
    replicate: int
    """Replicate (seed); the four cells of one card, block and replicate form a paired block."""
    selection: Literal[0, 1]
    """0 uniform document choice, 1 agent choice."""
    stopping: Literal[0, 1]
    """0 fixed-length search, 1 agent-controlled stopping."""
    opened_mean: float
    """Opened Mean of the run."""


BlockKey = tuple[str, str, str, int]
"""(study, card, block, replicate)."""


class IccResult(Row):
    """One-way ICC(1,k) and why it may be undefined."""

    icc: float | None
    """ICC(1,k); None when undefined."""
    k: int
    """Replicates per card used."""
    cards: int
    """Cards with exactly k replicates."""
    undefined_reason: str | None = None
    """Why undefined: fewer than two cards or replicates, or no between-card variation."""


def block_effects(rows: list[InterventionRow]) -> tuple[dict[BlockKey, dict[str, float]], int]:
    """Effects per complete block, and the number of incomplete blocks left out (named, not dropped)."""
    cells: dict[BlockKey, dict[tuple[int, int], float]] = {}
    for r in rows:
        cells.setdefault((r.study, r.card_id, r.block, r.replicate), {})[(r.selection, r.stopping)] = r.opened_mean
    out, incomplete = {}, 0
    for key, c in sorted(cells.items()):
        if len(c) < 4:
            incomplete += 1
            continue
        theta = [np.asarray(c[cell]) for cell in ((0, 0), (1, 0), (0, 1), (1, 1))]
        effects = metrics.intervention_effects(*theta)
        out[key] = {k: float(v) for k, v in dataclasses.asdict(effects).items()}
    return out, incomplete


def icc_1k(values: dict[str, list[float]]) -> IccResult:
    """ICC(1,k) over cards (groups) with the most common replicate count k."""
    k = Counter(len(v) for v in values.values()).most_common(1)[0][0] if values else 0
    groups = np.array([v for v in values.values() if len(v) == k], dtype=float)
    if len(groups) < 2 or k < 2:
        return IccResult(icc=None, k=k, cards=len(groups), undefined_reason="needs two cards with two replicates")
    if np.allclose(groups.mean(axis=1), groups.mean()):
        return IccResult(icc=None, k=k, cards=len(groups), undefined_reason="no between-card variation")
    return IccResult(icc=round(metrics.icc1k(groups), 4), k=k, cards=len(groups))


def intervention_effects(rows: list[InterventionRow], cfg: Cess) -> Table:
    """Mean selection, stopping, interaction and total effects with cluster CIs and ICC(1,k) over cards."""
    blocks, incomplete = block_effects(rows)
    out = []
    for effect in EFFECTS if blocks else ():
        values = [e[effect] for e in blocks.values()]
        iv = cluster_bootstrap(values, [cluster_of(cfg, card, study) for study, card, _, _ in blocks], cfg)
        per_replicate: dict[tuple[str, int], list[float]] = {}
        for (_, card, _, rep), e in blocks.items():
            per_replicate.setdefault((card, rep), []).append(e[effect])
        per_card: dict[str, list[float]] = {}
        for (card, _), v in sorted(per_replicate.items()):
            per_card.setdefault(card, []).append(float(np.mean(v)))
        icc = icc_1k(per_card)
        out.append([effect, cfg.cluster, iv.n, iv.mean, iv.low, iv.high, icc.icc, icc.k, icc.cards,
                    icc.undefined_reason, incomplete])
    return Table(
        name="cess_interventions", title="2x2 intervention effects on the Opened Mean (CESS paper Eq. 4)",
        note="Blocks: (card; arm, model, harness, ranking; replicate) with all four cells; incomplete blocks are "
             f"counted, not used. Mean within {cfg.cluster}, then {cfg.cluster}s equally; CIs: "
             f"{round(cfg.confidence * 100)}% {cfg.cluster}-cluster bootstrap ({cfg.bootstrap} replicates, seed "
             f"{cfg.seed}). ICC(1,k) over cards across replicates, block effects averaged within card and "
             "replicate (negative, even far below 0, when replicates vary more within cards than between them). "
             "Effects of changing the search policy: a different estimand from a CESS contrast.",
        columns=["effect", "cluster", "blocks", "mean", "low", "high", "icc", "icc_k", "icc_cards", "icc_undefined",
                 "incomplete_blocks"],
        rows=out, computed_by="draligned.analysis.interventions.intervention_effects",
        empty_reason=None if out else "the archive has no complete 2x2 selection x stopping cells (cess_runs)")
