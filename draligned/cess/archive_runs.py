"""Per-run CESS estimates of archived pool-search runs (the ``cess_runs`` index table).

A run over a pool logs one :class:`~draligned.records.PoolRoundEvent` per round; with the
pool file and the probability vectors (both archive blobs) that is exactly one trajectory
in the shipped JSON Lines format. Y is the pool file's score as is: **+1 = the card's P
endpoint side**, for every run whatever its assigned arm, so Opened Means of the P and Q
arms are on one scale and their difference says how far the user condition moved the
evidence opened towards P. Estimates use :func:`draligned.cess.estimators.trajectory_estimates`
with λ = :data:`ARCHIVE_LAMBDA` (the default of ``cess estimate``) and the pool file's ``m``
(m ≡ 0 when absent), so ``cess export`` + ``cess estimate`` reproduce the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from draligned.archive import Archive
from draligned.archive.tables import ArchiveTables, Rows
from draligned.cess.estimators import PoolEstimates, trajectory_estimates
from draligned.cess.trajectory import Trajectory, TrajectoryPool, TrajectoryRound
from draligned.records import PoolRoundEvent, Record, RunRecord
from draligned.tools.pool_file import LoadedPool, parse_pool

ARCHIVE_LAMBDA = 0.5
"""Shrinkage λ of the archived CESS estimates (no tuning tasks exist inside a study)."""

EndedBy = Literal["budget", "sampled_stop", "agent"]


class PoolRun(Record):
    """One archived run over a pool as a trajectory, with how its search ended."""

    record: RunRecord
    """The sealed run record."""
    trajectory: Trajectory
    """Its logged search in the trajectory format (trajectory_id = run id, task_id = card id)."""
    ended_by: EndedBy
    """``budget``: K documents opened; ``sampled_stop``: the controller sampled a stop; ``agent``:
    the agent stopped searching on its own — an unlogged stop, so Eq. 6's guarantee does not cover it."""


class _RunDesign(Record):
    """The design labels of a pool run (the first columns of ``cess_runs``)."""

    run_id: str
    """Run id (also the trajectory id)."""
    slot_id: str
    """Slot the run fills."""
    attempt: int
    """Attempt number at the slot."""
    study: str
    """Study name."""
    card_id: str
    """Card (the task / question cluster)."""
    arm: str
    """Assigned arm (P or Q)."""
    model: str
    """Model declaration name."""
    harness: str
    """Harness id."""
    seed: int
    """Replicate seed (shared by paired runs)."""
    selection: str
    """Selection cell: agent or uniform."""
    stopping: str
    """Stopping cell: fixed or adaptive."""
    ranking: str
    """Ranking condition: original, pro or anti."""
    status: str
    """Run status."""
    budget: int
    """Maximum rounds K."""
    rounds: int
    """Opened documents T."""
    ended_by: str
    """How the search ended: budget, sampled_stop or agent (see :class:`PoolRun`)."""
    lam: float
    """λ used for the CESS variants."""


class CessRun(PoolEstimates, _RunDesign):
    """One row of ``cess_runs``: the run's design labels, its pool estimates (Y: +1 = the card's P
    side), then the support interval (inherited fields come last base first, so in that order)."""

    support_lower: float | None
    """Lower end of the support interval (Eq. 10) when it applies."""
    support_upper: float | None
    """Upper end of the support interval (Eq. 10) when it applies."""


_DUCK_TYPES: dict[object, str] = {str: "TEXT", int: "INTEGER", float: "DOUBLE", float | None: "DOUBLE"}
CESS_RUNS_DDL = "CREATE TABLE cess_runs (" + ", ".join(
    f"{name} {_DUCK_TYPES[field.annotation]}" for name, field in CessRun.model_fields.items()) + ");"
"""DDL of the derived ``cess_runs`` table (columns = :class:`CessRun` fields, in order)."""


def ended_by(rounds: list[PoolRoundEvent]) -> EndedBy:
    """How a logged search ended (pure rule on the pool events of one run)."""
    if rounds[-1].chosen is None:
        return "sampled_stop"
    return "budget" if rounds[-1].round >= rounds[-1].budget else "agent"


