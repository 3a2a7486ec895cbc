"""`draligned cards propose | verify | pilot | review | assign | demo`: card construction from PDR-Bench."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Literal

from draligned.archive.store import ArchiveError
from draligned.construction.assign import assign
from draligned.construction.demo import cards_demo
from draligned.construction.pdrbench import PdrBenchError
from draligned.construction.pilot import run_pilot
from draligned.construction.prompts import ConstructionError, proposer_declaration, verifier_declarations
from draligned.construction.propose import load_inputs, propose_cards
from draligned.construction.review import ReviewError, export_sheet, import_answers
from draligned.construction.verify import CRITERIA, verify_dir
from draligned.models.base import ModelError

INPUT_ERRORS = (PdrBenchError, ConstructionError, ReviewError, ArchiveError, ModelError, OSError)
"""Bad input, a damaged or conflicting output directory, a model that cannot start: exit 2."""


def _fail(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def cmd_propose(args: argparse.Namespace) -> int:
    """Propose cards; exit 1 if a model call failed for some pair (rerun to retry them)."""
    try:
        tasks, personas, pairs = load_inputs(args.tasks, args.personas, args.pairs)
        summary = asyncio.run(propose_cards(tasks, personas, pairs, proposer_declaration(args.model), args.out,
                                            args.design, args.concurrency))
    except INPUT_ERRORS as exc:
        return _fail(exc)
    for card_id, status in summary.cards.items():
        print(f"{status:8} {card_id}")
    for pair, why in summary.unusable.items():
        print(f"UNUSABLE {pair}: {why}")
    for err in summary.model_errors:
        print(f"MODEL ERROR {err}", file=sys.stderr)
    print(f"{summary.pairs} pairs: {len(summary.cards)} cards written, {summary.already} proposed before, "
          f"{len(summary.unusable)} unusable replies, {len(summary.model_errors)} model errors -> {args.out}")
    return 1 if summary.model_errors else 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify and gate; exit 1 if a model call failed for some card."""
    try:
        summary = asyncio.run(verify_dir(args.dir, verifier_declarations(args.model or []), args.concurrency))
    except INPUT_ERRORS as exc:
        return _fail(exc)
    for card_id, outcome in summary.outcomes.items():
        print(f"{outcome:8} {card_id}")
    for err in summary.model_errors:
        print(f"MODEL ERROR {err}", file=sys.stderr)
    counts = {o: list(summary.outcomes.values()).count(o) for o in ("PASS", "RETAINED", "DISPUTED", "FAIL")}
    print(f"gated {len(summary.outcomes)} cards ({', '.join(f'{k} {v}' for k, v in counts.items())}); "
          f"{len(summary.skipped)} not sent; {len(summary.model_errors)} model errors")
    return 1 if summary.model_errors else 0


def cmd_pilot(args: argparse.Namespace) -> int:
    """Run the gates on the planted-defect fixtures and report what they caught."""
    try:
        declarations = verifier_declarations(args.model or [], reuse_single=True)
        with tempfile.TemporaryDirectory(prefix="draligned-pilot-") as tmp:
            report = run_pilot(declarations, args.out or tmp)
    except INPUT_ERRORS as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=1, ensure_ascii=False))
        return 0
    print(f"construction pilot, verifiers {' and '.join(report.verifiers)}")
    for r in report.fixtures:
        planted = "clean" if r.gate is None else f"{r.defect} ({r.relation}), target gate {r.gate}"
        verdict = ("passed" if r.caught else "NOT passed") if r.gate is None else ("CAUGHT" if r.caught else "missed")
        print(f"  {r.card_id:18} {planted:38} outcome {r.outcome:8} {verdict}; failed gates: "
              f"{', '.join(r.failed_gates) or '-'}")
    for h in CRITERIA:
        print(f"  gate {h}: caught {', '.join(report.per_gate[h]) or '-'}")
    print("every planted defect caught by its gate, clean fixture passed" if report.all_caught
          else "NOT every planted defect was caught by its gate (see above)")
    return 0


def cmd_review_export(args: argparse.Namespace) -> int:
    """Write the blinded sheet; its key stays under DIR/reviews/."""
    out = Path(args.out)
    if out.suffix not in (".csv", ".jsonl"):
        return _fail(ConstructionError(f"{out}: --out must end in .csv or .jsonl"))
    fmt: Literal["csv", "jsonl"] = "csv" if out.suffix == ".csv" else "jsonl"
    try:
        text, sheet_id = export_sheet(args.dir, fmt)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except INPUT_ERRORS as exc:
        return _fail(exc)
    print(f"wrote {out} (sheet {sheet_id}, {max(0, len(text.splitlines()) - (fmt == 'csv'))} lines); "
          f"key in {Path(args.dir) / 'reviews'}")
    return 0


def cmd_review_import(args: argparse.Namespace) -> int:
    """Store answer files, report agreement and kappa per criterion, apply the fatal-flag rule."""
    try:
        report = import_answers(args.dir, [(p, Path(p).read_bytes()) for p in args.answers])
    except INPUT_ERRORS as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=1, ensure_ascii=False))
        return 0
    ra, rb = report.reviewers
    print(f"{'criterion':10} {ra + ' y/n/?':>14} {rb + ' y/n/?':>14} {'agreement':>10} {'kappa':>10}")
    for c in report.criteria:
        counts = ["/".join(str(c.counts[r][x]) for x in ("yes", "no", "cannot_tell")) for r in (ra, rb)]
        ag = c.agreement
        exact = "-" if ag.exact is None else f"{ag.exact:.4f}"
        kappa = "undefined" if ag.kappa is None else f"{ag.kappa:.4f}"
        print(f"{c.criterion:10} {counts[0]:>14} {counts[1]:>14} {exact:>10} {kappa:>10}")
    print(f"all five yes: {ra} {report.all_five_yes[ra]}, {rb} {report.all_five_yes[rb]}; all five equal: "
          f"{'-' if report.all_five_equal is None else f'{report.all_five_equal:.4f}'}")
    print(f"excluded (both reviewers flagged fatal): {', '.join(report.excluded) or '-'}; "
          f"flag registered (one reviewer): {', '.join(report.flagged) or '-'}")
    return 0


