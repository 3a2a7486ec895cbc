"""`draligned cess` commands: parser registration, estimate output keys and errors, simulate, bench."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from draligned.cli import cess as cess_cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "perspectrum"
KEYS = {
    "trajectory_id",
    "task_id",
    "rounds",
    "opened_mean",
    "outcome_regression",
    "ipw_raw",
    "dr_raw",
    "cess",
    "cess_clip_then_shrink",
    "cess_opened_anchor",
    "ess",
    "max_weight",
    "theta_star",
    "support_interval",
}
RECORDS = [
    {
        "trajectory_id": "a",
        "task_id": "q1",
        "ranking": "pro",
        "budget": 2,
        "pool": {"doc_ids": ["d0", "d1", "d2", "d3"], "y": [1, -1, 0.5, 0], "m": [0.5, 0, 0, 0]},
        "rounds": [
            {"probs": [0.4, 0.3, 0.2, 0.1], "chosen": "d0", "stop_prob": 0},
            {"probs": [0.1, 0.5, 0.2, 0.2], "chosen": "d1", "stop_prob": 0.2},
        ],
    },
    {
        "trajectory_id": "b",
        "task_id": "q2",
        "ranking": None,
        "budget": 2,
        "pool": {"doc_ids": ["d0", "d1", "d2", "d3"], "y": None, "m": None},
        "rounds": [{"probs": [1, 0, 0, 0], "chosen": "d0", "stop_prob": 0, "y": 0.6}],
    },
]


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="draligned")
    cess_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _file(tmp_path: Path, records: list[dict]) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_estimate_json_keys_and_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        _run(["cess", "estimate", "--trajectories", _file(tmp_path, RECORDS), "--lambda", "0.5", "--json"])
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and all(set(line) == KEYS for line in lines)
    a, b = lines
    assert a["rounds"] == 2 and a["dr_raw"] == pytest.approx(-0.03125) and a["theta_star"] == 0.125
    assert a["cess"] == pytest.approx(0.125 + 0.5 * (-0.03125 - 0.125)) and a["support_interval"] is None
    assert b["support_interval"] == pytest.approx([-0.6, 0.9])  # ρ = 3/4, θ+ = Y of d0 = 0.6
    assert b["dr_raw"] is None and b["cess"] is None and b["theta_star"] is None


def test_estimate_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["cess", "estimate", "--trajectories", _file(tmp_path, RECORDS)]) == 0
    out = capsys.readouterr().out
    assert "trajectory" in out and "support interval" in out and "[-0.6000, 0.9000]" in out


def test_estimate_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = json.loads(json.dumps(RECORDS[0])) | {"trajectory_id": "c"}
    bad["rounds"][1]["chosen"] = "zz"
    assert _run(["cess", "estimate", "--trajectories", _file(tmp_path, [RECORDS[0], bad])]) == 2
    assert "line 2: rounds[1].chosen: unknown document id" in capsys.readouterr().err


def test_lambda_must_be_in_unit_interval(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _run(["cess", "estimate", "--trajectories", _file(tmp_path, RECORDS), "--lambda", "2"])


def test_simulate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["cess", "simulate", "--json", "--pools", "60", "--seed", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["identification"]) == 4 and report["seed"] == 3 and report["support"]["n_targets"] == 60


def test_bench_perspectrum(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cess", "bench", "perspectrum", "--data", str(FIXTURE), "--seeds", "1", "--budget", "4"]
    assert _run([*argv, "--resamples", "200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [m["method"] for m in report["methods"]][:5] == [
        "Opened Mean",
        "Outcome Regression",
        "Tuning-set Mean",
        "Opened Mean shrunk to Tuning Mean",
        "CESS",
    ]
    assert report["settings"]["outcome"] == "mean" and report["settings"]["shared_documents"] == "drop"
    assert report["calibration"]["chosen"]["stop_rule"] in ("one_sided", "both_sides")
    assert _run([*argv, "--resamples", "200", "--json", "--no-calibrate", "--stop-rule", "both_sides",
                 "--outcome", "ridge", "--shared", "keep"]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert fixed["calibration"] is None and fixed["search"]["stop_rule"] == "both_sides"
    assert fixed["settings"]["outcome"] == "ridge" and fixed["settings"]["shared_documents"] == "keep"
    assert _run([*argv, "--resamples", "200"]) == 0
    assert "MAE after each round" in capsys.readouterr().out
    assert _run(["cess", "bench", "perspectrum", "--data", str(FIXTURE / "missing")]) == 2
    assert _run([*argv, "--min-docs", "500"]) == 2
    assert "no eligible" in capsys.readouterr().err


def test_registered_in_the_main_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from draligned.cli import build_parser, main

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "cess" in commands.choices
    assert main(["cess", "estimate", "--trajectories", _file(tmp_path, RECORDS[:1]), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == KEYS


@pytest.mark.parametrize(
    "argv",
    [["cess", "simulate", "--pools", "0"], ["cess", "bench", "perspectrum", "--data", "x", "--budget", "0"]],
)
def test_sizes_must_be_positive(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        _run(argv)


# Worked by hand (lambda = 0.5), independently of the estimator code:
# A: N=4, K=2, no stopping. mbar = 0.1; DR = 0.1 + (1/2)[(1-0.2)/(4*0.4) + (0.5-0)/(4*0.25)] = 0.6;
#    IPW = (1/2)[1/1.6 + 0.5/1] = 0.5625; CESS = 0.1 + 0.5*0.5 = 0.35; Eq. 12 = 0.75 + 0.5(0.6-0.75);
#    weights 0.625, 1 -> ESS = 1.625^2 / (0.625^2 + 1).
# B: K=3, T=2 < K, d1 chosen twice, c_2 = 0.4 so s_2 = 0.6, m = 0:
#    DR = IPW = (1/3)[0.8/(4*0.5) + 0.8/(4*0.5*0.6)] = 0.35556; Eq. 12 = 0.8 + 0.5(0.35556 - 0.8); theta* = -0.15.
# C: d3, d4 have probability 0 in both rounds: D+ = {d1, d2}, rho = 1/2, both opened (Y 1, -0.5):
#    theta+ = 0.25 exactly, interval (1 - 0.5 -/+ 2) / 4 = [-0.375, 0.625]; no point estimates.
#    (B's round 1 had full support; it used to give d3, d4 probability 0, which is round-varying
#    support and now withholds point estimates; p_1 of the chosen d1 is still 0.5.)
# D: T=1, p=0.05, m=-0.5: DR = -0.5 + (1/2)(1.1/0.2) = 2.25; Eq. 9 = clip(-0.5 + 0.5*2.75) = 0.875;
#    Eq. 13 = -0.5 + 0.5(1 - (-0.5)) = 0.25; Eq. 12 = 0.6 + 0.5(1 - 0.6) = 0.8.
HAND = {
    "A": {"opened_mean": 0.75, "outcome_regression": 0.1, "ipw_raw": 0.5625, "dr_raw": 0.6, "cess": 0.35,
          "cess_clip_then_shrink": 0.35, "cess_opened_anchor": 0.675, "ess": 1.625**2 / 1.390625,
          "max_weight": 1.0, "theta_star": 0.125, "support_interval": None},
    "B": {"opened_mean": 0.8, "outcome_regression": 0.0, "ipw_raw": 0.32 / 0.9, "dr_raw": 0.32 / 0.9,
          "cess": 0.16 / 0.9, "cess_clip_then_shrink": 0.16 / 0.9, "cess_opened_anchor": 0.4 + 0.16 / 0.9,
          "ess": (4 / 3) ** 2 / (0.25 + (5 / 6) ** 2), "max_weight": 5 / 6, "theta_star": -0.15,
          "support_interval": None},
    "C": {"opened_mean": 0.25, "ipw_raw": None, "dr_raw": None, "cess": None, "cess_clip_then_shrink": None,
          "cess_opened_anchor": None, "theta_star": None, "support_interval": [-0.375, 0.625]},
    "D": {"opened_mean": 0.6, "outcome_regression": -0.5, "ipw_raw": 1.5, "dr_raw": 2.25, "cess": 0.875,
          "cess_clip_then_shrink": 0.25, "cess_opened_anchor": 0.8, "ess": 1.0, "max_weight": 5.0},
}


def test_estimate_json_reproduces_hand_computed_trajectories(capsys: pytest.CaptureFixture[str]) -> None:
    from draligned.cli import main

    path = Path(__file__).resolve().parents[1] / "fixtures" / "cess_hand_trajectories.jsonl"
    assert main(["cess", "estimate", "--trajectories", str(path), "--lambda", "0.5", "--json"]) == 0
    got = {r["trajectory_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(got) == set(HAND)
    for tid, expected in HAND.items():
        for key, value in expected.items():
            if value is None or isinstance(value, list):
                assert got[tid][key] == (value if value is None else pytest.approx(value, abs=1e-12)), (tid, key)
            else:
                assert got[tid][key] == pytest.approx(value, abs=1e-12), (tid, key)


_THREADS = """
import os, sys
from draligned.cli import main
assert "numpy" not in sys.modules
main(["cess", "estimate", sys.argv[1], "--json"])  # refused (no such file), after its module imported numpy
assert "numpy" in sys.modules
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def test_the_commands_keep_numpys_blas_to_one_thread_unless_the_user_chose(tmp_path: Path) -> None:
    """OpenBLAS's threads spun beside the command's own for 0.1 s after import (draligned.cli.one_blas_thread)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def threads(**extra: str) -> tuple[int, str]:
        out = subprocess.run([sys.executable, "-c", _THREADS, str(tmp_path / "absent.jsonl")], env=env | extra,
                             capture_output=True, text=True, check=True).stdout.split()
        return int(out[-2]), out[-1]

    (default, setting), (chosen, kept) = threads(), threads(OPENBLAS_NUM_THREADS="2")
    assert (setting, kept) == ("1", "2")
    assert chosen - default == 1  # with the user's 2, one BLAS thread beside the caller's (and pyarrow's)
