"""``draligned cards demo``: the whole construction pipeline offline, over the bundled PDR-Bench sample.

The SIMULATOR proposer (single- and two-factor designs, both languages), the two SIMULATOR
verifiers and the gates, the planted-defect pilot, a blinded review sheet answered by two SIMULATOR
reviewers (each copies one verifier's answers, so the agreement report has something to compare;
they are not people), and the example frozen assignment. It ends with a study file over the
assigned cards (simulated agent, harness H00) that ``draligned run`` runs.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path

from draligned.construction.assign import Assignment, assign
from draligned.construction.pilot import PilotReport, run_pilot
from draligned.construction.prompts import SIM_PROPOSER, SIM_VERIFIERS
from draligned.construction.propose import Design, ProposeSummary, load_inputs, propose_cards
from draligned.construction.review import ReviewImport, export_sheet, import_answers
from draligned.construction.verify import CRITERIA, Verdict, VerifySummary, verify_dir
from draligned.data import data_dir
from draligned.records import Record

SAMPLE = data_dir("construction") / "pdr_sample"
EXAMPLE_RULE = data_dir("construction") / "assign.example.toml"


class CardsDemoResult(Record):
    """What the construction demo did and where it put it."""

    out: str
    """The demo's directory."""
    proposed: dict[str, ProposeSummary]
    """Per language and design (e.g. en/single)."""
    verified: VerifySummary
    """Gate outcomes."""
    pilot: PilotReport
    """The planted-defect pilot."""
    review: ReviewImport
    """Agreement of the two SIMULATOR reviewers."""
    assignment: Assignment
    """The frozen assignment with the example rule."""
    study: str
    """The study file over the assigned cards."""


def simulated_answers(directory: Path, sheet: str, verifier: str, reviewer: str) -> str:
    """A SIMULATOR reviewer's answer file (CSV): the named verifier's answers to the sheet's cards."""
    key = {k["item_id"]: k["card_id"] for p in (directory / "reviews").glob("*.key.json")
           for k in json.loads(p.read_text())}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["item_id", "reviewer", *CRITERIA, "fatal", "comment"])
    writer.writeheader()
    for row in csv.DictReader(io.StringIO(sheet)):
        v = Verdict.model_validate_json(
            (directory / "verifications" / key[row["item_id"]] / f"{verifier}.json").read_bytes())
        answers = {h: v.criteria[h].answer if v.error is None else "cannot_tell" for h in CRITERIA}
        writer.writerow({"item_id": row["item_id"], "reviewer": reviewer, **answers,
                         "fatal": "no", "comment": f"SIMULATOR reviewer: answers of {verifier}"})
    return out.getvalue()


def cards_demo(out: str | Path) -> CardsDemoResult:
    """Run every construction step offline into ``out``."""
    out = Path(out).resolve()
    candidates = out / "candidates"
    proposed = {}
    for lang in ("en", "zh"):
        tasks, personas, pairs = load_inputs(SAMPLE / f"tasks_{lang}.jsonl", SAMPLE / f"personas_{lang}.jsonl",
                                             SAMPLE / f"queries_{lang}.jsonl")
        designs: tuple[Design, ...] = ("single", "two")
        for design in designs:
            proposed[f"{lang}/{design}"] = asyncio.run(
                propose_cards(tasks, personas, pairs, SIM_PROPOSER, candidates, design))
    verified = asyncio.run(verify_dir(candidates, SIM_VERIFIERS))
    pilot = run_pilot(SIM_VERIFIERS, out / "pilot")
    sheet, _ = export_sheet(candidates, "csv")
    (out / "review").mkdir(parents=True, exist_ok=True)
    (out / "review" / "sheet.csv").write_text(sheet, encoding="utf-8")
    files = []
    for n, decl in enumerate(SIM_VERIFIERS, 1):
        path = out / "review" / f"answers_SIM-CR{n}.csv"
        path.write_text(simulated_answers(candidates, sheet, decl.name, f"SIM-CR{n}"), encoding="utf-8")
        files.append((str(path), path.read_bytes()))
    review = import_answers(candidates, files)
    assignment = assign(candidates, EXAMPLE_RULE, out / "study_cards")
    study = out / "study.toml"
    corpus = data_dir("corpora") / "demo" / "corpus.jsonl"
    study.write_text(f"""# Written by draligned cards demo: the assigned cards, the SIMULATED agent (not a model).
name = "cards-demo"
cards = ["study_cards/cards/*.json"]
arms = "all"
harnesses = ["H00"]
seeds = 1
concurrency = 4
archive = "archive"
corpus = {json.dumps(str(corpus))}
budget = {{ max_model_calls = 24, max_tool_calls = 40 }}
models = [{{ name = "sim-agent", protocol = "sim", model = "sim-agent-v1" }}]
""", encoding="utf-8")
    return CardsDemoResult(out=str(out), proposed=proposed, verified=verified, pilot=pilot, review=review,
                           assignment=assignment, study=str(study))