def cmd_assign(args: argparse.Namespace) -> int:
    """Apply the frozen assignment rule and write the study's card set."""
    try:
        result = assign(args.dir, args.rule, args.out)
    except INPUT_ERRORS as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=1, ensure_ascii=False))
        return 0
    for a in result.cards:
        print(f"{'SELECTED' if a.selected else 'NOT_SELECTED':12} {a.card_id}: {a.reason}")
    chosen = sum(a.selected for a in result.cards)
    print(f"{chosen} of {len(result.cards)} cards selected (rule sha256 {result.rule_file_sha256[:16]}, seed "
          f"{result.parameters.seed}) -> {Path(args.out) / 'cards'}; manifest {Path(args.out) / 'assignment.json'}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The construction pipeline offline over the bundled PDR-Bench sample (SIMULATOR models)."""
    try:
        result = cards_demo(args.out)
    except INPUT_ERRORS as exc:
        return _fail(exc)
    print("card construction demo: SIMULATOR proposer, verifiers and reviewers (rules, not language models)")
    for key, s in result.proposed.items():
        print(f"  propose {key:10} {s.pairs} pairs, {len(s.cards)} cards ({s.already} pairs proposed before)")
    counts = {o: list(result.verified.outcomes.values()).count(o) for o in ("PASS", "RETAINED", "DISPUTED", "FAIL")}
    print(f"  verify   {', '.join(f'{k} {v}' for k, v in counts.items())}")
    print(f"  pilot    {'every planted defect caught' if result.pilot.all_caught else 'NOT every defect caught'}: "
          + "; ".join(f"{r.defect} -> {r.outcome}" for r in result.pilot.fixtures))
    kappas = ", ".join(f"{c.criterion} {'undefined' if c.agreement.kappa is None else f'{c.agreement.kappa:.2f}'}"
                       for c in result.review.criteria)
    print(f"  review   kappa per criterion ({' vs '.join(result.review.reviewers)}): {kappas}")
    chosen = sum(a.selected for a in result.assignment.cards)
    print(f"  assign   {chosen} of {len(result.assignment.cards)} cards selected "
          f"(seed {result.assignment.parameters.seed})")
    print(f"everything is in {result.out}; run the assigned cards: draligned run {result.study}")
    return 0


def register(cards_sub: argparse._SubParsersAction) -> None:
    """Add the construction subcommands under `draligned cards`."""
    p = cards_sub.add_parser("propose", help="propose factor cards for PDR-Bench (task, user) pairs with an LLM")
    p.add_argument("--tasks", required=True, help="PDR-Bench tasks JSONL")
    p.add_argument("--personas", required=True, help="PDR-Bench personas JSONL")
    p.add_argument("--pairs", help="JSONL with taskid and userid per line (e.g. a queries file); "
                                   "default: task k with the k-th persona")
    p.add_argument("--model", required=True, help="'sim' (SIMULATOR) or a TOML file with a [model] table")
    p.add_argument("--design", choices=("single", "two"), default="single", help="one factor, or two plus "
                   "alternative second factors")
    p.add_argument("--out", required=True, help="construction directory")
    p.add_argument("--concurrency", type=int, default=4)
    p.set_defaults(func=cmd_propose)
    v = cards_sub.add_parser("verify", help="two verifiers answer H1-H5; the frozen gates set each card's status")
    v.add_argument("dir", help="construction directory")
    v.add_argument("--model", action="append", help="verifier: 'sim' or a model TOML; twice (or 'sim' once)")
    v.add_argument("--concurrency", type=int, default=4)
    v.set_defaults(func=cmd_verify)
    pl = cards_sub.add_parser("pilot", help="the gates on planted-defect fixtures (paper Table 19)")
    pl.add_argument("--model", action="append", help="verifier model TOML (once: both verifiers; default sim)")
    pl.add_argument("--out", help="keep the pilot's directory here (default: a temporary one)")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_pilot)
    r = cards_sub.add_parser("review", help="blinded human review sheets and their answers")
    r_sub = r.add_subparsers(dest="review_command", required=True)
    e = r_sub.add_parser("export", help="write a blinded sheet for two reviewers")
    e.add_argument("dir", help="construction directory")
    e.add_argument("--out", required=True, help="SHEET.csv or SHEET.jsonl")
    e.set_defaults(func=cmd_review_export)
    i = r_sub.add_parser("import", help="store answers, report agreement and kappa, apply the fatal-flag rule")
    i.add_argument("dir", help="construction directory")
    i.add_argument("answers", nargs="+", help="answer files (CSV or JSONL) of two reviewers")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_review_import)
    a = cards_sub.add_parser("assign", help="the frozen assignment: which PASS cards enter a study")
    a.add_argument("dir", help="construction directory")
    a.add_argument("--rule", required=True, help="rule TOML (seed = N; see construction/assign.example.toml)")
    a.add_argument("--out", required=True, help="STUDY_CARDS directory")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_assign)
    d = cards_sub.add_parser("demo", help="the construction pipeline offline over the bundled PDR-Bench sample")
    d.add_argument("--out", required=True, help="output directory")
    d.set_defaults(func=cmd_demo)
