"""The self-contained HTML page of a report: inline CSS, figures as base64 PNG, no scripts, no network.

Table cells that name a run or a pair link to its page in the pair browser (``pages/``).
"""

from __future__ import annotations

import base64
import html
import re

from draligned.analysis.build import Report
from draligned.analysis.findings import Finding
from draligned.analysis.plots import COLORS
from draligned.analysis.table import Table, fmt

CSS = """
:root { --ink:#1d2430; --muted:#5b6675; --line:#e3e7ec; --bg:#f7f8fa; --accent:#2a6f97; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.5 -apple-system, "Segoe UI", Roboto, "Noto Sans", "Noto Sans CJK SC", sans-serif;
       color:var(--ink); background:var(--bg); }
header { background:#14213d; color:#fff; padding:28px 40px 22px; }
header h1 { margin:0 0 6px; font-size:24px; font-weight:650; }
header .id { font:12px/1.7 ui-monospace, Menlo, monospace; color:#c9d3e3; }
nav { padding:10px 40px; background:#fff; border-bottom:1px solid var(--line); position:sticky; top:0; z-index:2; }
nav a { color:var(--accent); margin-right:18px; text-decoration:none; font-weight:600; }
main { max-width:1320px; margin:0 auto; padding:24px 40px 60px; }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(190px, 1fr)); gap:14px; margin:4px 0 26px; }
.card { background:#fff; border:1px solid var(--line); border-radius:10px; padding:14px 16px; }
.card .v { font-size:28px; font-weight:700; color:var(--accent); }
.card .l { font-weight:600; } .card .d { color:var(--muted); font-size:12px; }
section { background:#fff; border:1px solid var(--line); border-radius:12px; padding:18px 24px 10px; margin:0 0 22px; }
section h2 { margin:0 0 4px; font-size:19px; } section > p.intro { color:var(--muted); margin:0 0 12px; }
.notice { background:#fff7e0; border-left:4px solid #e9c46a; padding:10px 14px; margin:8px 0 14px; border-radius:4px; }
.figs { display:flex; flex-wrap:wrap; gap:16px; align-items:flex-start; margin:10px 0 14px; }
figure { margin:0; } figure img { max-width:100%; border:1px solid var(--line); border-radius:6px; }
h3 { font-size:15px; margin:18px 0 2px; } .note { color:var(--muted); font-size:12.5px; margin:0 0 6px; }
.wide { width:100%; }
table { border-collapse:collapse; font-size:12px; margin:4px 0; width:100%; }
th { text-align:left; background:#f0f3f7; vertical-align:bottom; font-size:11.5px; }
th, td { padding:3px 6px; border-bottom:1px solid var(--line); overflow-wrap:break-word; }
td.n, td.short { white-space:nowrap; } td.long { overflow-wrap:anywhere; min-width:6em; }
td a { color:var(--accent); }
.banner { background:#8b1e3f; color:#fff; padding:12px 40px; font-weight:600; font-size:14.5px; }
.banner b { letter-spacing:.04em; }
.findings { background:#fff; border:2px solid var(--accent); border-radius:12px; padding:14px 24px; margin:0 0 22px; }
.findings h2 { margin:0 0 6px; font-size:19px; } .findings li { margin:4px 0; font-size:15px; }
.findings a { color:var(--accent); font-weight:700; }
td.n { text-align:right; font-variant-numeric:tabular-nums; }
.stamp { color:var(--muted); font:11px ui-monospace, Menlo, monospace; margin:2px 0 4px; }
details { margin:2px 0 10px; } summary { cursor:pointer; color:var(--accent); font-size:12px; }
pre { background:#f4f6f9; padding:10px; font-size:11.5px; overflow-x:auto; border-radius:6px; }
.empty { color:var(--muted); font-style:italic; }
.st { display:inline-block; padding:0 7px; border-radius:9px; font-size:11.5px; }
"""


RUN_COLUMNS = ("run_id", "run_a", "run_b")
"""Columns whose values are run ids (linked to run pages)."""


def link(col: str, v: object, root: str = "") -> str | None:
    """The pair-browser page a cell names (relative to the report directory, or to ``root``), if any."""
    if not isinstance(v, str) or not v:
        return None
    if col in RUN_COLUMNS:
        return f"{root}pages/runs/{v}.html"
    if col == "pair":
        return f"{root}pages/pairs/{v}.html"
    return None


def state_badge(v: str) -> str:
    """A state in its colour."""
    style = f"background:{COLORS[v]}33;border:1px solid {COLORS[v]}" if v in COLORS else ""
    return f'<span class="st" style="{style}">{html.escape(v)}</span>'


_BREAKS = re.compile(r"(?<=[_./-])")


def breakable(text: str) -> str:
    """Escaped text that may break after _ . / - (ids and column names wrap at their joints, so a wide
    table fits the page)."""
    return "<wbr>".join(html.escape(part) for part in _BREAKS.split(text))


