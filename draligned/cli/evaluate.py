"""`draligned read`, `states`, `agreement` and `review export|import`: the evaluator commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.table import Table

from draligned.evaluator.aggregate import STATES
from draligned.evaluator.agreement import between_evaluators, between_reads
from draligned.evaluator.config import EvaluatorError
from draligned.evaluator.packets import Phase
from draligned.evaluator.review import export_sheet, import_answers
from draligned.evaluator.states import PairCell, document_order, pair_cells, pair_matrix, state_rows
from draligned.evaluator.storage import ReadStore
from draligned.guards import evaluator_to_read, open_archive, require_reader
from draligned.models import ModelError
from draligned.workflow import read_and_index

EVALUATOR_HELP = ("an evaluator id this archive was read by, or the evaluator's TOML file (either is accepted "
                  "by every command)")
NO_VERIFY_HELP = "do not check the archive's hashes first (faster on a big archive; not recommended)"

_PHASE_ALIASES: dict[str, Phase] = {"requests": "requests", "drafts": "draft", "draft": "draft", "final": "final"}


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("read", help="read an archive with an evaluator (idempotent, resumable)")
    r.add_argument("archive")
    r.add_argument("--evaluator", required=True,
                   help="the evaluator's TOML file, or the id of a bundled one (e.g. sim-lexical-v1)")
    r.add_argument("--phase", default="requests,drafts,final", help="comma list of requests,drafts,final")
    r.add_argument("--no-verify", action="store_true", help=NO_VERIFY_HELP)
    r.set_defaults(func=cmd_read)
    s = sub.add_parser("states", help="directional states from an evaluator's reads")
    s.add_argument("archive")
    s.add_argument("--evaluator", required=True, help=EVALUATOR_HELP)
    s.add_argument("--json", action="store_true", help="one JSON object per (run, phase, document, axis)")
    s.add_argument("--pairs", action="store_true", help="with --json: one object per pair and document")
    s.set_defaults(func=cmd_states)
    a = sub.add_parser("agreement", help="exact agreement and Cohen's kappa per phase")
    a.add_argument("archive")
    a.add_argument("--evaluators", required=True,
                   help="A,B (two evaluators) or A (read 1 vs read 2); each " + EVALUATOR_HELP)
    a.set_defaults(func=cmd_agreement)
    v = sub.add_parser("review", help="blinded human review sheets")
    vs = v.add_subparsers(dest="review_command", required=True)
    e = vs.add_parser("export", help="write a blinded sheet of document items")
    e.add_argument("archive")
    e.add_argument("--evaluator", required=True, help="whose states are reviewed: " + EVALUATOR_HELP)
    e.add_argument("--out", required=True, help="sheet file (.jsonl or .csv)")
    e.add_argument("--limit", type=int, default=None, help="at most this many items")
    e.set_defaults(func=cmd_review_export)
    i = vs.add_parser("import", help="record reviewers' answers and report agreement")
    i.add_argument("archive")
    i.add_argument("--evaluator", required=True, help="of the exported sheet: " + EVALUATOR_HELP)
    i.add_argument("answers", nargs="+", help="answer files (JSONL or CSV: item_id, reviewer, answer)")
    i.set_defaults(func=cmd_review_import)


def parse_phases(text: str) -> list[Phase]:
    """`requests,drafts,final` -> the phase names used in manifests."""
    phases = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in phases if p not in _PHASE_ALIASES]
    if unknown or not phases:
        raise EvaluatorError(f"--phase {text!r}: unknown phase {', '.join(map(repr, unknown)) or '(none given)'}; "
                             f"use a comma list of requests, drafts, final")
    return [_PHASE_ALIASES[p] for p in phases]


def cmd_read(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    phases = tuple(parse_phases(args.phase))
    archive = open_archive(args.archive)
    try:
        summary = read_and_index(archive, evaluator_to_read(archive, args.evaluator), phases,
                                 verify=not args.no_verify)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary.model_dump(mode="json")))
    for err in summary.model_errors:
        console.print(f"[yellow]unread (model error):[/yellow] {err}")
    return 1 if summary.model_errors else 0


def print_pair_matrix(cells: list[PairCell], document: str = "final", title: str | None = None) -> None:
    """Arm A (rows) × arm B (columns) counts of states for one document role."""
    counts = pair_matrix(cells, document)
    used = [s for s in STATES if any(s in k for k in counts)]
    table = Table(title=title or f"{document} states")
    table.add_column("P arm \\ Q arm")
    for s in used:
        table.add_column(s, justify="right")
    for a in used:
        table.add_row(a, *(str(counts.get((a, b), 0) or "") for b in used))
    Console().print(table)


def cmd_states(args: argparse.Namespace) -> int:
    if args.pairs and not args.json:
        print("error: --pairs changes the --json output (one object per pair); give both, or neither for "
              "the pair matrices", file=sys.stderr)
        return 2
    archive = open_archive(args.archive)
    rows = state_rows(archive, require_reader(archive, args.evaluator))
    if args.json and args.pairs:
        for cell in pair_cells(archive, rows):
            print(json.dumps(cell.model_dump(mode="json")))
        return 0
    if args.json:
        for r in rows:
            d = r.decision
            print(json.dumps({"evaluator_id": r.evaluator_id, "run_id": r.run_id, "card_id": r.card_id,
                              "arm": r.arm, "seed": r.seed, "phase": r.phase, "document": r.document,
                              "axis_id": r.axis_id, "assigned": r.assigned, "state": d.state,
                              "reason": d.reason, "label": d.label,
                              "reads": [x.model_dump(mode="json") for x in r.reads]}, ensure_ascii=False))
        return 0
    cells = pair_cells(archive, rows)
    for doc in sorted({c.document for c in cells}, key=document_order):
        print_pair_matrix(cells, doc)
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    archive = open_archive(args.archive)
    ids = [require_reader(archive, x.strip()) for x in args.evaluators.split(",") if x.strip()]
    if len(ids) == 1:
        results = between_reads(ReadStore(archive, ids[0]))
    elif len(ids) == 2:
        results = between_evaluators(state_rows(archive, ids[0]), state_rows(archive, ids[1]))
    else:
        print("error: --evaluators takes one id (read 1 vs read 2) or two ids", file=sys.stderr)
        return 2
    if not results:
        what = "a second read of any document" if len(ids) == 1 else "any document both have read"
        print(f"error: nothing to compare: {' and '.join(ids)} have no {what} in {archive.root}", file=sys.stderr)
        return 2
    for res in results:
        print(json.dumps({"raters": ids if len(ids) == 2 else [f"{ids[0]}:read1", f"{ids[0]}:read2"],
                          **res.model_dump(mode="json")}))
    return 0


def cmd_review_export(args: argparse.Namespace) -> int:
    archive = open_archive(args.archive)
    evaluator_id = require_reader(archive, args.evaluator)
    out = Path(args.out)
    fmt: Literal["jsonl", "csv"] = "csv" if out.suffix == ".csv" else "jsonl"
    text, sheet_id = export_sheet(archive, evaluator_id, state_rows(archive, evaluator_id), fmt, args.limit)
    out.write_text(text, encoding="utf-8")
    print(f"sheet {sheet_id}: {out} (key kept under {archive.root / 'reviews' / evaluator_id})")
    return 0


def cmd_review_import(args: argparse.Namespace) -> int:
    texts = [Path(p).read_text(encoding="utf-8") for p in args.answers]
    try:
        archive = open_archive(args.archive)
        report = import_answers(archive, require_reader(archive, args.evaluator), texts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.model_dump(mode="json")))
    return 0
