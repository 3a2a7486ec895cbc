"""Findings, the SIMULATOR banner and the pair browser of `draligned report`, and the text commands.

The demo report is opened in headless Chromium and followed from the findings to a pair page and on to
a run page; highlighted paragraphs and read labels are checked against the evaluator's stored items
(read straight from ``reads/<evaluator>/``, not through the code that renders the pages).
"""

from __future__ import annotations

import csv
import random
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from draligned.analysis.browser import PAGE_ROWS, index_pages
from draligned.analysis.table import Table
from draligned.archive import Archive
from draligned.cli import main
from draligned.evaluator.aggregate import read_label
from draligned.evaluator.storage import ReadStore
from tests.conftest import DemoRun
from tests.fake_providers import FakeProvider, provider_study
from tests.harness_helpers import needs_bwrap
from tests.report_helpers import add_states

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def demo_needs(test):
    """The demo covers H-W and H-D, whose shell needs bubblewrap."""
    for mark in needs_bwrap:
        test = mark(test)
    return test
EVALUATOR = "sim-lexical-v1"


class Dom(HTMLParser):
    """Elements with their attributes and text, and every link, from a page (or a browser's DOM dump)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[dict] = []
        self.links: list[str] = []
        self._open: list[dict] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = {"tag": tag, **{k: v or "" for k, v in attrs}, "text": ""}
        if tag == "a" and el.get("href"):
            self.links.append(el["href"])
        if tag not in ("br", "wbr", "meta", "input", "img"):
            self.elements.append(el)
            self._open.append(el)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()["tag"] == tag:
                break

    def handle_data(self, data: str) -> None:
        for el in self._open:
            el["text"] += data

    def having(self, cls: str) -> list[dict]:
        return [e for e in self.elements if cls in e.get("class", "").split()]


def _dump(page: Path, profile: Path) -> str:
    """The DOM of a page as headless Chromium built it."""
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _stored(archive: Archive) -> dict[tuple[str, str], list]:
    """(run, document) -> [items of read 1, items of read 2] from the evaluator's files."""
    store = ReadStore(archive, EVALUATOR)
    reads = store.reads()
    out: dict[tuple[str, str], list] = {}
    for m in store.manifests():
        if m.kind == "document" and m.packet_id in reads:
            out.setdefault((m.run_id, m.document), [None, None])[m.read - 1] = reads[m.packet_id].items
    return out


def _expected(items_by_read: list, axis: str) -> tuple[set[str], list[str]]:
    """Highlighted paragraph ids (main advice on the factor, either read) and each read's label."""
    pids = {pid for items in items_by_read for i in items
            if i.axis_id == axis and i.kind == "ACTOR_ADVICE" and i.status == "MAIN" for pid in i.source_ids}
    labels = []
    for items in items_by_read:
        lab = read_label(items, axis)
        labels.append(lab.label or lab.basis)
    return pids, labels


def _check_document(dom: Dom, run_id: str, document: str, axis: str, stored: dict) -> None:
    pids, labels = _expected(stored[(run_id, document)], axis)
    shown = {e["data-pid"] for e in dom.having("hl") if e["data-run"] == run_id and e["data-document"] == document}
    assert shown == pids, (run_id, document)
    (head,) = [e for e in dom.having("labels") if e["data-run"] == run_id and e["data-document"] == document]
    assert [head["data-label1"].split(" ")[0], head["data-label2"].split(" ")[0]] == labels, (run_id, document)
    for el in dom.having("hl"):
        if el["data-run"] == run_id and el["data-document"] == document:
            assert f"[{el['data-pid']}]" in el["text"] and "ACTOR_ADVICE · MAIN" in el["text"]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def demo_report(demo_run: DemoRun) -> Path:
    assert demo_run.code == 0
    return demo_run.out / "report"


