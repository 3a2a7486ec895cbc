"""Build small studies over the repo's demo cards and corpus for tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

from draligned.records import RunRecord
from draligned.runner import StudyResult, run_study
from draligned.study import load_study

REPO = Path(__file__).resolve().parent.parent


def write_evaluator(path: Path, head: str, model: str) -> Path:
    """An evaluator TOML at ``path``: ``head`` (id, limits), the bundled v1 prompts and schemas, then the
    ``[model]`` table's body ``model``."""
    prompts = REPO / "evaluator_prompts"
    path.write_text(f"""{head.strip()}
[prompts]
requests = "{prompts / 'request_packet.v1.md'}"
document = "{prompts / 'document_packet.v1.md'}"
[schemas]
requests = "{prompts / 'request_labels.v1.schema.json'}"
document = "{prompts / 'document_items.v1.schema.json'}"
[model]
{model.strip()}
""", encoding="utf-8")
    return path


def write_study(tmp: Path, cards: list[str], seeds: int = 1, sensitivity: float = 0.8,
                name: str = "t", extra: str = "", latency_s: float = 0.0) -> Path:
    """A study TOML in ``tmp`` with the sim agent over the demo corpus."""
    card_list = ", ".join(f'"{REPO / "factor_cards" / c}"' for c in cards)
    path = tmp / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
cards = [{card_list}]
seeds = {seeds}
concurrency = 3
archive = "archive"
corpus = "{REPO / 'corpora/demo/corpus.jsonl'}"
{extra}
[budget]
max_model_calls = 24
max_tool_calls = 40

[[models]]
name = "sim-agent"
protocol = "sim"
model = "sim-agent-v1"
[models.options]
sensitivity = {sensitivity}
latency_s = {latency_s}
""")
    return path


def run(path: Path) -> StudyResult:
    """Run a study file to completion."""
    return asyncio.run(run_study(load_study(path)))


def records(result: StudyResult) -> list[RunRecord]:
    """The archived records of the runs a study run ended (the result keeps only their outcomes)."""
    return [result.archive.find_run(run.run_id) for run in result.runs]
