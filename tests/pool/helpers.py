"""A small pool-search study over the travel demo pool, and readers of its records."""

from __future__ import annotations

from pathlib import Path

from draligned.archive import Archive
from draligned.records import PoolRoundEvent, RunRecord
from tests.study_helpers import REPO, write_study

POOL = REPO / "corpora" / "demo" / "pool_travel_budget.jsonl"
POOL_SEARCH = f"""
arms = ["P", "Q"]

[search]
backend = "pool"
selection = ["agent", "uniform"]
stopping = ["fixed", "adaptive"]
ranking = "original"

[search.pools]
travel_budget_en = "{POOL}"

[search.controller]
budget = 3
temperature = 0.05
epsilon = 0.2
"""


def write_pool_study(tmp: Path, seeds: int = 2, name: str = "pool") -> Path:
    """The travel card, both arms, the 2x2 selection x stopping cells, K = 3."""
    path = write_study(tmp, ["travel_budget_en.json"], seeds=seeds, name=name, extra=POOL_SEARCH)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(line for line in lines if not line.startswith("corpus =")))  # pools only
    return path


def pool_records(archive: Archive) -> list[RunRecord]:
    """Sealed records in run-id order."""
    return sorted(archive.records(), key=lambda r: r.run_id)


def rounds_of(record: RunRecord) -> list[PoolRoundEvent]:
    """The pool events of a run, in order."""
    return [e for e in record.events if isinstance(e, PoolRoundEvent)]
