"""`draligned read`, `states`, `agreement` and `review export|import`: the evaluator commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from draligned.audit import read_and_index
from draligned.cli import EVALUATOR_HELP, NO_VERIFY_HELP, add_command
from draligned.evaluator.config import EvaluatorError
from draligned.evaluator.summary import POLL_S
from draligned.guards import evaluator_to_read, open_archive, require_reader
from draligned.models import ModelError

if TYPE_CHECKING:  # the other commands' modules are imported by their handlers: a read loads none of them
    from rich.console import Console

    from draligned.archive.store import Archive
    from draligned.evaluator.packets import Phase
    from draligned.evaluator.states import PairCell

_PHASE_ALIASES: dict[str, Phase] = {"requests": "requests", "drafts": "draft", "draft": "draft", "final": "final"}


def register(sub: argparse._SubParsersAction) -> None:
    r = add_command(sub, "read")
    r.add_argument("archive")
    r.add_argument("--evaluator", required=True,
                   help="the evaluator's TOML file, or the id of a bundled one (e.g. sim-lexical-v1)")
    r.add_argument("--phase", default="requests,drafts,final", help="comma list of requests,drafts,final")
    r.add_argument("--batch", action="store_true",
                   help="send pending reads as provider batch jobs (OpenAI Batch API, Anthropic Message Batches), "
                        "poll until they end and ingest them; a rerun resumes the same jobs")
    r.add_argument("--status", action="store_true", help="with --batch: show where each batch job stands")
    r.add_argument("--cancel", action="store_true", help="with --batch: cancel the open batch jobs")
    r.add_argument("--poll-s", type=float, default=POLL_S, help="with --batch: seconds between polls")
    r.add_argument("--no-verify", action="store_true", help=NO_VERIFY_HELP)
    r.set_defaults(func=cmd_read)
    s = add_command(sub, "states")
    s.add_argument("archive")
    s.add_argument("--evaluator", required=True, help=EVALUATOR_HELP)
    s.add_argument("--json", action="store_true", help="one JSON object per (run, phase, document, axis)")
    s.add_argument("--pairs", action="store_true", help="with --json: one object per pair and document")
    s.add_argument("--pair", metavar="PAIR", help="one pair's decision chain (read 1 / read 2 -> decision -> state "
                                                  "per document, paper Table 22); ids as in the report's pair table")
    s.set_defaults(func=cmd_states)
    a = add_command(sub, "agreement")
    a.add_argument("archive")
    a.add_argument("--evaluators", required=True,
                   help="A,B (two evaluators) or A (read 1 vs read 2); each " + EVALUATOR_HELP)
    a.set_defaults(func=cmd_agreement)
    v = add_command(sub, "review")
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


def _stderr() -> Console:
    """The console for messages on stderr (rich is loaded only when there is one to print)."""
    from rich.console import Console

    return Console(stderr=True)


def cmd_read(args: argparse.Namespace) -> int:
    if (args.status or args.cancel) and not args.batch:
        _stderr().print("[red]error:[/red] --status and --cancel go with --batch")
        return 2
    phases = tuple(parse_phases(args.phase))
    archive = open_archive(args.archive)
    try:
        evaluator = evaluator_to_read(archive, args.evaluator)
        if args.status or args.cancel:
            from draligned.workflow import batch_status, cancel_batch_jobs

            shown = (batch_status(archive, evaluator) if args.status else cancel_batch_jobs(archive, evaluator))
            for item in shown:
                print(json.dumps(item.model_dump(mode="json")))
            return 0
        summary = read_and_index(archive, evaluator, phases, verify=not args.no_verify, batch=args.batch,
                                 poll_s=args.poll_s, seen=lambda s: _stderr().print(
                                     f"batch {s.batch_id}: {s.status} {json.dumps(s.counts)}"))
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _stderr().print("interrupted: submitted batch jobs are recorded in the archive; the same command resumes "
                      "polling them (reads made so far are kept)")
        return 130
    print(json.dumps(summary.model_dump(mode="json")))
    for err in summary.model_errors:
        _stderr().print(f"[yellow]unread (model error):[/yellow] {err}")
    for err in summary.lines_failed:
        _stderr().print(f"[yellow]unread (batch line):[/yellow] {err}")
    return 1 if summary.model_errors or summary.lines_failed else 0


def print_pair_matrix(cells: list[PairCell], document: str = "final", title: str | None = None) -> None:
    """Arm A (rows) × arm B (columns) counts of states for one document role."""
    from rich.console import Console
    from rich.table import Table

    from draligned.evaluator.aggregate import STATES
    from draligned.evaluator.states import pair_matrix

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
    from draligned.evaluator.states import document_order, pair_cells, state_rows

    if args.pairs and not args.json:
        print("error: --pairs changes the --json output (one object per pair); give both, or neither for "
              "the pair matrices", file=sys.stderr)
        return 2
    archive = open_archive(args.archive)
    evaluator_id = require_reader(archive, args.evaluator)
    if args.pair:
        return print_pair_chain(archive, evaluator_id, args.pair, args.json)
    rows = state_rows(archive, evaluator_id)
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


def print_pair_chain(archive: Archive, evaluator_id: str, pair: str, as_json: bool) -> int:
    from draligned.evaluator.evidence import pair_chain

    try:
        chain = pair_chain(archive, evaluator_id, pair)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    if as_json:
        print(chain.model_dump_json())
        return 0
    arm_a, arm_b = chain.comparison.split("-")
    print(f"pair {chain.pair}: card {chain.card_id}, factor {chain.axis_id}, arm {arm_a} run {chain.runs[0]}, "
          f"arm {arm_b} run {chain.runs[1]}")
    print(f"  P: {chain.endpoints['P']}\n  Q: {chain.endpoints['Q']}")
    for step in chain.steps:
        print(f"{step.document}:")
        for arm, reads, d in ((arm_a, step.a_reads, step.a), (arm_b, step.b_reads, step.b)):
            print(f"  arm {arm}: {' / '.join(reads) or '-'} -> {d.reason} -> {d.state}")
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from draligned.evaluator.agreement import between_evaluators, between_reads
    from draligned.evaluator.states import state_rows
    from draligned.evaluator.storage import ReadStore

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
    from draligned.evaluator.review import export_sheet
    from draligned.evaluator.states import state_rows

    archive = open_archive(args.archive)
    evaluator_id = require_reader(archive, args.evaluator)
    out = Path(args.out)
    fmt: Literal["jsonl", "csv"] = "csv" if out.suffix == ".csv" else "jsonl"
    text, sheet_id = export_sheet(archive, evaluator_id, state_rows(archive, evaluator_id), fmt, args.limit)
    out.write_text(text, encoding="utf-8")
    print(f"sheet {sheet_id}: {out} (key kept under {archive.root / 'reviews' / evaluator_id})")
    return 0


def cmd_review_import(args: argparse.Namespace) -> int:
    from draligned.evaluator.review import import_answers

    texts = [Path(p).read_text(encoding="utf-8") for p in args.answers]
    try:
        archive = open_archive(args.archive)
        report = import_answers(archive, require_reader(archive, args.evaluator), texts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.model_dump(mode="json")))
    return 0