@demo_needs
def test_demo_report_opens_with_findings_a_banner_and_sides(demo_report: Path) -> None:
    md, html = (demo_report / "report.md").read_text(), (demo_report / "report.html").read_text()
    for text in (md, html):
        assert "SIMULATOR" in text.split("Findings")[0]  # the banner comes before everything else
        for name in ("agent model sim-agent (", "agent model sim-agent-weak (", f"evaluator {EVALUATOR} ("):
            assert name in text.split("Findings")[0]
    index = _rows(demo_report / "tables" / "pair_index.csv")
    pq = [r for r in index if r["comparison"] == "P-Q"]
    own = sum(r["reading"] == "each its own" for r in pq)
    summary = [r for r in _rows(demo_report / "tables" / "pair_summary.csv") if r["group_by"] == "all"
               and r["phase"] == "final" and r["comparison"] == "P-Q"]
    assert int(summary[0]["both_own"]) == own and int(summary[0]["pairs"]) == len(pq)
    first = md.split("## Findings")[1].splitlines()[2]
    assert first.startswith(f"- Final reports distinguish the two conditions in [{own} of {len(pq)} (")
    assert "95% CI" in first and "](#t-pair_summary)" in first and "](#t-pair_index)" in first
    # OWN/OTHER pairs are given as the endpoint both arms recommend, in the card's words
    same = [r for r in index if {r["state_a"], r["state_b"]} == {"OWN", "OTHER"}]
    assert same, "the demo has pairs where both arms recommend one endpoint"
    for r in same:
        side = "P" if r["state_a"] == "OWN" else "Q"
        assert r["reading"] == f"both recommend the {side} side" and r["recommends_a"] == r["recommends_b"]
        assert r["recommends_a"].startswith(f'{side} side ("')
    # two simulated agents with different sensitivities: the cross-model rows compare two settings
    models = {r["model"] for r in _rows(demo_report / "tables" / "consistency_settings.csv")}
    assert models == {"sim-agent", "sim-agent-weak"} and "By model (" in md
    # the headline counts the heatmaps' comparisons, and says so
    primary = [r for r in _rows(demo_report / "tables" / "pair_summary.csv") if r["group_by"] == "all"
               and r["phase"] == "final" and r["comparison"] in ("P-Q", "PP-QP")]
    headline = f"**{sum(int(r['both_own']) for r in primary)}/{sum(int(r['pairs']) for r in primary)}** final pairs"
    assert headline in md and "P-Q + PP-QP pairs, as in the heatmaps" in md


@demo_needs
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
def test_browse_from_findings_to_a_pair_and_a_run(demo_report: Path, demo_run: DemoRun, tmp_path: Path) -> None:
    archive = Archive(demo_run.out / "archive")
    stored = _stored(archive)
    report = Dom(_dump(demo_report / "report.html", tmp_path / "profile"))
    (findings,) = [e for e in report.elements if e.get("id") == "findings"]
    assert "distinguish the two conditions" in findings["text"]
    assert "#t-pair_index" in report.links and any(e.get("id") == "t-pair_index" for e in report.elements)
    pair_link = next(h for h in report.links if h.startswith("pages/pairs/") and not h.endswith("index-1.html"))
    pair_page = demo_report / pair_link
    pair = Dom(_dump(pair_page, tmp_path / "profile"))
    row = next(r for r in _rows(demo_report / "tables" / "pair_index.csv") if r["pair"] == pair_page.stem)
    assert pair.having("hl"), "the pair page highlights the paragraphs the reads cite"
    for run_id in (row["run_a"], row["run_b"]):
        for document in sorted({d for r, d in stored if r == run_id}):
            _check_document(pair, run_id, document, row["axis"], stored)
    chain = [e for e in pair.elements if e["tag"] == "tr" and "step" in e.get("class", "")]
    assert [c["data-document"] for c in chain][0] == "requests" and chain[-1]["data-document"] == "final"
    assert chain[-1]["data-state-a"] == row["state_a"] and chain[-1]["data-state-b"] == row["state_b"]
    run_link = next(h for h in pair.links if h == f"../runs/{row['run_a']}.html")
    run = Dom(_dump((pair_page.parent / run_link).resolve(), tmp_path / "profile"))
    record = archive.find_run(row["run_a"])
    ids = [e["id"] for e in run.elements if "ev" in e.get("class", "").split()]
    assert ids == [e.event_id for e in record.events]  # the whole transcript, in order
    final_text = archive.get_text(record.final_blob or "")
    finals = [e for e in run.elements if e.get("id") == next(e.event_id for e in record.events if e.type == "final")]
    assert final_text.strip().splitlines()[0] in finals[0]["text"]
    assert "latency" in run.having("ev-model_call")[0]["text"]
    assert "return the agent saw" in run.having("ev-tool_call")[0]["text"]


@demo_needs
def test_twenty_random_document_states_match_the_stored_items(demo_report: Path, demo_run: DemoRun) -> None:
    archive = Archive(demo_run.out / "archive")
    stored = _stored(archive)
    index = _rows(demo_report / "tables" / "pair_index.csv")
    by_run: dict[tuple[str, str], str] = {}
    for r in index:
        for run_id in (r["run_a"], r["run_b"]):
            by_run.setdefault((run_id, r["axis"]), r["pair"])
    cases = sorted((run, doc, axis) for (run, doc) in stored for (r, axis) in by_run if r == run)
    for run_id, document, axis in random.Random(17).sample(cases, 20):
        page = demo_report / "pages" / "pairs" / f"{by_run[(run_id, axis)]}.html"
        _check_document(Dom(page.read_text()), run_id, document, axis, stored)


