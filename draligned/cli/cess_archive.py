"""`draligned cess export` and `draligned cess pairs`: CESS over the pool runs of an archive."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from draligned.cli.cess import _positive_int, _table, trajectory_format

if TYPE_CHECKING:  # the archive layer is imported by the handlers: `cess estimate` needs none of it
    from draligned.cess.archive_runs import CessRun
    from draligned.cess.pairs import Interval, PairsReport

ESTIMANDS_NOTE = (
    "Two different estimands (CESS paper, Theorem 2): dOpened = P - Q Opened Mean is a paired\n"
    "intervention effect (how the user condition changed the evidence opened); dCESS = P - Q CESS\n"
    "compares two estimates of the SAME pool target, near zero by design, and is not an effect.\n"
    "Y: +1 = the card's P endpoint side for every run. Cluster: the card (question); pairs and blocks are\n"
    "averaged within card, then cards weigh equally; CIs: 95% bootstrap of whole cards (as in the report)."
)


def _ci(value: Interval | None) -> str | None:
    return None if value is None else f"{value.estimate:+.4f} [{value.lower:+.4f}, {value.upper:+.4f}]"


def pool_estimates_text(runs: list[CessRun]) -> str:
    """Mean pool estimates per card, search cell and arm."""
    from draligned.cess.archive_runs import ARCHIVE_LAMBDA
    from draligned.cess.pairs import arm_summaries

    rows = [(a.card_id, a.cell, a.arm, a.runs, a.rounds, a.opened_mean, a.dr_raw, a.cess, a.theta_star,
             a.agent_ended) for a in arm_summaries(runs)]
    return (f"Pool estimates per arm (means over runs; CESS = Eq. 9 with lambda {ARCHIVE_LAMBDA}; "
            "Y +1 = P side)\n" + _table(
                ("card", "selection/stopping/ranking", "arm", "runs", "T", "opened", "DR raw", "CESS",
                 "theta*", "agent-ended"), rows))


def pairs_text(report: PairsReport) -> str:
    """The per-cell P/Q summary and, when all four cells ran, the 2×2 intervention effects."""
    parts = [ESTIMANDS_NOTE, "",
             "P/Q pairs (same card, model, harness, seed and search cell)",
             _table(("selection/stopping/ranking", "pairs", "cards (cluster)", "dOpened = P - Q (effect) [95% CI]",
                     "dCESS = P - Q (same target) [95% CI]"),
                    [(c.cell, c.pairs, c.cards, _ci(c.opened_diff), _ci(c.cess_diff)) for c in report.cells])]
    cards = max((c.cards for c in report.cells), default=0)
    if 0 < cards < 5:
        parts.append(f"(only {cards} card(s): with so few clusters the bootstrap CIs are not informative)")
    if report.intervention:
        parts += ["", ("2x2 selection x stopping intervention (Eqs. 3-4; paired blocks: card, arm, model, "
                       "harness, seed, ranking; cluster: card)"),
                  _table(("effect", "on", "blocks", "value [95% CI]"),
                         [(e.effect, e.estimand, e.blocks, _ci(e.value)) for e in report.intervention])]
    return "\n".join(parts)


def _run_export(args: argparse.Namespace) -> int:
    from draligned.cess.archive_runs import export_trajectories
    from draligned.guards import open_archive

    n = export_trajectories(open_archive(args.archive), args.out, trajectory_format(args.out, args.format))
    print(f"{n} trajectories written to {args.out}", file=sys.stderr)
    return 0


def _run_pairs(args: argparse.Namespace) -> int:
    from draligned.cess.pairs import arm_summaries, pairs_report
    from draligned.guards import open_archive
    from draligned.workflow import load_cess_runs

    runs = load_cess_runs(open_archive(args.archive), verify=not args.no_verify)
    report = pairs_report(runs, n_resamples=args.resamples)
    if args.json:
        print(json.dumps({"arms": [a.model_dump() for a in arm_summaries(runs)], **report.model_dump()}))
    else:
        print(pool_estimates_text(runs) + "\n\n" + pairs_text(report))
    return 0


def register_archive_commands(commands: argparse._SubParsersAction) -> None:
    """Add `cess export` and `cess pairs` to the `cess` command group."""
    exp = commands.add_parser("export", help="write an archive's pool-search trajectories (JSON Lines or Parquet)")
    exp.add_argument("archive", type=Path, help="archive root")
    exp.add_argument("--out", type=Path, required=True, help="output file (cess estimate input)")
    exp.add_argument("--format", choices=("jsonl", "parquet"), help="file format (default: by extension)")
    exp.set_defaults(func=_run_export)
    pairs = commands.add_parser("pairs", help="per-arm pool estimates and P/Q pair contrasts of an archive")
    pairs.add_argument("archive", type=Path, help="archive root")
    pairs.add_argument("--json", action="store_true", help="print one JSON object")
    pairs.add_argument("--resamples", type=_positive_int, default=10_000,
                       help="cluster-bootstrap resamples (10000)")
    pairs.add_argument("--no-verify", action="store_true",
                       help="do not check the archive's hashes first (faster on a big archive; not recommended)")
    pairs.set_defaults(func=_run_pairs)
