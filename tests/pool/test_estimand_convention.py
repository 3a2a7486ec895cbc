"""One sign convention and one cluster: the report and `draligned cess pairs` agree on every pair.

The demo's pool study (2 cards x P/Q x 5 seeds x the 2x2 search cells) is read twice: by the
report (`pool-report/tables/cess_by_pair.csv`, the bundled demo plan) and by `cess pairs --json`.
For every search cell both print P minus Q, averaged within card then across cards, with the
same card-level bootstrap (10,000 resamples, seed 2026092207).
"""

from __future__ import annotations

import csv
import json

import pytest

from draligned.cli import main


def test_report_and_cess_pairs_print_the_same_signed_difference_and_ci(demo_run, capsys: pytest.CaptureFixture[str]):
    assert demo_run.code == 0
    with open(demo_run.out / "pool-report" / "tables" / "cess_by_pair.csv", newline="") as fh:
        report = {r["search_cell"]: r for r in csv.DictReader(fh) if r["comparison"] == "P-Q"}
    assert main(["cess", "pairs", str(demo_run.out / "pool-archive"), "--json"]) == 0
    cli = {c["cell"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    assert set(report) == set(cli) and len(cli) == 4
    moved = 0
    for cell, row in report.items():
        assert row["cluster"] == "card" and cli[cell]["cards"] == 2
        om, ce = cli[cell]["opened_diff"], cli[cell]["cess_diff"]
        print(f"{cell}: report P-Q opened {row['opened_mean_a_minus_b']} [{row['om_low']}, {row['om_high']}]; "
              f"cess pairs {om['estimate']:+.4f} [{om['lower']:+.4f}, {om['upper']:+.4f}]")
        assert (float(row["opened_mean_a_minus_b"]), float(row["om_low"]), float(row["om_high"])) == pytest.approx(
            (om["estimate"], om["lower"], om["upper"]), abs=5e-5)
        assert (float(row["cess_a_minus_b"]), float(row["cess_low"]), float(row["cess_high"])) == pytest.approx(
            (ce["estimate"], ce["lower"], ce["upper"]), abs=5e-5)
        moved += om["estimate"] != 0.0 and om["lower"] < om["upper"]
    assert moved, "some cell must have a nonzero difference and a non-degenerate interval"