def run_trajectory(record: RunRecord, pool: LoadedPool, probs: dict[str, list[float]]) -> Trajectory:
    """The trajectory of a run's opened documents (Y from ``pool.y``; stops are not rounds)."""
    events = [e for e in record.events if isinstance(e, PoolRoundEvent) and e.chosen is not None]
    cond = record.slot.search_condition
    return Trajectory(
        trajectory_id=record.run_id,
        task_id=record.slot.card_id,
        ranking=None if cond is None else cond.ranking,
        budget=events[0].budget,
        pool=TrajectoryPool(doc_ids=[d.id for d in pool.documents], y=pool.scores, m=pool.predictions),
        rounds=[TrajectoryRound(probs=probs[e.probs_blob], chosen=e.chosen, stop_prob=e.stop_prob)
                for e in events if e.probs_blob is not None and e.chosen is not None],
    )


def pool_runs(archive: Archive, records: Iterable[RunRecord] | None = None) -> list[PoolRun]:
    """Every sealed run that opened at least one scored pool document, in run-id order.

    Runs that opened a document without a score cannot be estimated and are left out.
    """
    pools: dict[str, LoadedPool] = {}
    out = []
    for record in sorted(archive.records() if records is None else records, key=lambda r: r.run_id):
        if record.status == "started":
            continue
        events = [e for e in record.events if isinstance(e, PoolRoundEvent)]
        if not any(e.chosen for e in events):
            continue
        sha = events[0].pool_blob
        if sha not in pools:
            pools[sha] = parse_pool(archive.get_blob(sha), Path(f"archive blob {sha}"))
        probs = {e.probs_blob: json.loads(archive.get_blob(e.probs_blob)) for e in events if e.probs_blob}
        traj = run_trajectory(record, pools[sha], probs)
        try:
            traj.chosen_scores()
        except ValueError:
            continue
        out.append(PoolRun(record=record, trajectory=traj, ended_by=ended_by(events)))
    return out


def cess_rows(runs: list[PoolRun], lam: float = ARCHIVE_LAMBDA) -> list[CessRun]:
    """Estimates of every run (one vectorized batch), as ``cess_runs`` rows."""
    estimates = trajectory_estimates([r.trajectory for r in runs], lam)
    rows = []
    for run, est in zip(runs, estimates, strict=True):
        rec, cond = run.record, run.record.slot.search_condition
        assert cond is not None
        support = est.support_interval
        rows.append(CessRun(
            run_id=rec.run_id, slot_id=rec.slot_id, attempt=rec.attempt, study=rec.slot.study,
            card_id=rec.slot.card_id, arm=rec.slot.arm, model=rec.slot.model, harness=rec.slot.harness,
            seed=rec.slot.seed, selection=cond.selection, stopping=cond.stopping, ranking=cond.ranking,
            status=rec.status, budget=run.trajectory.budget, rounds=est.rounds, ended_by=run.ended_by,
            lam=lam, **est.model_dump(include=set(PoolEstimates.model_fields)),
            support_lower=None if support is None else support[0],
            support_upper=None if support is None else support[1],
        ))
    return rows


def _cess_tables(archive: Archive, batches: Iterable[Sequence[RunRecord]]) -> Iterator[Rows]:
    """The ``cess_runs`` rows of the sealed pool runs among the records, a batch of records at a time."""
    for records in batches:
        yield {"cess_runs": [tuple(row.model_dump().values()) for row in cess_rows(pool_runs(archive, records))]}


CESS_TABLES = ArchiveTables(name="cess", ddl=CESS_RUNS_DDL, rows=_cess_tables)
"""Per-run CESS pool estimates (``cess_runs``), derived from the pool events and blobs; no files of its own."""


def export_trajectories(archive: Archive, out: Path, fmt: Literal["jsonl", "parquet"] = "jsonl") -> int:
    """Write the archive's pool trajectories as JSON Lines or Parquet (the ``cess estimate`` input);
    returns the count. Parquet is written from a JSON Lines copy next to ``out``, removed afterwards."""
    runs = pool_runs(archive)
    jsonl = out if fmt == "jsonl" else out.with_name(f".tmp-{out.name}.jsonl")
    with jsonl.open("w", encoding="utf-8") as fh:
        for run in runs:
            fh.write(run.trajectory.model_dump_json(exclude_none=True) + "\n")
    if fmt == "parquet":
        try:
            from draligned.cess.parquet import write_parquet  # pyarrow only when a Parquet file is asked for

            write_parquet(jsonl, out)
        finally:
            jsonl.unlink()
    return len(runs)
