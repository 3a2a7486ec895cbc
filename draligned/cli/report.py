"""`draligned report ARCHIVE --plan PLAN.toml --evaluator ID --out DIR [--show-sql]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from draligned.analysis.plan import PlanError
from draligned.archive import ArchiveError
from draligned.demo import DEMO_PLAN
from draligned.workflow import make_report

DEMO_EVALUATOR = "sim-lexical-v1"
"""Evaluator id of the offline simulator evaluator (issue 5's evaluators/sim.toml)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the audit report (md, html, CSV, Parquet) of an archive")
    p.add_argument("archive", help="archive root")
    p.add_argument("--plan", default=str(DEMO_PLAN),
                   help="analysis plan TOML (default: the bundled analysis/demo.toml)")
    p.add_argument("--evaluator", default=DEMO_EVALUATOR,
                   help=f"evaluator id whose states are read (default: {DEMO_EVALUATOR})")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--show-sql", action="store_true", help="print every query the report ran")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.archive).is_dir():
        print(f"error: {args.archive}: no such archive directory", file=sys.stderr)
        return 2
    try:
        written = make_report(args.archive, args.plan, args.evaluator, args.out)
    except (PlanError, ArchiveError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.show_sql:
        for query in written.queries:
            print(query + ";\n")
    print(f"Report: {written.html}\n        {written.markdown}\n        {written.tables}")
    return 0
