"""`draligned report` over a small real sim archive: every file written, numbers traceable to the
CSVs, the HTML self-contained and rendered by headless Chromium (screenshot kept in the test dir)."""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

from draligned.analysis import plots
from draligned.archive import Archive
from draligned.cli import main
from draligned.hashing import sha256_file
from tests.report_helpers import add_cess, add_interventions, add_states
from tests.study_helpers import run, write_study

#: One xdist worker runs these, so the module's archive and reports (``built`` and those over it) are made
#: once, not once in each worker.
pytestmark = pytest.mark.xdist_group("report")

PLAN = """
name = "test"
version = 1
phases = ["requests", "draft:first", "draft:last", "final"]
[agreement]
evaluators = ["aux", "absent-evaluator"]
[cess]
bootstrap = 200
"""


def _rule(arm: str, document: str, axis: str, run_id: str) -> tuple[str, str | None]:
    """Known states: finals OWN except arm Q of single-factor cards (BOTH); drafts OWN; requests UNDEFINED."""
    if document == "requests":
        return "UNDEFINED", "NO_IDENTIFIED_REQUEST"
    if document == "final" and arm == "Q":
        return "BOTH", "READS_AGREE"
    return "OWN", "READS_AGREE"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    run(write_study(tmp, ["travel_budget_en.json", "car_insurance_2f_en.json"], seeds=2))
    bare = tmp / "bare"
    shutil.copytree(tmp / "archive", bare)  # the same runs, never read by an evaluator
    archive = Archive(tmp / "archive")
    add_states(archive, "sim", _rule)
    add_states(archive, "aux", lambda arm, doc, axis, rid: ("OWN", "READS_AGREE") if doc != "requests"
               else ("UNDEFINED", "NO_IDENTIFIED_REQUEST"))
    add_cess(archive, lambda arm, rid: {"opened_mean": 0.25 if arm.startswith("P") else 0.75, "cess": 0.5})
    add_interventions(archive, lambda a, b, rep: 0.2 + 0.3 * a + 0.1 * b * rep)
    plan = tmp / "plan.toml"
    plan.write_text(PLAN)
    return tmp, archive, bare, plan


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def sim_report(built) -> tuple[Path, str]:
    """The report of the built archive with the sim evaluator (its tables, HTML and pages) and what
    ``--show-sql`` printed: built once for the tests that only read it."""
    tmp, archive, _, plan = built
    out = tmp / "out"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(["report", str(archive.root), "--plan", str(plan), "--evaluator", "sim", "--out", str(out),
                     "--show-sql"])
    assert code == 0
    return out, printed.getvalue()


