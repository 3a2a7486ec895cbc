"""`draligned acquisition export|stats`: what an archive's web backends acquired."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from draligned.archive import Archive, ArchiveError
from draligned.cli import add_command
from draligned.tools.web.export import acquisition_stats, export_corpus


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "acquisition")
    s = p.add_subparsers(dest="acquisition_command", required=True)
    e = s.add_parser("export", help="every page read and search hit as a corpus file the corpus backend serves")
    e.add_argument("archive")
    e.add_argument("--out", required=True, help="corpus file to write (JSON Lines); its snapshot label goes "
                                                "beside it as NAME.snapshot.json")
    e.set_defaults(func=cmd_export)
    t = s.add_parser("stats", help="searches, reads, live fetches vs store hits, failures by reason, bytes")
    t.add_argument("archive")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.set_defaults(func=cmd_stats)


def _archive(path: str) -> Archive:
    archive = Archive(path)
    if not archive.runs_dir.is_dir():
        raise ArchiveError(f"{path}: not an archive (no runs/ directory)")
    return archive


def cmd_export(args: argparse.Namespace) -> int:
    try:
        snapshot = export_corpus(_archive(args.archive), Path(args.out))
    except (ArchiveError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {snapshot.documents} documents ({snapshot.pages} pages read, {snapshot.hits} search hits), "
          f"{snapshot.label}")
    return 0


def print_acquisition(stats: dict[str, Any]) -> None:
    """The web figures as ``archive stats`` and ``acquisition stats`` print them."""
    print("web acquisition:")
    for k, v in stats.items():
        shown = ", ".join(f"{r} {n}" for r, n in v.items()) or "none" if isinstance(v, dict) else v
        print(f"{k:>18}: {'-' if shown is None else shown}")


def cmd_stats(args: argparse.Namespace) -> int:
    try:
        stats = acquisition_stats(_archive(args.archive)).model_dump()
    except ArchiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        print_acquisition(stats)
    return 0