@demo_needs
def test_archive_text_and_the_pair_chain_print_the_texts(demo_run: DemoRun, demo_report: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = demo_run.out / "archive"
    archive = Archive(root)
    record = next(r for r in archive.records() if r.slot.harness == "H-W")
    capsys.readouterr()
    assert main(["archive", "text", str(root), record.run_id]) == 0
    assert capsys.readouterr().out == archive.get_text(record.final_blob or "") + "\n"
    assert main(["archive", "text", str(root), record.run_id, "--draft", "1"]) == 0
    draft = next(e for e in record.events if e.type == "draft" and e.version == 1)
    assert capsys.readouterr().out == archive.get_text(draft.blob) + "\n"
    tool = next(e for e in record.events if e.type == "tool_call")
    assert main(["archive", "text", str(root), record.run_id, "--event", tool.event_id]) == 0
    out = capsys.readouterr().out
    assert archive.get_text(tool.arguments_blob) in out and archive.get_text(tool.return_blob) in out
    assert main(["archive", "text", str(root), record.run_id, "--requests"]) == 0
    assert f"{tool.event_id} {tool.tool}: {tool.request_text}" in capsys.readouterr().out
    assert main(["archive", "text", str(root), record.run_id, "--draft", "99"]) == 2
    assert "no draft version 99" in capsys.readouterr().err

    row = next(r for r in _rows(demo_report / "tables" / "pair_index.csv") if r["state_a"] == "OWN")
    assert main(["states", str(root), "--evaluator", EVALUATOR, "--pair", row["pair"]]) == 0
    out = capsys.readouterr().out
    final = out.split("\nfinal:\n")[1].splitlines()
    assert final[0].endswith(f"-> {row['reason_a']} -> {row['state_a']}")
    assert final[1].endswith(f"-> {row['reason_b']} -> {row['state_b']}")
    assert main(["states", str(root), "--evaluator", EVALUATOR, "--pair", "no.such.pair"]) == 2


@pytest.fixture
def real_protocol_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small archive whose agent model speaks the OpenAI chat protocol (a loopback server)."""
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    with FakeProvider("openai-chat") as fp:
        assert main(["run", str(provider_study(tmp_path, {"openai-chat": fp}))]) == 0
    return tmp_path / "archive"


def test_no_banner_without_a_simulator_and_a_simulator_evaluator_is_named(
        real_protocol_archive: Path, tmp_path: Path, repo: Path) -> None:
    archive = Archive(real_protocol_archive)
    add_states(archive, "human-panel", lambda arm, doc, axis, rid: ("OWN", "READS_AGREE"))
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "providers"\nversion = 1\n')
    out = tmp_path / "report"
    args = ["report", str(archive.root), "--plan", str(plan)]
    assert main([*args, "--evaluator", "human-panel", "--out", str(out)]) == 0
    for name in ("report.md", "report.html"):
        assert not re.search("simulat", (out / name).read_text(), re.IGNORECASE), name
    assert "Final reports distinguish the two conditions in [1 of 1 (" in (out / "report.md").read_text()
    # the same runs read by the SIMULATOR evaluator: the banner names the evaluator and no agent model
    assert main(["read", str(archive.root), "--evaluator", str(repo / "evaluators" / "sim.toml")]) == 0
    out2 = tmp_path / "report-sim"
    assert main([*args, "--evaluator", EVALUATOR, "--out", str(out2)]) == 0
    banner = (out2 / "report.md").read_text().split("\n\n")[1]
    assert banner.startswith("> **SIMULATOR") and f"evaluator {EVALUATOR}" in banner and "agent model" not in banner


def test_index_pages_are_paginated_and_link_every_row() -> None:
    """Thousands of runs never make one huge page: PAGE_ROWS rows per index page, each row linked."""
    rows = [[f"r{i:04d}", "completed"] for i in range(2 * PAGE_ROWS + 50)]
    pages = index_pages(Table(name="process_runs", title="t", note="n", columns=["run_id", "status"], rows=rows),
                        "runs", None)
    assert sorted(pages) == ["index-1.html", "index-2.html", "index-3.html"]
    linked = [re.findall(r'href="\.\./\.\./pages/runs/(r\d+)\.html"', pages[f"index-{n}.html"]) for n in (1, 2, 3)]
    assert [len(x) for x in linked] == [PAGE_ROWS, PAGE_ROWS, 50] and sum(linked, []) == [r[0] for r in rows]
    assert all('href="index-3.html"' in p and "simulator-banner" not in p for p in pages.values())


def test_the_run_pages_keep_short_shared_texts_and_read_long_ones_again(monkeypatch):
    """Short texts are read once while they stay among the last SHARED_TEXTS; a text longer than
    SHARED_TEXT_CHARS is never held, so the pages' memory stays bounded whatever the archive holds."""
    from draligned.analysis import browser

    monkeypatch.setattr(browser, "SHARED_TEXTS", 2)
    store = {"a": "x", "b": "y", "c": "z", "long": "w" * (browser.SHARED_TEXT_CHARS + 1)}
    reads: list[str] = []

    def get(sha: str) -> str:
        reads.append(sha)
        return store[sha]

    texts = browser.shared_texts(get)
    assert [texts(s) for s in ("a", "b", "a", "long", "long", "c", "a", "b")] == [
        "x", "y", "x", store["long"], store["long"], "z", "x", "y"]
    assert reads == ["a", "b", "long", "long", "c", "b"]  # "c" pushed out "b", the least recently used