def test_report_writes_every_table_with_identity_and_known_answers(built, sim_report):
    plan, (out, printed) = built[3], sim_report
    assert "FROM runs r" in printed and "FROM states" in printed and "FROM cess_runs" in printed
    manifest = json.loads((out / "tables" / "manifest.json").read_text())
    assert manifest["identity"]["plan_sha256"] == sha256_file(plan)
    assert manifest["identity"]["evaluator_id"] == "sim" and manifest["states_available"]
    assert manifest["identity"]["index_warning"] is None
    expected = {"coverage_runs", "coverage_pairs", "coverage_states", "pair_matrix", "pair_summary", "pair_index",
                "retention_flows", "retention_summary", "text_change", "request_vs_final", "searched_alternative",
                "process_runs", "process_by_arm", "state_distribution", "consistency_settings",
                "consistency_cards", "evaluator_agreement", "provenance", "cess_by_arm", "cess_by_pair",
                "cess_interventions"}
    assert set(manifest["tables"]) == expected
    con = duckdb.connect()
    for name, meta in manifest["tables"].items():
        rows = _csv(out / "tables" / f"{name}.csv")
        assert len(rows) == meta["rows"], name
        assert con.execute(f"SELECT count(*) FROM '{out / 'tables' / name}.parquet'").fetchone()[0] == meta["rows"]
        assert meta["sql"], name
    kv = dict(con.execute(f"SELECT key::VARCHAR, value::VARCHAR FROM "
                          f"parquet_kv_metadata('{out / 'tables' / 'pair_summary.parquet'}')").fetchall())
    assert kv["plan_sha256"] == manifest["identity"]["plan_sha256"] and kv["evaluator_id"] == "sim"
    assert kv["archive_sha256"] == manifest["identity"]["archive_sha256"]
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert manifest["identity"]["archive_sha256"][:12] in md and manifest["identity"]["plan_sha256"][:12] in html

    # 6 P-Q pairs of travel (2 seeds) ... the known rule: single-factor finals are OWN vs BOTH,
    # two-factor finals are all OWN, so exactly the 8 two-factor pairs are distinguished.
    summary = [r for r in _csv(out / "tables" / "pair_summary.csv")
               if r["evaluator"] == "sim" and r["phase"] == "final" and r["group_by"] == "all"]
    by_comp = {r["comparison"]: (int(r["pairs"]), int(r["both_own"])) for r in summary}
    assert by_comp == {"P-Q": (2, 0), "PP-QP": (2, 2), "PQ-QQ": (2, 2), "PP-PQ": (2, 2), "QP-QQ": (2, 2)}
    # recompute the summary from the exported matrix
    matrix = [r for r in _csv(out / "tables" / "pair_matrix.csv") if r["evaluator"] == "sim"
              and r["phase"] == "final" and r["group_by"] == "all" and r["comparison"] == "P-Q"]
    assert {(r["state_a"], r["state_b"]): int(r["pairs"]) for r in matrix} == {("OWN", "BOTH"): 2}
    kept = {r["comparison"]: r for r in _csv(out / "tables" / "retention_summary.csv")}
    assert kept["P-Q"]["kept"] == "2" and kept["P-Q"]["readable"] == "4"  # Q: OWN draft -> BOTH final
    agree = {r["other_evaluator"]: r for r in _csv(out / "tables" / "evaluator_agreement.csv") if r["phase"] == "final"}
    assert int(agree["aux"]["agree"]) == int(agree["aux"]["n"]) - 2  # aux says OWN for the two travel Q finals
    assert agree["absent-evaluator"]["n"] == "0" and agree["absent-evaluator"]["kappa_undefined"] == "no items"
    assert "absent-evaluator" in manifest["tables"]["evaluator_agreement"]["note"]
    cov = _csv(out / "tables" / "coverage_runs.csv")[0]
    assert cov["attempts"] == cov["completed"] == "12"
    om = {r["comparison"]: r for r in _csv(out / "tables" / "cess_by_pair.csv")}
    # A-B is arm A minus arm B (it used to print B - A under the A-B label: +0.5 here)
    assert float(om["PP-QP"]["opened_mean_a_minus_b"]) == pytest.approx(-0.5)
    assert float(om["PP-PQ"]["opened_mean_a_minus_b"]) == 0.0
    assert float(om["P-Q"]["cess_a_minus_b"]) == 0.0
    effects = {r["effect"]: r for r in _csv(out / "tables" / "cess_interventions.csv")}
    assert float(effects["selection"]["mean"]) == pytest.approx(0.3) and effects["selection"]["blocks"] == "4"
    assert float(effects["stopping"]["mean"]) == pytest.approx(0.05)
    prov = _csv(out / "tables" / "provenance.csv")
    assert int(prov[0]["total"]) == int(prov[1]["total"]) + int(prov[2]["total"]) > 0


