"""The self-contained HTML page of a report: inline CSS, figures as base64 PNG, no scripts, no network."""

from __future__ import annotations

import base64
import html

from draligned.analysis.build import Report
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
main { max-width:1180px; margin:0 auto; padding:24px 40px 60px; }
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
.scroll { overflow-x:auto; }
table { border-collapse:collapse; font-size:12.5px; margin:4px 0; }
th { text-align:left; background:#f0f3f7; position:sticky; top:0; }
th, td { padding:4px 10px; border-bottom:1px solid var(--line); white-space:nowrap; }
td.n { text-align:right; font-variant-numeric:tabular-nums; }
.stamp { color:var(--muted); font:11px ui-monospace, Menlo, monospace; margin:2px 0 4px; }
details { margin:2px 0 10px; } summary { cursor:pointer; color:var(--accent); font-size:12px; }
pre { background:#f4f6f9; padding:10px; font-size:11.5px; overflow-x:auto; border-radius:6px; }
.empty { color:var(--muted); font-style:italic; }
.st { display:inline-block; padding:0 7px; border-radius:9px; font-size:11.5px; }
"""


def _cell(col: str, v: object) -> str:
    if isinstance(v, str) and v in COLORS and ("state" in col or col == "state"):
        style = f"background:{COLORS[v]}33;border:1px solid {COLORS[v]}"
        return f'<td><span class="st" style="{style}">{html.escape(v)}</span></td>'
    cls = ' class="n"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
    return f"<td{cls}>{html.escape(fmt(v))}</td>"


def _table(t: Table, stamp: str, shown: int) -> str:
    parts = [f'<h3 id="t-{t.name}">{html.escape(t.title)}</h3><p class="note">{html.escape(t.note)}</p>']
    if not t.rows:
        parts.append(f'<p class="empty">Empty: {html.escape(t.empty_reason or "no rows")}.</p>')
    else:
        rows, note = t.shown_rows(shown)
        head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
        body = "".join("<tr>" + "".join(_cell(c, v) for c, v in zip(t.columns, r, strict=True)) + "</tr>" for r in rows)
        parts.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
        if note:
            parts.append(f'<p class="note">{html.escape(note)}.</p>')
    parts.append(f'<div class="stamp">{html.escape(stamp)} · {html.escape(t.computed_by)} · tables/{t.name}.csv</div>')
    sql = "\n\n".join(t.sql)
    parts.append(f"<details><summary>query</summary><pre>{html.escape(sql)}</pre></details>")
    return "".join(parts)


def render_html(report: Report, figures: dict[str, bytes], highlights: list[tuple[str, str, str]],
                shown: int) -> str:
    """One HTML document with everything inline."""
    i = report.identity
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
<body><header><h1>draligned audit report — {html.escape(i.plan_name)}</h1>
<div class="id">plan {html.escape(i.plan_path)} · sha256 {i.plan_sha256}<br>evaluator {html.escape(i.evaluator_id)}<br>
archive {html.escape(i.archive_path)} · sha256 {i.archive_sha256} ·
{i.runs_in_subset} of {i.runs_in_archive} run attempts in subset</div>
</header><nav>{nav}</nav><main>{warning}<div class="cards">{cards}</div>{"".join(sections)}</main></body></html>
"""
