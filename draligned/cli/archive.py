"""`draligned archive verify|reindex|ls|show|stats|text`.

The summaries, tables and merge are imported by the commands that print them: ``archive verify`` would
otherwise pay for the analysis adapters and rich at start-up (a third of a second of CPU, about 2 µs per
file of a 4,000-run archive's verify).
"""

from __future__ import annotations

import argparse
import json
import sys

from draligned.cli import add_command
from draligned.guards import open_archive
from draligned.indexing import rebuild, verify


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "archive")
    s = p.add_subparsers(dest="archive_command", required=True)
    for name, func, help_ in (
        ("verify", cmd_verify, "recompute every hash; non-zero exit naming each missing or altered file"),
        ("reindex", cmd_reindex, "rebuild index.duckdb from the files"),
        ("ls", cmd_ls, "list runs"),
        ("stats", cmd_stats, "totals: runs, model calls, tool calls, tokens, blobs"),
    ):
        q = s.add_parser(name, help=help_)
        q.add_argument("archive")
        q.set_defaults(func=func)
        if name == "stats":
            q.add_argument("--json", action="store_true", help="print one JSON object")
    q = s.add_parser("merge", help="union shard archives into one (refuses conflicting or damaged files) and reindex")
    q.add_argument("shards", nargs="+", metavar="SHARD")
    q.add_argument("--into", required=True, metavar="ARCHIVE", help="the merged archive (made if missing)")
    q.set_defaults(func=cmd_merge)
    q = s.add_parser("show", help="show one run record and its events")
    q.add_argument("archive")
    q.add_argument("run_id")
    q.set_defaults(func=cmd_show)
    q = s.add_parser("text", help="print a run's texts: the final (default), a draft, its requests or one event")
    q.add_argument("archive")
    q.add_argument("run_id")
    which = q.add_mutually_exclusive_group()
    which.add_argument("--final", action="store_true", help="the final report (the default)")
    which.add_argument("--draft", type=int, metavar="N", help="draft version N")
    which.add_argument("--requests", action="store_true", help="the search queries and page reads, in order")
    which.add_argument("--event", metavar="EVENT_ID", help="one event's texts, e.g. e0007")
    q.set_defaults(func=cmd_text)


def cmd_verify(args: argparse.Namespace) -> int:
    archive = open_archive(args.archive)
    problems = verify(archive)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in {archive.root}", file=sys.stderr)
        return 1
    print(f"OK: {len(archive.run_names()[0])} run records and {len(archive.blob_names())} blobs verified in "
          f"{archive.root}")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    print(rebuild(open_archive(args.archive)))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from draligned.shards import merge_archives

    result = merge_archives(args.shards, args.into)
    for line in result.kept_first:
        print(line, file=sys.stderr)
    print(f"merged {len(args.shards)} shard(s) into {result.into}: {result.copied} file(s) copied, "
          f"{result.present} already there; {result.runs} run records")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from draligned.archive_summary import archive_stats
    from draligned.cli.acquisition import print_acquisition

    data = archive_stats(open_archive(args.archive)).model_dump()
    if args.json:
        print(json.dumps(data, sort_keys=True))
        return 0
    for k, v in data.items():
        if k not in ("by_model", "gateways", "acquisition"):
            print(f"{k:>18}: {'-' if v is None else v}")
    table = Table(title="by model")
    cols = ("runs", "model_calls", "input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens",
            "cache_hits", "failed_attempts", "cost_usd")
    for col in ("model", *cols):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, m in data["by_model"].items():
        table.add_row(name, *("-" if m[c] is None else str(m[c]) for c in cols))
    Console(width=160).print(table)
    if data["gateways"]:
        gw = Table(title="gateways (what the gateway's headers reported; the archived body is what draligned sent)")
        gcols = ("gateway", "calls", "echoes", "served_models", "upstream_providers", "gateway_retries",
                 "gateway_cost_usd")
        for col in ("model", *gcols):
            gw.add_column(col)
        for name, g in data["gateways"].items():
            gw.add_row(name, *("-" if g[c] is None else ", ".join(g[c]) if isinstance(g[c], list) else str(g[c])
                               for c in gcols))
        Console(width=200).print(gw)
    web = data["acquisition"]
    if web["searches"] or web["reads"]:
        print_acquisition(web)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from draligned.archive_summary import LISTED, list_runs

    table = Table()
    for col in ("run", "attempt", "card", "arm", "model", "harness", "seed", "status", "calls",
                "tools", "drafts", "final"):
        table.add_column(col)
    for run in list_runs(open_archive(args.archive)):
        table.add_row(*(str(getattr(run, name)) for name in LISTED))
    Console(width=160).print(table)
    return 0


def cmd_text(args: argparse.Namespace) -> int:
    from draligned.archive_summary import run_text

    print(run_text(open_archive(args.archive), args.run_id, draft=args.draft, requests=args.requests, event=args.event))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    record = open_archive(args.archive).find_run(args.run_id)
    head = record.model_dump(mode="json", exclude={"events"})
    print(json.dumps(head, indent=1, ensure_ascii=False))
    for ev in record.events:
        d = ev.model_dump(mode="json")
        print(f"{d.pop('event_id')} {d.pop('type')}: " + json.dumps(d, ensure_ascii=False))
    return 0
