"""The pair browser: one static page per pair and per run, and paginated index pages, under ``pages/``.

Pages are self-contained HTML (inline CSS, no request to anything, readable without JavaScript; the
index pages carry a small inline filter script that only hides rows). Every table row of the report
that names a run or a pair links to its page. Index pages hold at most ``PAGE_ROWS`` rows each, so an
archive with thousands of runs never makes one huge page.
"""

from __future__ import annotations

import html
from pathlib import Path

from draligned.analysis.browse_pair import pair_body
from draligned.analysis.browse_run import Texts, run_body
from draligned.analysis.build import Report
from draligned.analysis.page import CSS, cell, header_cell, state_badge
from draligned.analysis.plan import Plan
from draligned.analysis.simulators import SIMULATOR_PROTOCOLS
from draligned.analysis.table import Table, fmt
from draligned.archive import Archive
from draligned.cards import Card
from draligned.evaluator.evidence import Evidence
from draligned.evaluator.reading import load_card
from draligned.lru import LRU
from draligned.records import RunRecord

PAGE_ROWS = 200
"""Rows per index page."""
SHARED_TEXTS = 1024
"""Blob texts the run pages keep while they are written: runs share system prompts, user messages and
tool returns (the demo's 120 run pages read 2,241 distinct blobs 8,104 times)."""
SHARED_TEXT_CHARS = 32_768
"""Longest text kept (so at most about 32 MB are held); a longer one, such as a whole page read, is read again."""


def shared_texts(get: Texts) -> Texts:
    """``get`` remembering the last SHARED_TEXTS texts of at most SHARED_TEXT_CHARS characters."""
    kept: LRU[str, str] = LRU(SHARED_TEXTS)

    def texts(sha: str) -> str:
        text = kept.get(sha)
        if text is None:
            text = get(sha)
            if len(text) <= SHARED_TEXT_CHARS:
                kept.put(sha, text)
        return text

    return texts

PAGE_CSS = CSS + """
main { max-width:1500px; }
.side { display:grid; grid-template-columns:1fr 1fr; gap:18px; align-items:start; }
.side > div { min-width:0; }
.sticky { position:sticky; top:0; background:var(--bg); z-index:1; }
h3.phase { background:#14213d; color:#fff; padding:4px 10px; border-radius:6px; margin:18px 0 8px; }
.para { background:#fff; border:1px solid var(--line); border-radius:6px; padding:6px 10px; margin:5px 0;
        font-size:13.5px; }
.para.hl { background:#fff3bf; border:2px solid #e0a800; }
.pid { color:var(--muted); font:11px ui-monospace, Menlo, monospace; }
.items { margin:4px 0 0 0; padding-left:18px; font-size:12px; color:#5a4300; }
.labels { font-size:13px; background:#eef4f8; padding:6px 10px; border-radius:6px; }
.reason { font:11px ui-monospace, Menlo, monospace; color:var(--muted); }
.ev { background:#fff; border:1px solid var(--line); border-radius:6px; padding:6px 10px; margin:6px 0; }
.evh { font-size:12.5px; } .evh > a { font:11px ui-monospace, Menlo, monospace; margin-right:6px; }
.ev-draft, .ev-final { border-left:4px solid #2a6f97; } .ev-model_call { border-left:4px solid #8e6bbf; }
.ev-tool_call { border-left:4px solid #2a9d8f; }
pre { white-space:pre-wrap; overflow-wrap:anywhere; max-height:420px; overflow-y:auto; }
pre.doc { max-height:none; font:13px/1.5 -apple-system, "Segoe UI", Roboto, "Noto Sans", "Noto Sans CJK SC",
          sans-serif; }
.lbl { color:var(--muted); font-size:11.5px; margin-top:4px; }
.simnote, .banner { background:#8b1e3f; color:#fff; padding:8px 14px; border-radius:6px; font-weight:600; }
tr.req td:nth-child(2) { overflow-wrap:anywhere; } tr.req td:not(:nth-child(2)) { white-space:nowrap; }
.pager a { margin-right:10px; } input.filter { padding:4px 8px; width:320px; margin:6px 0; }
"""

_FILTER = """<script>
function filterRows(q){q=q.toLowerCase();for(const tr of document.querySelectorAll('tbody tr'))
{tr.style.display=tr.textContent.toLowerCase().includes(q)?'':'none';}}
</script>"""


def frame(title: str, crumbs: str, body: str, banner: str | None, script: str = "") -> str:
    """A complete offline page: inline CSS, the SIMULATOR banner when there is one."""
    top = f'<div class="banner" id="simulator-banner">{html.escape(banner)}</div>' if banner else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title><style>{PAGE_CSS}'
            f"</style>{script}</head><body>{top}<header><h1>{html.escape(title)}</h1><div class=\"id\">{crumbs}</div>"
            f"</header><main>{body}</main></body></html>\n")


def _crumbs(*links: tuple[str, str]) -> str:
    return " · ".join(f'<a style="color:#c9d3e3" href="{html.escape(h)}">{html.escape(t)}</a>' for t, h in links)


