"""Write a report: report.md, a self-contained report.html, figures and every table as CSV + Parquet."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import duckdb
import matplotlib
import PIL
import pyarrow as pa
from matplotlib import ft2font

from draligned.analysis import plots
from draligned.analysis.browser import write_pages
from draligned.analysis.build import Report
from draligned.analysis.findings import Finding
from draligned.analysis.page import link, render_html
from draligned.analysis.plan import Plan
from draligned.analysis.table import Table, fmt
from draligned.archive.fingerprint import code_fingerprint
from draligned.hashing import sha256_bytes

SHOWN_ROWS = 40
"""Rows shown per table in report.md/html; the CSV always has all of them."""


FIGURE_INPUTS = ".inputs.json"
"""In ``figures/``: per figure, the sha256 of what it was drawn from and of its PNG."""


def figure_sources(report: Report, plan: Plan) -> dict[str, tuple[Callable[..., bytes], tuple[Any, ...]]]:
    """Every figure a section names: the function that draws it and the arguments it is drawn from."""
    t = report.tables.get
    return {
        "pair_heatmaps": (plots.pair_heatmaps, (t("pair_matrix"), report.identity.evaluator_id,
                                                plan.comparisons.primary)),
        "state_distribution": (plots.state_distribution, (t("state_distribution"),)),
        "retention_flows": (plots.retention_flows, (t("retention_flows"),)),
        "text_change": (plots.text_change, (t("text_change"),)),
        "process_counts": (plots.process_counts, (t("process_by_arm"),)),
        "cess_vs_opened": (plots.cess_vs_opened, (t("cess_by_arm"),)),
    }


def _earlier(directory: Path) -> dict[str, Any]:
    try:
        record = json.loads((directory / FIGURE_INPUTS).read_bytes())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _kept_png(path: Path, earlier: Any, inputs: str) -> bytes | None:
    """The PNG at ``path`` if an earlier build drew it from ``inputs`` and it is unchanged since."""
    if not isinstance(earlier, dict) or earlier.get("inputs") != inputs:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if sha256_bytes(data) == earlier.get("sha256") else None


def figure_inputs(name: str, code: dict[str, str], args: tuple[Any, ...] | list[Any]) -> str:
    """The sha256 of what a figure is drawn from. Tables count as their Python values: a JSON-mode dump
    would write NaN and infinities as null, so a value changing between them would keep an old drawing."""
    body = {"figure": name, **code, "args": [a.model_dump() if isinstance(a, Table) else a for a in args]}
    return sha256_bytes(json.dumps(body, sort_keys=True, allow_nan=True, default=repr).encode("utf-8"))


def write_figures(report: Report, plan: Plan, directory: Path) -> dict[str, bytes]:
    """Every figure as PNG bytes, written under ``directory`` with their inputs' record. A figure that an
    earlier build in ``directory`` drew from the same inputs (tables, arguments, code, matplotlib and
    Pillow) is taken from its file instead of drawn again: after a new read, the figures of runs and texts
    stay as they were, and drawing is most of a report's time."""
    directory.mkdir(parents=True, exist_ok=True)
    earlier, record, out = _earlier(directory), {}, {}
    code = {"code": code_fingerprint(), "matplotlib": matplotlib.__version__, "pillow": PIL.__version__,
            "freetype": ft2font.__freetype_version__}
    for name, (draw, args) in figure_sources(report, plan).items():
        inputs = figure_inputs(name, code, args)
        path = directory / f"{name}.png"
        data = _kept_png(path, earlier.get(name), inputs)
        if data is None:
            data = draw(*args)
            path.write_bytes(data)
        out[name] = data
        record[name] = {"inputs": inputs, "sha256": sha256_bytes(data)}
    (directory / FIGURE_INPUTS).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _sql_type(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "BOOLEAN"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "BIGINT"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "DOUBLE"
    return "VARCHAR"


_ARROW_TYPES = {"BOOLEAN": pa.bool_(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string()}


def _arrow_rows(table: Table, types: list[str]) -> pa.Table:
    """The table's rows as Arrow columns of its SQL types (VARCHAR values as their text)."""
    columns = []
    for i, kind in enumerate(types):
        values = [r[i] for r in table.rows]
        if kind == "VARCHAR":
            values = [None if v is None else str(v) for v in values]
        columns.append(pa.array(values, type=_ARROW_TYPES[kind]))
    return pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(len(types))])


