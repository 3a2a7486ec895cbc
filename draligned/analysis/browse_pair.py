"""The body of a pair page: arm a and arm b side by side, phase by phase, with the evidence.

Requests carry both reads' labels (restored to P/Q). Each document is shown in the numbered
paragraphs the evaluator read; a paragraph cited by a main-advice item on the pair's factor is
highlighted, with each citing item's side, kind and status per read. The decision chain follows the
paper's Table 22: read 1 / read 2 -> program decision -> state (with the UNKNOWN reason). Highlighted
paragraphs carry ``data-`` attributes (run, document, paragraph, reads) so tests can check them.
"""

from __future__ import annotations

import html

from draligned.analysis.page import state_badge
from draligned.analysis.retention import jaccard
from draligned.cards import Card
from draligned.evaluator.aggregate import StateDecision
from draligned.evaluator.evidence import DocumentEvidence, Evidence, PairStep, RequestEvidence, label_text
from draligned.evaluator.ingest import ExtractedItem
from draligned.evaluator.states import document_order
from draligned.records import RunRecord


def _e(v: object) -> str:
    return html.escape("" if v is None else str(v))


def _decision(d: StateDecision) -> str:
    return f'{state_badge(d.state)} <span class="reason">{_e(d.reason)}</span>'


def chain_table(steps: list[PairStep], arms: tuple[str, str]) -> str:
    """Table 22 per document: arm a's read 1 / read 2 -> decision, arm b's the same."""
    head = ("<tr><th rowspan=2>document</th>"
            + "".join(f"<th colspan=3>arm {_e(a)}</th>" for a in arms)
            + "</tr><tr>" + "<th>read 1</th><th>read 2</th><th>program decision → state</th>" * 2 + "</tr>")
    rows = []
    for s in steps:
        cells = [f"<td>{_e(s.document)}</td>"]
        for reads, d in ((s.a_reads, s.a), (s.b_reads, s.b)):
            r1, r2 = (reads + ["", ""])[:2] if len(reads) != 1 else (reads[0], "")
            cells += [f"<td>{_e(r1)}</td>", f"<td>{_e(r2)}</td>", f"<td>{_decision(d)}</td>"]
        rows.append(f'<tr class="step" data-document="{_e(s.document)}" data-state-a="{_e(s.a.state)}" '
                    f'data-state-b="{_e(s.b.state)}">{"".join(cells)}</tr>')
    return f'<table class="chain"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _item(item: ExtractedItem, read: int) -> str:
    return (f'<li class="item" data-read="{read}" data-side="{_e(item.side)}">read {read}: '
            f'<b>{_e(item.side)}</b> · {_e(item.kind)} · {_e(item.status)} · {_e(item.entity_key)}</li>')


def requests_block(req: RequestEvidence, run_id: str) -> str:
    """A run's requests with read 1 / read 2 labels and the identified side."""
    if not req.requests:
        return f'<p class="empty">no request · readout {_decision(req.decision)}</p>'
    rows = "".join(f'<tr class="req" data-request="{r.request_id}" data-read1="{_e(r.read1)}" '
                   f'data-read2="{_e(r.read2)}"><td><a href="../runs/{_e(run_id)}.html#{_e(r.event_id)}">'
                   f"{r.request_id}</a></td><td>{_e(r.text)}</td><td>{_e(r.read1)}</td><td>{_e(r.read2)}</td>"
                   f"<td>{_e(r.identified)}</td></tr>" for r in req.requests)
    return (f"<p>readout {_decision(req.decision)}</p><table><thead><tr><th>id</th><th>request</th><th>read 1</th>"
            f"<th>read 2</th><th>identified</th></tr></thead><tbody>{rows}</tbody></table>")


