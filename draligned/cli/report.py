"""`draligned report ARCHIVE [--plan PLAN.toml] [--evaluator ID|FILE] --out DIR` and `draligned plan init ARCHIVE`."""

from __future__ import annotations

import argparse
import sys

from draligned.analysis.plan import starter_plan
from draligned.audit import make_report
from draligned.cli import EVALUATOR_HELP, NO_VERIFY_HELP, add_command
from draligned.guards import archive_studies, open_archive


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "report")
    p.add_argument("archive", help="archive root")
    p.add_argument("--plan", help="analysis plan TOML (default: a plan over the archive's own studies, said so; "
                                  "'draligned plan init ARCHIVE' prints it)")
    p.add_argument("--evaluator", help="whose states are read: " + EVALUATOR_HELP
                                       + " (default: the one evaluator that read the archive)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--show-sql", action="store_true", help="print every query the report ran")
    p.add_argument("--no-verify", action="store_true", help=NO_VERIFY_HELP + "; the report's manifest records it")
    p.set_defaults(func=cmd_report)
    plan = add_command(sub, "plan")
    plans = plan.add_subparsers(dest="plan_command", required=True)
    init = plans.add_parser("init", help="print a starting analysis plan for an archive's studies")
    init.add_argument("archive", help="archive root")
    init.set_defaults(func=cmd_plan_init)


def cmd_report(args: argparse.Namespace) -> int:
    written = make_report(args.archive, args.plan, args.evaluator, args.out, verify=not args.no_verify)
    for note in written.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.show_sql:
        for query in written.queries:
            print(query + ";\n")
    print(f"Report: {written.html}\n        {written.markdown}\n        {written.tables}")
    return 0


def cmd_plan_init(args: argparse.Namespace) -> int:
    archive = open_archive(args.archive)
    studies = archive_studies(archive)
    if not studies:
        print(f"error: {archive.root}: the archive has no runs, so no plan can name its studies", file=sys.stderr)
        return 2
    print(starter_plan(studies), end="")
    return 0