def export_tables(report: Report, out: Path) -> None:
    """tables/<name>.csv and .parquet through DuckDB (the Parquet key-value metadata carries the plan,
    evaluator and archive hashes), and tables/manifest.json with identity, definitions and SQL."""
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        for name, table in report.tables.items():
            types = [_sql_type([r[i] for r in table.rows]) for i in range(len(table.columns))]
            cols = [f'"{c}" {t}' for c, t in zip(table.columns, types, strict=True)]
            con.execute(f'CREATE OR REPLACE TABLE "{name}" ({", ".join(cols)})')
            if table.rows:  # one columnar insert: executemany costs a statement per row
                con.register("report_rows", _arrow_rows(table, types))
                con.execute(f'INSERT INTO "{name}" SELECT * FROM report_rows')
                con.unregister("report_rows")
            ident = report.identity
            meta = ", ".join(f"{k}: '{str(v).replace(chr(39), chr(39) * 2)}'" for k, v in (
                ("plan_sha256", ident.plan_sha256), ("evaluator_id", ident.evaluator_id),
                ("archive_sha256", ident.archive_sha256), ("table_name", name)))
            for kind in ("csv", "parquet"):
                target = str(out / f"{name}.{kind}").replace("'", "''")
                opts = "FORMAT CSV, HEADER" if kind == "csv" else f"FORMAT PARQUET, KV_METADATA {{{meta}}}"
                con.execute(f"COPY \"{name}\" TO '{target}' ({opts})")
    finally:
        con.close()
    manifest = {"identity": report.identity.model_dump(), "states_available": report.states_available,
                "tables": {n: {"title": t.title, "note": t.note, "columns": t.columns, "rows": len(t.rows),
                               "computed_by": t.computed_by, "sql": t.sql, "empty_reason": t.empty_reason}
                           for n, t in report.tables.items()}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


def highlights(report: Report, plan: Plan) -> list[tuple[str, str, str]]:
    """(value, label, detail) headline numbers for the top of the report; the pair count covers the plan's
    primary comparisons at its primary phase, the same comparisons the heatmaps draw."""
    t = report.tables
    phase, primary = plan.primary_phase, plan.comparisons.primary
    out = []
    cov = t["coverage_runs"].records()
    done, started = sum(r["completed"] for r in cov), sum(r["attempts"] for r in cov)
    out.append((f"{done}/{started}", "runs completed / started", f"{len(cov)} stud{'y' if len(cov) == 1 else 'ies'}"))
    pairs = t["coverage_pairs"].records()
    out.append((str(sum(r["both_runs"] for r in pairs)), "pairs with both arms",
                f"of {sum(r['pairs'] for r in pairs)} formed"))
    if "pair_summary" in t:
        s = [r for r in t["pair_summary"].records() if r["group_by"] == "all"
             and r["evaluator"] == report.identity.evaluator_id and r["phase"] == phase and r["comparison"] in primary]
        n, own = sum(r["pairs"] for r in s), sum(r["both_own"] for r in s)
        out.append((f"{own}/{n}", f"{phase} pairs both OWN",
                    f"conditions distinguished; {' + '.join(primary)} pairs, as in the heatmaps"))
    else:
        out.append(("—", "directional states", "no evaluator reads in this archive"))
    tc = [r["text_change"] for r in t["text_change"].records()]
    if tc:
        out.append((f"{median(tc):.2f}", "median draft→final text change", "1 − Jaccard of word shingles"))
    prov = t["provenance"].records()[0]
    out.append((fmt(prov["share"]), "return units linked into first draft", f"{prov['linked']}/{prov['total']}"))
    return out


def _md_cell(column: str, value: object) -> str:
    target = link(column, value)
    text = fmt(value).replace("|", "\\|")
    return f"[{text}]({target})" if target else text


def _md_finding(finding: Finding) -> str:
    return "".join(f"[{f.text}](#t-{f.table})" if f.table else f.text for f in finding)


def banner(report: Report) -> str | None:
    """The SIMULATOR banner's text, when any agent model or evaluator of the subset is a simulator."""
    sims = report.identity.simulators
    if not sims:
        return None
    return ("SIMULATOR: these numbers come from offline simulators, not language models, and say nothing "
            "about any real model: " + "; ".join(sims) + ".")


def _md_table(table: Table) -> list[str]:
    if not table.rows:
        return [f"*Empty: {table.empty_reason or 'no rows'}.*"]
    rows, note = table.shown_rows(SHOWN_ROWS)
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_md_cell(c, v) for c, v in zip(table.columns, r, strict=True)) + " |" for r in rows]
    return lines + ([f"\n*{note}.*"] if note else [])


