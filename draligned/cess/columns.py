"""Many logged trajectories as flat columns: offsets plus one array entry per document and per round.

The padded :class:`~draligned.cess.batch.TrajectoryBatch` holds (B, K_max) and (B, N_max) arrays,
and building it walks one Python object per trajectory. At a million trajectories both cost too much,
so the loaders (:mod:`draligned.cess.fastload`, :mod:`draligned.cess.parquet`) fill this layout
directly and :mod:`draligned.cess.column_estimators` computes every estimator over it with segment
sums. Only what the estimators need is kept: of each round's probability vector, the chosen
document's probability and whether every document had positive probability; of each document, the
first round in which it had positive probability.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the models' import (pydantic) is most of `cess estimate`'s start-up
    from draligned.cess.trajectory import Trajectory

SLAB_BYTES = 64 << 20
"""A field's parts are joined once they hold this much (see :meth:`ColumnBuilder.extend`)."""
NEVER = np.iinfo(np.int64).max
"""``first_support`` of a document that had probability 0 in every observed round."""
KINDS: dict[str, type] = {
    "budget": float, "n_docs": np.int64, "doc_m": float, "doc_y": float, "first_support": np.int64,
    "n_rounds": np.int64, "chosen": np.int64, "y": float, "p": float, "stop": float, "full_support": bool}
"""The arrays a loader hands over per part, and their types: per trajectory ``budget``, ``n_docs`` and
``n_rounds``, per document ``doc_m``, ``doc_y``, ``first_support``, per round the rest."""
_PER_DOC, _PER_ROUND = ("doc_m", "doc_y", "first_support"), ("chosen", "y", "p", "stop", "full_support")


def first_positive_round(positive: np.ndarray) -> np.ndarray:
    """Per document (column of a (T, N) ``probs > 0``), the first round it had positive probability, or NEVER."""
    return np.where(positive.any(axis=0), positive.argmax(axis=0), NEVER)


@dataclass(frozen=True)
class TrajectoryColumns:
    """B trajectories, D = Σ N_b documents and R = Σ T_b rounds, in input order."""

    trajectory_id: list[str]
    """(B,) trajectory ids."""
    task_id: list[str]
    """(B,) task ids."""
    budget: np.ndarray
    """(B,) maximum budget K, as floats (it only divides; the schema puts no upper bound on it)."""
    doc_start: np.ndarray
    """(B + 1,) documents of trajectory b are ``doc_start[b]:doc_start[b + 1]``."""
    doc_m: np.ndarray
    """(D,) outcome-model prediction m(X_i) (0 where ``pool.m`` is absent)."""
    doc_y: np.ndarray
    """(D,) evidence score, NaN where unknown (target only)."""
    first_support: np.ndarray
    """(D,) first observed round (0-based) in which the document had positive probability, NEVER if none."""
    round_start: np.ndarray
    """(B + 1,) rounds of trajectory b are ``round_start[b]:round_start[b + 1]``."""
    chosen: np.ndarray
    """(R,) index of the chosen document J_t within its pool."""
    y: np.ndarray
    """(R,) evidence score of the chosen document (round value first, else ``pool.y``)."""
    p: np.ndarray
    """(R,) logged selection probability p_t of the chosen document."""
    stop: np.ndarray
    """(R,) logged stop probability c_t before the round."""
    full_support: np.ndarray
    """(R,) True when every pool document had positive probability in the round."""

    def __len__(self) -> int:
        return len(self.trajectory_id)

    @property
    def n_docs(self) -> np.ndarray:
        """(B,) pool size N."""
        return np.diff(self.doc_start)

    @property
    def n_rounds(self) -> np.ndarray:
        """(B,) observed rounds T."""
        return np.diff(self.round_start)

    @property
    def chosen_doc(self) -> np.ndarray:
        """(R,) flat document index (into the per-document arrays) of each round's choice."""
        return np.repeat(self.doc_start[:-1], self.n_rounds) + self.chosen

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> TrajectoryColumns:
        """The columns of validated trajectory objects (m ≡ 0 where ``pool.m`` is absent)."""
        builder = ColumnBuilder()
        for traj in trajectories:
            index = {doc: i for i, doc in enumerate(traj.pool.doc_ids)}
            probs = np.array([r.probs for r in traj.rounds], float)
            builder.add(traj.trajectory_id, traj.task_id, traj.budget, traj.pool.m,
                        [np.nan if v is None else v for v in traj.pool.y or [None] * len(index)],
                        probs, [index[r.chosen] for r in traj.rounds], [r.stop_prob for r in traj.rounds],
                        traj.chosen_scores())
        return builder.build()