def test_report_without_states_says_so_and_keeps_the_rest(built):
    tmp, _, bare, plan = built
    out = tmp / "out-bare"
    assert main(["report", str(bare), "--plan", str(plan), "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "No evaluator reads in this archive for evaluator &#x27;(no evaluator has read this archive)" in html
    names = set(json.loads((out / "tables" / "manifest.json").read_text())["tables"])
    assert {"coverage_runs", "process_runs", "text_change", "provenance", "cess_by_arm"} <= names
    assert "pair_matrix" not in names
    states = _csv(out / "tables" / "coverage_states.csv")
    assert {r["state"] for r in states} == {"NOT_READ"} and sum(int(r["documents"]) for r in states) == 4 * 20
    cess = json.loads((out / "tables" / "manifest.json").read_text())["tables"]["cess_by_arm"]
    assert cess["rows"] == 0 and "no run in this archive searched a candidate pool" in cess["empty_reason"]


def test_a_report_built_again_draws_only_the_figures_whose_inputs_changed(built, sim_report, tmp_path, monkeypatch):
    archive, plan, (first, _) = built[1], built[3], sim_report
    again = tmp_path / "again"
    shutil.copytree(first, again)
    (again / "figures" / "text_change.png").write_bytes(b"edited")  # an edited figure is drawn again
    drawn: list[str] = []

    def counting(name: str):
        draw = getattr(plots, name)
        return lambda *args: drawn.append(name) or draw(*args)

    for name in ("pair_heatmaps", "state_distribution", "retention_flows", "text_change", "process_counts",
                 "cess_vs_opened"):
        monkeypatch.setattr(plots, name, counting(name))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(archive.root), "--plan", str(plan), "--evaluator", "aux", "--out", str(again)]) == 0
    # the other evaluator's states change the state figures; runs, texts and CESS stay as they were drawn
    assert sorted(drawn) == ["pair_heatmaps", "retention_flows", "state_distribution", "text_change"]
    figures = {p.stem: p.read_bytes() for p in (again / "figures").glob("*.png")}
    assert figures["text_change"] == (first / "figures" / "text_change.png").read_bytes()
    changed = {n for n, data in figures.items() if data != (first / "figures" / f"{n}.png").read_bytes()}
    assert changed == {"pair_heatmaps", "retention_flows", "state_distribution"}
    html = (again / "report.html").read_text()
    assert all(base64.b64encode(data).decode() in html for data in figures.values())


@pytest.fixture(scope="module")
def html_report(sim_report) -> Path:
    """The report's folder (its HTML and pages)."""
    return sim_report[0]


def test_html_is_self_contained(html_report):
    out = html_report
    html = (out / "report.html").read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#|data:|pages/)""", html)
    assert "<script" not in html and html.count("data:image/png;base64,") >= 6
    # links into the pair browser are relative and name pages that exist; the pages load nothing either
    targets = set(re.findall(r'href="(pages/[^"#]+)', html))
    assert any("/runs/" in t for t in targets) and any("/pairs/" in t for t in targets)
    assert all((out / t).is_file() for t in targets)
    for page in [out / t for t in sorted(targets)[:5]]:
        text = page.read_text()
        assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#|\.\./|[\w.-]+\.html)""", text), page


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
def test_html_renders_in_headless_chromium(html_report, tmp_path):
    out, shot = html_report, tmp_path / "screenshot.png"
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", f"--user-data-dir={tmp_path / 'chromium-profile'}", f"--screenshot={shot}",
         "--window-size=1280,2000", (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not re.search(r"net::ERR_|Uncaught|Failed to load resource", proc.stderr), proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    print(f"screenshot: {shot}")


def test_stale_index_is_reported(built):
    tmp, _, bare, plan = built
    stale = tmp / "stale"
    shutil.copytree(bare, stale)
    victim = sorted((stale / "runs").glob("*.json"))[0].name.split(".")[0]
    for path in (stale / "runs").glob(f"{victim}*"):
        path.unlink()
    assert main(["report", str(stale), "--plan", str(plan), "--out", str(tmp / "out-stale")]) == 2
    assert not (tmp / "out-stale").exists()  # the lost run record is a damaged archive: refused
    assert main(["report", str(stale), "--plan", str(plan), "--out", str(tmp / "out-stale"), "--no-verify"]) == 0
    md = (tmp / "out-stale" / "report.md").read_text()
    assert "Warning: the index lists 12 runs but the archive holds 11 run files" in md
    assert "built with --no-verify" in md
    assert json.loads((tmp / "out-stale" / "tables" / "manifest.json").read_text())["identity"]["verified"] is False


def test_a_figures_inputs_tell_nan_infinity_and_null_apart():
    """A table value changing between NaN, infinity and null changes the figure's inputs, so its old drawing
    is not reused (a JSON-mode dump writes all three as null); equal tables give equal inputs."""
    from draligned.analysis.render import figure_inputs
    from draligned.analysis.table import Table

    def inputs(value: object) -> str:
        table = Table(name="t", title="T", note="n", columns=["x"], rows=[[value]])
        return figure_inputs("fig", {"code": "c"}, (table, "primary"))

    seen = [inputs(v) for v in (float("nan"), float("inf"), float("-inf"), None, 0.5)]
    assert len(set(seen)) == 5 and inputs(0.5) == seen[-1]
