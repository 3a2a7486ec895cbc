"""Paired contrasts of archived pool runs: P vs Q arms, and the 2×2 selection × stopping cells.

Two different estimands sit side by side (CESS paper, Theorem 2):

- the difference in **Opened Mean** between paired runs is a paired *intervention effect*:
  how the user condition (or the search policy) changed the evidence the agent opened;
- the difference in **CESS** estimates compares two estimates of the *same* pool target θ*,
  so it is near zero by design — invariance to the search policy is what makes CESS a pool
  estimate, and it is why CESS cannot attribute an opened-evidence effect.

Cluster-bootstrap CIs resample cards (the questions) with all their pairs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from draligned.cess.archive_runs import CessRun
from draligned.cess.metrics import cluster_ci, intervention_effects
from draligned.records import FINISHED, Record

CELLS = {("uniform", "fixed"): "00", ("agent", "fixed"): "10", ("uniform", "adaptive"): "01",
         ("agent", "adaptive"): "11"}
"""(selection, stopping) → the paper's θ_ab index (a: agent selection, b: adaptive stopping)."""


class Interval(Record):
    """A mean over cards with its 95% card-level cluster-bootstrap interval."""

    estimate: float
    """Mean over cards of the per-card mean."""
    lower: float
    """2.5% bootstrap quantile."""
    upper: float
    """97.5% bootstrap quantile."""


class PairRow(Record):
    """One P/Q pair: same card, model, harness, seed and search cell."""

    card_id: str
    """Card (question cluster)."""
    model: str
    """Model declaration name."""
    harness: str
    """Harness id."""
    seed: int
    """Replicate seed."""
    cell: str
    """Search cell ``selection/stopping/ranking``."""
    opened_p: float
    """Opened Mean of the P run (+1 = P side)."""
    opened_q: float
    """Opened Mean of the Q run."""
    opened_diff: float
    """P − Q Opened Mean: the paired effect of the user condition on the evidence opened."""
    cess_p: float | None
    """CESS of the P run (None where the support interval applies)."""
    cess_q: float | None
    """CESS of the Q run."""
    cess_diff: float | None
    """P − Q CESS: two estimates of one pool target, ≈ 0 by design (not an effect)."""


class CellSummary(Record):
    """The pairs of one search cell, averaged within cards then across cards."""

    cell: str
    """Search cell ``selection/stopping/ranking``."""
    pairs: int
    """Number of P/Q pairs."""
    cards: int
    """Number of cards (bootstrap clusters)."""
    opened_diff: Interval
    """Mean P − Q Opened Mean (intervention effect of the user condition on opened evidence)."""
    cess_diff: Interval | None
    """Mean P − Q CESS (pool-target estimate difference; ≈ 0 by design), None without estimates."""


class EffectSummary(Record):
    """One 2×2 intervention effect (Eqs. 3–4) on one estimand."""

    effect: str
    """selection (Δ_sel), stopping (Δ_stop), interaction (Δ_int) or total (θ11 − θ00)."""
    estimand: str
    """opened_mean (the policy effect on what was read) or cess (the same contrast of pool estimates)."""
    blocks: int
    """Paired blocks (card, arm, model, harness, seed, ranking) with all four cells."""
    value: Interval
    """Mean effect over cards with its CI."""


class ArmSummary(Record):
    """Mean pool estimates of the runs of one card, search cell and arm."""

    card_id: str
    """Card."""
    cell: str
    """Search cell ``selection/stopping/ranking``."""
    arm: str
    """Assigned arm."""
    runs: int
    """Finished runs (latest attempt per slot)."""
    rounds: float
    """Mean opened documents T."""
    opened_mean: float
    """Mean Opened Mean (+1 = P side): what the runs read."""
    dr_raw: float | None
    """Mean raw sequential DR (Eq. 6) over runs with a point estimate."""
    cess: float | None
    """Mean CESS (Eq. 9) over runs with a point estimate: the pool-target estimate."""
    theta_star: float | None
    """The pool target θ* when every pool document is scored."""
    agent_ended: int
    """Runs whose search the agent ended itself (unlogged stop; see ``ended_by``)."""


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def arm_summaries(runs: Sequence[CessRun]) -> list[ArmSummary]:
    """Per card × cell × arm means of the archived pool estimates."""
    groups: dict[tuple[str, str, str], list[CessRun]] = defaultdict(list)
    for run in latest_finished(runs):
        groups[(run.card_id, _cell(run), run.arm)].append(run)
    return [ArmSummary(card_id=card, cell=cell, arm=arm, runs=len(g), rounds=float(np.mean([r.rounds for r in g])),
                       opened_mean=float(np.mean([r.opened_mean for r in g])), dr_raw=_mean([r.dr_raw for r in g]),
                       cess=_mean([r.cess for r in g]), theta_star=_mean([r.theta_star for r in g]),
                       agent_ended=sum(r.ended_by == "agent" for r in g))
            for (card, cell, arm), g in sorted(groups.items())]


