"""`draligned cess`: pool estimates of logged trajectories, simulation, the PERSPECTRUM bench."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from draligned.cess.stop_rules import STOP_RULES
from draligned.cli import add_command

if TYPE_CHECKING:  # each subcommand imports what it runs (`cess estimate` none of the benches)
    from draligned.cess.bench import BenchReport, BenchSettings
    from draligned.cess.experiments import SimulationReport


def _unit_interval(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned plain-text table; floats with 4 decimals, None as '-'."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    cells = [list(headers)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _interval(bounds: tuple[float, float]) -> str:
    return f"[{bounds[0]:.4f}, {bounds[1]:.4f}]"


def python_table(reports: Sequence[dict[str, Any]]) -> str:
    """The `cess estimate` table in Python (without the extension, whose writer gives the same text)."""
    from draligned.cess.estimate_table import HEADERS

    rows = [(*list(r.values())[:-1], None if r["support_interval"] is None else _interval(r["support_interval"]))
            for r in reports]
    return _table(HEADERS, rows)


def trajectory_format(path: Path, given: str | None) -> Literal["jsonl", "parquet"]:
    """``--format``, else ``parquet`` for a ``.parquet`` / ``.pq`` file and ``jsonl`` for anything else."""
    by_name = path.suffix.lower() in (".parquet", ".pq")
    return "parquet" if given == "parquet" or (given is None and by_name) else "jsonl"


def _input_errors(*known: type[Exception]) -> tuple[type[Exception], ...]:
    """``known`` and DuckDB's error type if a reader imported DuckDB (only then can it have raised one: the
    Parquet path of a flat file runs without it, and its import is a fifth of the start-up)."""
    duckdb = sys.modules.get("duckdb")
    return (*known, duckdb.Error) if duckdb is not None else known


def _run_estimate(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.trajectories is None):
        print("error: name the trajectory file once: cess estimate FILE (or --trajectories FILE)", file=sys.stderr)
        return 2
    path = args.path or args.trajectories
    # The loaders (pyarrow, DuckDB) are imported here: `run` and `demo` import this module for
    # trajectory_format, and each command imports only what it runs (draligned/cli/__init__.py).
    from draligned.cess.column_estimators import estimate_columns, estimate_rows
    from draligned.cess.estimate_file import estimate_lines, estimate_table, load_file
    from draligned.cess.trajectory_rules import TrajectoryError

    fmt = trajectory_format(path, args.format)
    try:  # each reads and checks the whole file before anything is printed
        # --json: the bytes pydantic's model_dump_json would write (tests/cess/test_columns.py)
        text = estimate_lines(path, fmt, args.lam) if args.json else estimate_table(path, fmt, args.lam)
        if text is None:  # without the extension: the table in Python, over the loaded columns
            columns = load_file(path, fmt)
            rows = estimate_rows(columns, estimate_columns(columns, args.lam))
            text = iter([(python_table(list(rows)) + "\n").encode()])
    except _input_errors(TrajectoryError, OSError) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        print(
            f"CESS lambda = {args.lam}; CESS = Eq. 9, CESS13 = Eq. 13, CESS12 = Eq. 12; "
            "point estimates are omitted where the support interval (Eq. 10) applies"
        )
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    for piece in text:
        out.write(piece) if out is not None else sys.stdout.write(piece.decode())
    sys.stdout.flush()
    return 0


def simulation_text(report: SimulationReport) -> str:
    """The controlled experiments as readable tables."""
    ident = _table(
        ("selection", "stopping", "full", "(se)", "no sel. w", "(se)", "no cont. w", "(se)"),
        [
            (
                r.selection,
                r.stopping,
                r.full,
                r.full_se,
                r.no_selection_weights,
                r.no_selection_weights_se,
                r.no_continuation_weights,
                r.no_continuation_weights_se,
            )
            for r in report.identification
        ],
    )
    rank = _table(
        ("estimator", "mean pro", "mean anti", "gap", "(se)", "MAE"),
        [(r.estimator, r.mean_pro, r.mean_anti, r.gap, r.gap_se, r.mae) for r in report.ranking],
    )
    s = report.support
    return "\n".join(
        [
            "(a) Identification: bias of the raw sequential DR, 30 documents, K = 6 "
            f"({report.identification_pools} "
            f"pools x {report.identification_runs} runs; SE across pools)",
            ident,
            "",
            f"(b) Ranking experiment: 30 documents, K = 4, {report.ranking_pools} paired pools "
            "(SE across pools)",
            rank,
            "",
            f"(c) Limited support: deterministic selection, 110 documents, K = 4, {s.n_targets} targets",
            f"reachable share {s.reachable_share:.4f}; interval coverage {s.coverage:.4f}; mean width "
            f"{s.mean_width:.4f} (se {s.mean_width_se:.2g}); Opened Mean MAE {s.opened_mean_mae:.4f}",
            "",
            f"seed {report.seed}; {report.seconds:.1f} s",
        ]
    )


def _run_simulate(args: argparse.Namespace) -> int:
    from draligned.cess.experiments import simulate

    report = simulate(seed=args.seed, pools=args.pools)
    print(report.model_dump_json() if args.json else simulation_text(report))
    return 0


def bench_text(report: BenchReport) -> str:
    """The PERSPECTRUM benchmark as readable tables."""
    methods = _table(
        ("method", "MAE", "MAE 95% CI", "RMSE", "bias", "S", "S 95% CI", "worst MAE", "dir. dis.",
         "dir. 95% CI"),
        [
            (m.method, m.mae, _interval(m.mae_ci), m.rmse, m.bias, m.sensitivity, _interval(m.sensitivity_ci),
             m.worst_ranking_mae, m.direction_error, _interval(m.direction_error_ci))
            for m in report.methods
        ],
    )
    paired = _table(
        ("comparison (A - B)", "metric", "difference", "95% CI low", "95% CI high"),
        [(p.comparison, p.metric, p.difference, p.lower, p.upper) for p in report.paired],
    )
    by_round = _table(
        ("round", "Opened Mean", "DR (clipped)", "CESS"),
        [(r.slice, r.opened_mean, r.dr_clipped, r.cess) for r in report.by_round],
    )
    by_config = _table(
        ("controller/stopping", "Opened Mean", "DR (clipped)", "CESS"),
        [(r.slice, r.opened_mean, r.dr_clipped, r.cess) for r in report.by_config],
    )
    w, lk, s = report.weights, report.leakage, report.search
    cal = report.calibration
    calibrated = (
        "not calibrated (settings as given)" if cal is None else
        f"calibrated on {cal.claims} tuning claims ({len(cal.points)} grid points, {cal.runs_per_point} runs each) "
        f"to the paper's Opened Mean (MAE {cal.target_mae}, S {cal.target_s}): got MAE "
        f"{cal.chosen.opened_mean_mae:.4f}, S {cal.chosen.opened_mean_s:.4f}")
    return "\n".join(
        [
            f"PERSPECTRUM ({report.documents}): {report.n_tuning_claims} tuning claims "
            f"({report.n_tuning_runs} runs), {report.n_eval_claims} test claims ({report.n_eval_runs} runs); "
            f"shared documents: {report.settings.shared_documents} ({lk.shared_test_documents} of "
            f"{lk.test_documents} test documents are in the release's tuning pools; ridge test corr "
            f"{_num(lk.ridge_corr_shared)} on them, {_num(lk.ridge_corr_other)} on the rest)",
            f"search: tilt {s.ranking_strength:g}, temperature {s.temperature:g}, epsilon {s.epsilon:g}, "
            f"stop rule {s.stop_rule} (0.75 / 0.10), K = {s.budget}, {s.seeds} seeds; {calibrated}",
            f"tuning mean {report.tuning_mean:.4f}; alpha {report.alpha:g}; ridge penalty {report.ridge_alpha:g}; "
            f"CESS lambda 0.5 (tuned lambda {report.lam:g}); {report.settings.variant}, m = {report.settings.outcome}",
            methods,
            "",
            "Paired differences A - B (question-level bootstrap)",
            paired,
            "",
            "MAE after each round",
            by_round,
            "",
            "MAE by controller and stopping",
            by_config,
            "",
            f"weights: median ESS {w.median_ess:.2f}, 5th pct ESS {w.p05_ess:.2f}, 95th pct max weight "
            f"{w.p95_max_weight:.2f}, min p*s {w.min_p_times_s:.2g}, "
            f"raw DR outside [-1,1] {w.share_dr_outside_range:.2%}",
            f"{report.seconds:.1f} s",
        ]
    )


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def add_bench_options(pp: argparse.ArgumentParser) -> None:
    """Options of the protocol shared by `cess bench perspectrum` and benchmarks/cess_perspectrum.py."""
    pp.add_argument("--seeds", type=_positive_int, default=3, help="paired replicates per design cell (3)")
    pp.add_argument("--budget", type=_positive_int, default=10, help="maximum rounds K (10)")
    pp.add_argument("--outcome", choices=("mean", "ridge"), default="mean",
                    help="outcome model m of every row: tuning-set mean (paper, default) or text ridge")
    pp.add_argument("--stop-rule", choices=STOP_RULES, default=None,
                    help="stop-recommendation rule (default: chosen by the calibration)")
    pp.add_argument("--shared", choices=("drop", "keep"), default="drop",
                    help="test documents in tuning pools: drop them there (default) or keep them")
    pp.add_argument("--no-calibrate", action="store_true",
                    help="use the search settings' defaults instead of calibrating on tuning claims")


def bench_settings(args: argparse.Namespace) -> BenchSettings:
    """BenchSettings from the options of :func:`add_bench_options` (and ``--variant``/``--resamples``)."""
    from draligned.cess.bench import BenchSettings
    from draligned.cess.searches import SearchSettings

    rule = {"stop_rule": args.stop_rule} if args.stop_rule else {}
    search = SearchSettings(seeds=args.seeds, budget=args.budget, **rule)
    return BenchSettings(
        search=search, calibrate=not args.no_calibrate,
        stop_rules=[args.stop_rule] if args.stop_rule else list(STOP_RULES), outcome=args.outcome,
        shared_documents=args.shared, variant=getattr(args, "variant", "clip_then_shrink"),
        n_resamples=getattr(args, "resamples", 10_000))


def _run_bench_perspectrum(args: argparse.Namespace) -> int:
    from draligned.cess.bench import run_bench
    from draligned.cess.perspectrum import load_perspectrum

    try:
        data = load_perspectrum(args.data, min_docs=args.min_docs, documents=args.documents)
    except (OSError, ValueError) as exc:
        print(f"error: {args.data}: {exc}", file=sys.stderr)
        return 2
    if not data.tuning or not data.evaluation:
        print(
            f"error: {args.data}: no eligible tuning or test claims (--min-docs {args.min_docs})",
            file=sys.stderr,
        )
        return 2
    try:
        report = run_bench(data, bench_settings(args))
    except ValueError as exc:
        print(f"error: {args.data}: {exc}", file=sys.stderr)
        return 2
    print(report.model_dump_json() if args.json else bench_text(report))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `cess estimate`, `cess simulate`, `cess bench perspectrum`, `cess export` and `cess pairs`."""
    cess = add_command(sub, "cess")
    commands = cess.add_subparsers(dest="cess_command", required=True)

    est = commands.add_parser("estimate", help="pool estimates for logged trajectories (JSON Lines or Parquet)")
    est.add_argument("path", type=Path, nargs="?", help="trajectory file: JSON Lines, or Parquet (.parquet)")
    est.add_argument("--trajectories", type=Path, help="the trajectory file, as an option")
    est.add_argument("--format", choices=("jsonl", "parquet"), help="file format (default: by extension)")
    est.add_argument(
        "--lambda", dest="lam", type=_unit_interval, default=0.5, help="shrinkage coefficient (0.5)"
    )
    est.add_argument("--json", action="store_true", help="one JSON object per trajectory and line")
    est.set_defaults(func=_run_estimate)

    sim = commands.add_parser("simulate", help="the paper's controlled experiments on simulated pools")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.add_argument("--seed", type=int, default=0, help="master seed (0)")
    sim.add_argument(
        "--pools",
        type=_positive_int,
        default=None,
        help="pools per experiment (default: 500 x 12 runs, 8000, 16000 as in the paper)",
    )
    sim.set_defaults(func=_run_simulate)

    bench = commands.add_parser("bench", help="benchmarks on real data")
    benches = bench.add_subparsers(dest="bench_name", required=True)
    pp = benches.add_parser("perspectrum", help="PERSPECTRUM v1.0 with non-LLM controllers")
    pp.add_argument("--data", type=Path, required=True, help="directory of the PERSPECTRUM v1.0 release")
    pp.add_argument("--json", action="store_true", help="print one JSON object")
    add_bench_options(pp)
    pp.add_argument(
        "--variant",
        choices=("clip_then_shrink", "shrink_then_clip", "opened_anchor"),
        default="clip_then_shrink",
        help="CESS formula: Eq. 13 (default), Eq. 9, Eq. 12",
    )
    pp.add_argument(
        "--resamples", type=_positive_int, default=10_000, help="cluster-bootstrap resamples (10000)"
    )
    pp.add_argument("--min-docs", type=_positive_int, default=10, help="minimum pool size per claim (10)")
    pp.add_argument(
        "--documents",
        choices=("auto", "perspectives", "evidence"),
        default="auto",
        help="candidate documents (auto: evidence paragraphs if evidence_pool_v1.0.json exists)",
    )
    pp.set_defaults(func=_run_bench_perspectrum)

    from draligned.cli.cess_archive import register_archive_commands  # imports this module

    register_archive_commands(commands)
