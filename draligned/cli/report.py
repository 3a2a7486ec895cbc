"""`draligned report ARCHIVE --plan PLAN.toml --evaluator ID --out DIR [--show-sql]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from draligned.analysis.plan import PlanError, load_plan
from draligned.archive import Archive, ArchiveError
from draligned.indexing import ensure

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_PLAN = REPO_ROOT / "analysis" / "demo.toml"
DEMO_EVALUATOR = "sim-lexical-v1"
"""Evaluator id of the offline simulator evaluator (issue 5's evaluators/sim.toml)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the audit report (md, html, CSV, Parquet) of an archive")
    p.add_argument("archive", help="archive root")
    p.add_argument("--plan", default=str(DEMO_PLAN), help="analysis plan TOML (default: analysis/demo.toml)")
    p.add_argument("--evaluator", default=DEMO_EVALUATOR,
                   help=f"evaluator id whose states are read (default: {DEMO_EVALUATOR})")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--show-sql", action="store_true", help="print every query the report ran")
    p.set_defaults(func=cmd_report)


def make_report(archive: str | Path, plan_path: str | Path, evaluator: str, out: str | Path,
                show_sql: bool = False) -> Path:
    """Build and write a report; returns the path of report.html."""
    # Imported here so that other commands do not pay for loading matplotlib.
    from draligned.analysis.build import build_report
    from draligned.analysis.render import write_report

    loaded = load_plan(plan_path)
    ensure(Archive(archive))  # the report reads the index; an archive without one gets it built
    report = build_report(archive, loaded, evaluator)
    if show_sql:
        for q in dict.fromkeys(report.queries):
            print(q + ";\n")
    return write_report(report, loaded.plan, out)["html"]


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.archive).is_dir():
        print(f"error: {args.archive}: no such archive directory", file=sys.stderr)
        return 2
    try:
        html = make_report(args.archive, args.plan, args.evaluator, args.out, args.show_sql)
    except (PlanError, ArchiveError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Report: {html}\n        {Path(html).with_name('report.md')}\n        {Path(html).parent / 'tables'}")
    return 0