def render_markdown(report: Report, plan: Plan) -> str:
    """report.md: SIMULATOR banner, identity, findings, highlights, sections with figures (files) and tables."""
    i = report.identity
    lines = [f"# draligned audit report — {i.plan_name}", ""]
    if text := banner(report):
        lines += [f"> **{text}**", ""]
    lines += [
             f"- plan: `{i.plan_path}` sha256 `{i.plan_sha256}`", f"- evaluator: `{i.evaluator_id}`",
             f"- archive: `{i.archive_path}` sha256 `{i.archive_sha256}` "
             f"({i.runs_in_subset} of {i.runs_in_archive} run attempts in the plan's subset)", ""]
    if i.index_warning:
        lines += [f"> **Warning: {i.index_warning}**", ""]
    if not i.verified:
        lines += ["> **Warning: built with --no-verify: the archive's files were not checked against their "
                  "hashes.**", ""]
    lines += ["## Findings", ""] + [f"- {_md_finding(f)}" for f in report.findings] + [""]
    lines += [f"- **{v}** {label} ({detail})" for v, label, detail in highlights(report, plan)] + [""]
    lines += ["Browse every pair and run: [pairs](pages/pairs/index-1.html) · [runs](pages/runs/index-1.html)", ""]
    for s in report.sections:
        lines += [f"## {s.title}", "", s.intro, ""]
        if s.notice:
            lines += [f"> **{s.notice.strip()}**", ""]
        lines += [f"![{f}](figures/{f}.png)\n" for f in s.figures]
        for name in s.tables:
            t = report.tables[name]
            lines += [f'<a id="t-{name}"></a>', "", f"### {t.title}", "", f"*{t.note}*", ""] + _md_table(t)
            lines += ["", f"<sub>{i.line()} · `{t.computed_by}` · tables/{name}.csv</sub>", ""]
    return "\n".join(lines) + "\n"


def write_report(report: Report, plan: Plan, out: str | Path) -> dict[str, Path]:
    """Write every output under ``out`` (the pair browser's pages under ``out/pages``); returns the main paths."""
    out = Path(out)
    figs = write_figures(report, plan, out / "figures")
    export_tables(report, out / "tables")
    write_pages(report, plan, banner(report), out)
    (out / "report.md").write_text(render_markdown(report, plan), encoding="utf-8")
    (out / "report.html").write_text(render_html(report, figs, highlights(report, plan), banner(report), SHOWN_ROWS),
                                     encoding="utf-8")
    return {"md": out / "report.md", "html": out / "report.html", "tables": out / "tables"}