def header_cell(col: str) -> str:
    """A column name that may break after its underscores."""
    return breakable(col)


def _width(v: object) -> str:
    """Numbers and short words never wrap; long texts (ids, endpoint texts) may wrap anywhere, so a wide
    table fits the page instead of hiding columns."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return ' class="n"'
    return ' class="long"' if len(fmt(v)) > 10 else ' class="short"'


def cell(col: str, v: object, root: str = "") -> str:
    """One table cell: a link when it names a run or pair page, a coloured badge for a state."""
    if (target := link(col, v, root)) is not None:
        return f'<td class="long"><a href="{html.escape(target)}">{breakable(str(v))}</a></td>'
    if isinstance(v, str) and v in COLORS and "state" in col:
        return f'<td class="short">{state_badge(v)}</td>'
    width = _width(v)
    return f"<td{width}>{breakable(fmt(v)) if 'long' in width else html.escape(fmt(v))}</td>"


def _table(t: Table, stamp: str, shown: int) -> str:
    parts = [f'<h3 id="t-{t.name}">{html.escape(t.title)}</h3><p class="note">{html.escape(t.note)}</p>']
    if not t.rows:
        parts.append(f'<p class="empty">Empty: {html.escape(t.empty_reason or "no rows")}.</p>')
    else:
        rows, note = t.shown_rows(shown)
        head = "".join(f"<th>{header_cell(c)}</th>" for c in t.columns)
        body = "".join("<tr>" + "".join(cell(c, v) for c, v in zip(t.columns, r, strict=True)) + "</tr>" for r in rows)
        parts.append(f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
        if note:
            parts.append(f'<p class="note">{html.escape(note)}.</p>')
    parts.append(f'<div class="stamp">{html.escape(stamp)} · {html.escape(t.computed_by)} · tables/{t.name}.csv</div>')
    sql = "\n\n".join(t.sql)
    parts.append(f"<details><summary>query</summary><pre>{html.escape(sql)}</pre></details>")
    return "".join(parts)


def finding_html(finding: Finding) -> str:
    """One finding, its numbers linked to their tables."""
    return "".join(f'<a href="#t-{f.table}">{html.escape(f.text)}</a>' if f.table else html.escape(f.text)
                   for f in finding)


def render_html(report: Report, figures: dict[str, bytes], highlights: list[tuple[str, str, str]],
                banner: str | None, shown: int) -> str:
    """One HTML document with everything inline."""
    i = report.identity
    top = f'<div class="banner" id="simulator-banner">{html.escape(banner)}</div>' if banner else ""
    found = "".join(f"<li>{finding_html(f)}</li>" for f in report.findings)
    browse = ('<p>Browse the evidence: <a href="pages/pairs/index-1.html">every pair</a> · '
              '<a href="pages/runs/index-1.html">every run</a></p>')
    findings = f'<div class="findings" id="findings"><h2>Findings</h2><ul>{found}</ul>{browse}</div>'
    cards = "".join(f'<div class="card"><div class="v">{html.escape(v)}</div><div class="l">{html.escape(label)}'
                    f'</div><div class="d">{html.escape(d)}</div></div>' for v, label, d in highlights)
    warning = f'<div class="notice">Warning: {html.escape(i.index_warning)}</div>' if i.index_warning else ""
    if not i.verified:
        warning += ('<div class="notice">Warning: built with --no-verify: the archive\'s files were not checked '
                    'against their hashes.</div>')
    nav = "".join(f'<a href="#{s.key}">{html.escape(s.title)}</a>' for s in report.sections)
    sections = []
    for s in report.sections:
        body = [f'<section id="{s.key}"><h2>{html.escape(s.title)}</h2><p class="intro">{html.escape(s.intro)}</p>']
        if s.notice:
            body.append(f'<div class="notice">{html.escape(s.notice.strip())}</div>')
        imgs = "".join(f'<figure><img alt="{f}" src="data:image/png;base64,'
                       f'{base64.b64encode(figures[f]).decode()}"></figure>' for f in s.figures)
        body.append(f'<div class="figs">{imgs}</div>' if imgs else "")
        body += [_table(report.tables[n], i.line(), shown) for n in s.tables]
        sections.append("".join(body) + "</section>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>draligned report — {html.escape(i.plan_name)}</title><style>{CSS}</style></head>
<body>{top}<header><h1>draligned audit report — {html.escape(i.plan_name)}</h1>
<div class="id">plan {html.escape(i.plan_path)} · sha256 {i.plan_sha256}<br>evaluator {html.escape(i.evaluator_id)}<br>
archive {html.escape(i.archive_path)} · sha256 {i.archive_sha256} ·
{i.runs_in_subset} of {i.runs_in_archive} run attempts in subset</div>
</header><nav>{nav}</nav><main>{warning}{findings}<div class="cards">{cards}</div>{"".join(sections)}</main>
</body></html>
"""