def index_pages(table: Table, kind: str, banner: str | None) -> dict[str, str]:
    """index-1.html, index-2.html, ... of one table, PAGE_ROWS rows each, cells linked to their pages."""
    pages = max(1, -(-len(table.rows) // PAGE_ROWS))
    out = {}
    for n in range(1, pages + 1):
        rows = table.rows[(n - 1) * PAGE_ROWS:n * PAGE_ROWS]
        body = ["<tr>" + "".join(cell(c, v, "../../") for c, v in zip(table.columns, r, strict=True)) + "</tr>"
                for r in rows]
        pager = " ".join(f'<a href="index-{k}.html">{"<b>" + str(k) + "</b>" if k == n else k}</a>'
                         for k in range(1, pages + 1))
        content = (f"<p class=\"note\">{html.escape(table.note)}</p><p class=\"pager\">page {pager} · "
                   f"{len(table.rows)} rows</p><input class=\"filter\" placeholder=\"filter rows on this page\" "
                   f"oninput=\"filterRows(this.value)\"><table><thead><tr>"
                   + "".join(f"<th>{header_cell(c)}</th>" for c in table.columns)
                   + f"</tr></thead><tbody>{''.join(body)}</tbody></table>")
        out[f"index-{n}.html"] = frame(f"{kind} · page {n} of {pages}", _crumbs(("report", "../../report.html")),
                                       content, banner, _FILTER)
    return out


def write_pages(report: Report, plan: Plan, banner: str | None, out: Path) -> None:
    """pages/runs/<run_id>.html, pages/pairs/<pair>.html and their index pages."""
    archive = Archive(report.identity.archive_path)
    records: dict[str, RunRecord] = {r.run_id: r for r in archive.started()}
    records.update({r.run_id: r for r in archive.records()})
    cards: dict[str, Card] = {}

    def card_of(record: RunRecord) -> Card:
        return cards.setdefault(record.slot.card_sha256, load_card(archive, record))

    pair_table = report.tables.get("pair_index")
    pair_rows = pair_table.records() if pair_table else []
    in_pairs: dict[str, list[str]] = {}
    for p in pair_rows:
        for run_id in (p["run_a"], p["run_b"]):
            if run_id:
                in_pairs.setdefault(run_id, []).append(p["pair"])
    runs_dir, pairs_dir = out / "pages" / "runs", out / "pages" / "pairs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    pairs_dir.mkdir(parents=True, exist_ok=True)
    texts = shared_texts(archive.get_text)
    back = _crumbs(("report", "../../report.html"), ("all runs", "index-1.html"),
                   ("all pairs", "../pairs/index-1.html"))
    for row in report.tables["process_runs"].records():
        record = records.get(row["run_id"])
        if record is None:  # a stale index: the report says so at the top
            (runs_dir / f"{row['run_id']}.html").write_text(frame(
                f"run {row['run_id']}", back, "<p class=\"notice\">The index lists this run but the archive holds "
                "no run file for it; reindex the archive and rebuild the report.</p>", banner), encoding="utf-8")
            continue
        note = SIMULATOR_PROTOCOLS.get(record.protocol, "")
        body = run_body(texts, record, f"This agent model is a {note}." if note else "",
                        in_pairs.get(record.run_id, []))
        (runs_dir / f"{record.run_id}.html").write_text(frame(f"run {record.run_id}", back, body, banner),
                                                        encoding="utf-8")
    evidence = Evidence(archive, report.identity.evaluator_id)
    back = _crumbs(("report", "../../report.html#t-pair_index"), ("all pairs", "index-1.html"),
                   ("all runs", "../runs/index-1.html"))
    for p in pair_rows:
        runs = (records.get(p["run_a"] or ""), records.get(p["run_b"] or ""))
        if runs == (None, None):
            (pairs_dir / f"{p['pair']}.html").write_text(frame(f"pair {p['pair']}", back, "<p class=\"notice\">"
                                                               "NO_RUN: neither arm has a finished run.</p>", banner),
                                                         encoding="utf-8")
            continue
        facts = " · ".join(f"<b>{k}</b> {html.escape(fmt(p[k]))}" for k in
                           ("card_id", "comparison", "axis", "model", "harness", "seed"))
        sides = (f"<p>At {html.escape(plan.primary_phase)}: arm a {state_badge(p['state_a'])} recommends "
                 f"<b>{html.escape(p['recommends_a'])}</b>; arm b {state_badge(p['state_b'])} recommends "
                 f"<b>{html.escape(p['recommends_b'])}</b> — <b>{html.escape(p['reading'])}</b> (states table of "
                 f"evaluator {html.escape(report.identity.evaluator_id)})</p>")
        arms = tuple(p["comparison"].split("-"))
        card = card_of(next(r for r in runs if r is not None))
        body = f"<p>{facts}</p>{sides}" + pair_body(evidence, card, p["axis"], (arms[0], arms[1]), runs,
                                                    plan.retention.shingle_words)
        (pairs_dir / f"{p['pair']}.html").write_text(frame(f"pair {p['pair']}", back, body, banner), encoding="utf-8")
    for name, page in index_pages(report.tables["process_runs"], "runs", banner).items():
        (runs_dir / name).write_text(page, encoding="utf-8")
    empty = Table(name="pair_index", title="pairs", note="No evaluator states, so no pair page.", columns=["pair"],
                  rows=[])
    for name, page in index_pages(pair_table or empty, "pairs", banner).items():
        (pairs_dir / name).write_text(page, encoding="utf-8")