def document_block(doc: DocumentEvidence | None) -> str:
    """Numbered paragraphs, main-advice citations highlighted, both reads' labels, every item."""
    if doc is None:
        return '<p class="empty">NO_DOCUMENT: this run has no such document</p>'
    labels = [label_text(r) for r in doc.reads]
    cited = {r.read: doc.cited(r.read) for r in doc.reads}
    parts = [f'<p class="labels" data-run="{_e(doc.run_id)}" data-document="{_e(doc.document)}" '
             f'data-label1="{_e(labels[0])}" data-label2="{_e(labels[1])}">read 1: <b>{_e(labels[0])}</b> · '
             f"read 2: <b>{_e(labels[1])}</b> → {_decision(doc.decision)}</p>"]
    for pid, text in zip(doc.paragraph_ids, doc.paragraphs, strict=True):
        items = [_item(i, n) for n in (1, 2) for i in cited[n].get(pid, [])]
        reads = " ".join(str(n) for n in (1, 2) if pid in cited[n])
        cls, attrs = ("para hl", f' data-reads="{reads}"') if items else ("para", "")
        parts.append(f'<div class="{cls}" data-run="{_e(doc.run_id)}" data-document="{_e(doc.document)}" '
                     f'data-pid="{pid}"{attrs}><span class="pid">[{pid}]</span> {_e(text)}'
                     + (f'<ul class="items">{"".join(items)}</ul>' if items else "") + "</div>")
    for r in doc.reads:
        rows = "".join(f"<tr><td>{_e(i.axis_id)}</td><td>{_e(i.side)}</td><td>{_e(i.kind)}</td><td>{_e(i.status)}"
                       f"</td><td>{_e(', '.join(i.source_ids))}</td><td>{_e(i.entity_key)}</td></tr>" for i in r.items)
        parts.append(f"<details><summary>read {r.read}: {_e(r.status)}, {len(r.items)} items (ALPHA = "
                     f"{'P' if r.alpha_is_p else 'Q' if r.alpha_is_p is not None else '–'})</summary>"
                     f"<table><thead><tr><th>factor</th><th>side</th><th>kind</th><th>status</th><th>source_ids</th>"
                     f"<th>entity</th></tr></thead><tbody>{rows}</tbody></table></details>")
    return "".join(parts)


def _flow(docs: dict[str, DocumentEvidence], shingle_words: int) -> str:
    drafts = [d for d in docs if d.startswith("draft:")]
    if not drafts or "final" not in docs:
        return "no draft and final to compare"
    last, final = docs[max(drafts, key=document_order)], docs["final"]
    change = 1 - jaccard("\n\n".join(last.paragraphs), "\n\n".join(final.paragraphs), shingle_words)
    return (f"{_e(last.document)} {state_badge(last.decision.state)} → final {state_badge(final.decision.state)} · "
            f"text change {change:.2f} (1 − Jaccard of word {shingle_words}-shingles)")


def pair_body(evidence: Evidence, card: Card, axis: str, arms: tuple[str, str],
              runs: tuple[RunRecord | None, RunRecord | None], shingle_words: int) -> str:
    """The pair page's body after its header facts."""
    factor = next(f for f in card.factors if f.factor_id == axis)
    out = [f'<p class="endpoints"><b>P endpoint</b> {_e(factor.endpoints.P)}<br><b>Q endpoint</b> '
           f"{_e(factor.endpoints.Q)}</p>",
           "<h2>Decision chain (paper Table 22)</h2>", chain_table(evidence.chain(runs[0], runs[1], card, axis), arms)]
    docs = [{d.document: d for d in evidence.documents(r, card, axis)} if r else {} for r in runs]
    out.append("<h2>Draft to final</h2><div class=\"side\">" + "".join(
        f"<div><h3>arm {_e(a)}</h3><p>{_flow(d, shingle_words) if r else 'NO_RUN'}</p></div>"
        for a, d, r in zip(arms, docs, runs, strict=True)) + "</div>")
    heads = "".join(f'<div><h3>arm {_e(a)} · <a href="../runs/{_e(r.run_id)}.html">run {_e(r.run_id)}</a></h3></div>'
                    if r else f"<div><h3>arm {_e(a)} · NO_RUN</h3></div>" for a, r in zip(arms, runs, strict=True))
    out.append(f'<h2>Side by side</h2><div class="side sticky">{heads}</div><h3 class="phase">requests</h3>'
               f'<div class="side">')
    out += [f"<div>{requests_block(evidence.requests(r, card, axis), r.run_id)}</div>" if r else "<div></div>"
            for r in runs]
    out.append("</div>")
    for document in sorted(set(docs[0]) | set(docs[1]), key=document_order):
        out.append(f'<h3 class="phase">{_e(document)}</h3><div class="side">')
        out += [f"<div>{document_block(d.get(document))}</div>" for d in docs]
        out.append("</div>")
    return "".join(out)