class ColumnBuilder:
    """Collects trajectories (or whole chunks of them) into :class:`TrajectoryColumns`."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.tasks: list[str] = []
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in KINDS}
        self.slabs: dict[str, list[np.ndarray]] = {name: [] for name in self.parts}

    def add(self, trajectory_id: str, task_id: str, budget: int, m: Sequence[float] | None,
            y: Sequence[float], probs: np.ndarray, chosen: Sequence[int], stop: Sequence[float],
            scores: Sequence[float]) -> None:
        """One trajectory: ``probs`` is its (T, N) probability matrix, ``y`` its pool scores (NaN unknown)."""
        positive = probs > 0
        rounds = np.arange(len(chosen))
        self.extend([trajectory_id], [task_id], budget=np.array([budget], float), n_docs=np.array([len(y)]),
                    doc_m=np.zeros(len(y)) if m is None else np.asarray(m, float), doc_y=np.asarray(y, float),
                    first_support=first_positive_round(positive),
                    n_rounds=np.array([len(chosen)]), chosen=np.asarray(chosen, np.int64),
                    y=np.asarray(scores, float), p=probs[rounds, chosen], stop=np.asarray(stop, float),
                    full_support=np.asarray(positive.all(axis=1)))

    def extend(self, ids: list[str], tasks: list[str], **arrays: np.ndarray) -> None:
        """Many trajectories at once, as arrays named like :class:`TrajectoryColumns` fields.

        A field's recent parts are joined into one slab once they reach SLAB_BYTES: a million
        trajectories come in thousands of chunks, and their small arrays, kept among the loaders' freed
        temporaries, left the heap fragmented (hundreds of MB more resident); a slab is mapped apart."""
        self.ids += ids
        self.tasks += tasks
        for name, parts in self.parts.items():
            parts.append(arrays[name])
            if sum(part.nbytes for part in parts) >= SLAB_BYTES:
                self.slabs[name].append(np.concatenate(parts))
                parts.clear()

    def build(self) -> TrajectoryColumns:
        """The collected trajectories as one set of columns (each field joined, then its parts freed; a field
        of one part is that array itself, not a copy: a pipeline builds each checked part alone)."""
        cat: dict[str, np.ndarray] = {}
        for name, parts in self.parts.items():
            joined = self.slabs[name] + parts
            whole = joined[0] if len(joined) == 1 else np.concatenate(joined) if joined else np.zeros(0)
            cat[name] = whole.astype(KINDS[name], copy=False)
            parts.clear()
            self.slabs[name].clear()
            del joined
        return _columns(self.ids, self.tasks, cat)


def _columns(ids: list[str], tasks: list[str], arrays: dict[str, np.ndarray]) -> TrajectoryColumns:
    """:class:`TrajectoryColumns` from the arrays of :data:`KINDS` (the counts become start offsets)."""
    starts = {name: np.concatenate([[0], np.cumsum(arrays.pop(name), dtype=np.int64)])
              for name in ("n_docs", "n_rounds")}
    return TrajectoryColumns(trajectory_id=ids, task_id=tasks, doc_start=starts["n_docs"],
                             round_start=starts["n_rounds"], **arrays)


class ColumnCount:
    """How many values of each column of :data:`KINDS` there is room for (``rows`` trajectories, ``docs``
    documents, ``rounds`` rounds: a Parquet file's metadata counts them) and how many were taken."""

    def __init__(self, rows: int, docs: int, rounds: int) -> None:
        self.size = {name: docs if name in _PER_DOC else rounds if name in _PER_ROUND else rows for name in KINDS}
        self.used = dict.fromkeys(KINDS, 0)

    def take(self, arrays: dict[str, np.ndarray]) -> dict[str, int]:
        """Where each of ``arrays`` starts in its column; ValueError when one does not fit (more
        documents or rounds than counted), naming the column."""
        starts = {}
        for name, values in arrays.items():
            starts[name] = at = self.used[name]
            if at + len(values) > self.size[name]:
                raise ValueError(f"{name}: more values than the {self.size[name]} counted")
            self.used[name] = at + len(values)
        return starts


class ColumnSink:
    """Collects trajectories into columns allocated once for at most ``rows`` trajectories, ``docs``
    documents and ``rounds`` rounds (a Parquet file's metadata counts them): each part is copied into
    place, once (numpy releases the GIL), so a loader may hand over views of its decoder's buffers, and
    nothing is joined at the end. The columns are trimmed to what was put."""

    def __init__(self, rows: int, docs: int, rounds: int) -> None:
        self.count = ColumnCount(rows, docs, rounds)
        self.arrays: dict[str, np.ndarray] = {name: np.empty(self.count.size[name], kind)
                                              for name, kind in KINDS.items()}
        self.ids: list[str] = []
        self.tasks: list[str] = []

    def extend(self, ids: list[str], tasks: list[str], **arrays: np.ndarray) -> None:
        """Many trajectories at once, as :meth:`ColumnBuilder.extend` takes them; ValueError when they
        do not fit (more documents or rounds than counted)."""
        for name, at in self.count.take(arrays).items():
            self.arrays[name][at:at + len(arrays[name])] = arrays[name]
        self.ids += ids
        self.tasks += tasks

    def build(self) -> TrajectoryColumns:
        """The trajectories put so far (views of the allocated columns)."""
        return _columns(self.ids, self.tasks, {name: a[:self.count.used[name]] for name, a in self.arrays.items()})
