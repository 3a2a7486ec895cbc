"""`draligned archive verify|reindex|ls|show|stats`."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from draligned.archive import Archive, ArchiveError
from draligned.archive_summary import archive_stats, list_runs
from draligned.cli.acquisition import print_acquisition
from draligned.indexing import rebuild, verify


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("archive", help="inspect, verify and index an archive")
    s = p.add_subparsers(dest="archive_command", required=True)
    for name, func, help_ in (
        ("verify", cmd_verify, "recompute every hash; non-zero exit naming each missing or altered file"),
        ("reindex", cmd_reindex, "rebuild index.duckdb from the files"),
        ("ls", cmd_ls, "list runs"),
        ("stats", cmd_stats, "totals: runs, model calls, tool calls, tokens, blobs"),
    ):
        q = s.add_parser(name, help=help_)
        q.add_argument("archive")
        q.set_defaults(func=_clean_errors(func))
        if name == "stats":
            q.add_argument("--json", action="store_true", help="print one JSON object")
    q = s.add_parser("show", help="show one run record and its events")
    q.add_argument("archive")
    q.add_argument("run_id")
    q.set_defaults(func=cmd_show)


def _clean_errors(func):
    """A missing or damaged archive is reported as one line naming the path (exit 2), not a traceback."""
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ArchiveError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return wrapped


def cmd_verify(args: argparse.Namespace) -> int:
    archive = Archive(args.archive)
    problems = verify(archive)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in {archive.root}", file=sys.stderr)
        return 1
    print(f"OK: {len(archive.record_paths())} run records and {len(archive.blob_shas())} blobs verified in "
          f"{archive.root}")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    print(rebuild(Archive(args.archive)))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    data = archive_stats(Archive(args.archive)).model_dump()
    if args.json:
        print(json.dumps(data, sort_keys=True))
        return 0
    for k, v in data.items():
        if k not in ("by_model", "acquisition"):
            print(f"{k:>18}: {'-' if v is None else v}")
    table = Table(title="by model")
    cols = ("runs", "model_calls", "input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens",
            "cache_hits", "failed_attempts", "cost_usd")
    for col in ("model", *cols):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, m in data["by_model"].items():
        table.add_row(name, *("-" if m[c] is None else str(m[c]) for c in cols))
    Console(width=160).print(table)
    web = data["acquisition"]
    if web["searches"] or web["reads"]:
        print_acquisition(web)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    table = Table()
    for col in ("run", "attempt", "card", "arm", "model", "harness", "seed", "status", "calls",
                "tools", "drafts", "final"):
        table.add_column(col)
    for run in list_runs(Archive(args.archive)):
        table.add_row(*(str(x) for x in run.model_dump().values()))
    Console(width=160).print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    archive = Archive(args.archive)
    try:
        record = archive.find_run(args.run_id)
    except ArchiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    head = record.model_dump(mode="json", exclude={"events"})
    print(json.dumps(head, indent=1, ensure_ascii=False))
    for ev in record.events:
        d = ev.model_dump(mode="json")
        print(f"{d.pop('event_id')} {d.pop('type')}: " + json.dumps(d, ensure_ascii=False))
    return 0
