"""2x2 intervention effects on the Opened Mean with their repeatability (CESS paper Eq. 4, App. C).

Uniform vs agent document selection (a = 0/1) is crossed with fixed vs adaptive stopping
(b = 0/1); within each (task, replicate) block with all four cells:
selection = θ10 − θ00, stopping = θ01 − θ00, interaction = θ11 − θ10 − θ01 + θ00,
total = θ11 − θ00. Means get task-cluster bootstrap CIs; repeatability across replicates is the
one-way ICC(1,k) = (MSB − MSW) / MSB over tasks with the common number k of replicates. These are
effects of changing the policy, a different estimand from a CESS contrast.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Literal

import numpy as np

from draligned.analysis.cess_side import cluster_bootstrap
from draligned.analysis.plan import Cess
from draligned.analysis.rows import Row
from draligned.analysis.table import Table
from draligned.cess import metrics

EFFECTS = ("selection", "stopping", "interaction", "total")


class InterventionRow(Row):
    """One intervention run's Opened Mean and its cell."""

    task_id: str
    """Task (question) the block belongs to."""
    replicate: int
    """Replicate; the four cells of one task and replicate form a block."""
    selection: Literal[0, 1]
    """0 uniform document choice, 1 agent choice."""
    stopping: Literal[0, 1]
    """0 fixed-length search, 1 agent-controlled stopping."""
    opened_mean: float
    """Opened Mean of the run."""


class IccResult(Row):
    """One-way ICC(1,k) and why it may be undefined."""

    icc: float | None
    """ICC(1,k); None when undefined."""
    k: int
    """Replicates per task used."""
    tasks: int
    """Tasks with exactly k replicates."""
    undefined_reason: str | None = None
    """Why undefined: fewer than two tasks or replicates, or no between-task variation."""


def block_effects(rows: list[InterventionRow]) -> tuple[dict[tuple[str, int], dict[str, float]], int]:
    """Effects per complete block, and the number of incomplete blocks left out (named, not dropped)."""
    cells: dict[tuple[str, int], dict[tuple[int, int], float]] = {}
    for r in rows:
        cells.setdefault((r.task_id, r.replicate), {})[(r.selection, r.stopping)] = r.opened_mean
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
    """ICC(1,k) over tasks (groups) with the most common replicate count k."""
    k = Counter(len(v) for v in values.values()).most_common(1)[0][0] if values else 0
    groups = np.array([v for v in values.values() if len(v) == k], dtype=float)
    if len(groups) < 2 or k < 2:
        return IccResult(icc=None, k=k, tasks=len(groups), undefined_reason="needs two tasks with two replicates")
    if np.allclose(groups.mean(axis=1), groups.mean()):
        return IccResult(icc=None, k=k, tasks=len(groups), undefined_reason="no between-task variation")
    return IccResult(icc=round(metrics.icc1k(groups), 4), k=k, tasks=len(groups))


def intervention_effects(rows: list[InterventionRow], cfg: Cess) -> Table:
    """Mean selection, stopping, interaction and total effects with task-cluster CIs and ICC(1,k)."""
    blocks, incomplete = block_effects(rows)
    out = []
    for effect in EFFECTS if blocks else ():
        values = [e[effect] for e in blocks.values()]
        iv = cluster_bootstrap(values, [task for task, _ in blocks], cfg)
        per_task: dict[str, list[float]] = {}
        for (task, _), e in blocks.items():
            per_task.setdefault(task, []).append(e[effect])
        icc = icc_1k(per_task)
        out.append([effect, iv.n, iv.mean, iv.low, iv.high, icc.icc, icc.k, icc.tasks, icc.undefined_reason,
                    incomplete])
    return Table(
        name="cess_interventions", title="2x2 intervention effects on the Opened Mean (CESS paper Eq. 4)",
        note="Blocks: (task, replicate) with all four cells; incomplete blocks are counted, not used. CIs: "
             f"{round(cfg.confidence * 100)}% task-cluster bootstrap. ICC(1,k) across replicates (negative, "
             "even far below 0, when replicates vary more within tasks than between them). Effects of "
             "changing the search policy: a different estimand from a CESS contrast.",
        columns=["effect", "blocks", "mean", "low", "high", "icc", "icc_k", "icc_tasks", "icc_undefined",
                 "incomplete_blocks"],
        rows=out, computed_by="draligned.analysis.interventions.intervention_effects",
        empty_reason=None if out else "the archive has no complete 2x2 selection x stopping cells (cess_runs)")