class PairsReport(Record):
    """Everything `draligned cess pairs` prints."""

    pairs: list[PairRow]
    """Every P/Q pair."""
    cells: list[CellSummary]
    """Per search cell summaries."""
    intervention: list[EffectSummary]
    """2×2 effects; empty unless some block has all four selection × stopping cells."""


def latest_finished(runs: Sequence[CessRun]) -> list[CessRun]:
    """The last finished attempt of every slot."""
    best: dict[str, CessRun] = {}
    for run in runs:
        if run.status in FINISHED and (run.slot_id not in best or run.attempt > best[run.slot_id].attempt):
            best[run.slot_id] = run
    return sorted(best.values(), key=lambda r: r.run_id)


def _cell(run: CessRun) -> str:
    return f"{run.selection}/{run.stopping}/{run.ranking}"


def pair_rows(runs: Sequence[CessRun]) -> list[PairRow]:
    """Match P and Q runs of the same card, model, harness, seed and cell."""
    by_key: dict[tuple, dict[str, CessRun]] = defaultdict(dict)
    for run in latest_finished(runs):
        by_key[(run.card_id, run.model, run.harness, run.seed, _cell(run))][run.arm] = run
    rows = []
    for (card, model, harness, seed, cell), arms in sorted(by_key.items()):
        if "P" in arms and "Q" in arms:
            p, q = arms["P"], arms["Q"]
            rows.append(PairRow(card_id=card, model=model, harness=harness, seed=seed, cell=cell,
                                opened_p=p.opened_mean, opened_q=q.opened_mean,
                                opened_diff=p.opened_mean - q.opened_mean, cess_p=p.cess, cess_q=q.cess,
                                cess_diff=None if p.cess is None or q.cess is None else p.cess - q.cess))
    return rows


def card_interval(cards: Sequence[str], values: Sequence[float], n_resamples: int) -> Interval:
    """Mean within card, then across cards, with a card-level cluster-bootstrap CI (metrics.cluster_ci)."""
    ci = cluster_ci(np.asarray(values, float), np.asarray(cards), n_resamples=n_resamples)
    return Interval(estimate=ci.estimate, lower=ci.lower, upper=ci.upper)


def _summaries(rows: Sequence[PairRow], n_resamples: int) -> list[CellSummary]:
    out = []
    for cell in sorted({r.cell for r in rows}):
        sub = [r for r in rows if r.cell == cell]
        cess = [(r.card_id, r.cess_diff) for r in sub if r.cess_diff is not None]
        out.append(CellSummary(
            cell=cell, pairs=len(sub), cards=len({r.card_id for r in sub}),
            opened_diff=card_interval([r.card_id for r in sub], [r.opened_diff for r in sub], n_resamples),
            cess_diff=card_interval([c for c, _ in cess], [d for _, d in cess], n_resamples) if cess else None))
    return out


def _effects(runs: Sequence[CessRun], n_resamples: int) -> list[EffectSummary]:
    """Eqs. 3–4 per paired block, on the Opened Mean and on CESS, then card-level CIs."""
    blocks: dict[tuple, dict[str, CessRun]] = defaultdict(dict)
    for run in latest_finished(runs):
        blocks[(run.card_id, run.arm, run.model, run.harness, run.seed, run.ranking)][
            CELLS[(run.selection, run.stopping)]] = run
    full = [(key, cells) for key, cells in sorted(blocks.items()) if len(cells) == 4]
    estimands: dict[str, Callable[[CessRun], float | None]] = {
        "opened_mean": lambda r: r.opened_mean, "cess": lambda r: r.cess}
    out = []
    for name, get in estimands.items():
        usable = [(k, c) for k, c in full if all(get(r) is not None for r in c.values())]
        if not usable:
            continue
        theta = {ab: np.array([get(c[ab]) for _, c in usable], float) for ab in CELLS.values()}
        effects = intervention_effects(theta["00"], theta["10"], theta["01"], theta["11"])
        cards = [k[0] for k, _ in usable]
        for effect in ("selection", "stopping", "interaction", "total"):
            out.append(EffectSummary(effect=effect, estimand=name, blocks=len(usable),
                                     value=card_interval(cards, getattr(effects, effect).tolist(), n_resamples)))
    return out


def pairs_report(runs: Sequence[CessRun], n_resamples: int = 10_000) -> PairsReport:
    """The P/Q pair table, its per-cell summaries and the 2×2 effects when all four cells ran."""
    rows = pair_rows(runs)
    return PairsReport(pairs=rows, cells=_summaries(rows, n_resamples), intervention=_effects(runs, n_resamples))
