"""Mechanical provenance (paper Table 35): are pre-draft tool returns linked into the first draft?

Return units are the search results (one per result block) and page reads (one per read)
received before the run's first saved draft; first-draft units are its sentences and lines. A
link is the unit's URL appearing in the other text, or a shared verbatim fragment of the plan's
length (whitespace runs collapsed to one space). Units are never pooled across kinds.
"""

from __future__ import annotations

import re
from collections import Counter

from draligned.analysis.plan import Plan
from draligned.analysis.rows import Row, RunRow, RunTexts, ToolReturn
from draligned.analysis.table import Table, share

_BLOCK = re.compile(r"^\[\d+\] ", re.M)
_URL = re.compile(r"^URL: (\S+)", re.M)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")


class Unit(Row):
    """One return unit: its kind, URL and text."""

    kind: str
    """search_result or page_read."""
    url: str | None
    """Its URL (the result's URL, or the URL the read opened)."""
    text: str
    """Its text."""


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def return_units(ret: ToolReturn) -> list[Unit]:
    """Split a search return into result units; a read return is one unit."""
    if ret.tool == "read":
        return [Unit(kind="page_read", url=(ret.request_text or "").strip() or None, text=ret.text)]
    starts = [m.start() for m in _BLOCK.finditer(ret.text)]
    blocks = [ret.text[a:b] for a, b in zip(starts, starts[1:] + [len(ret.text)], strict=True)]
    return [Unit(kind="search_result", url=(m.group(1) if (m := _URL.search(b)) else None), text=b) for b in blocks]


def draft_units(text: str) -> list[str]:
    """Sentences and lines of a draft that contain a word character."""
    return [s for s in (_norm(p) for p in _SENTENCE.split(text)) if re.search(r"\w", s)]


def fragments(text: str, k: int) -> set[str]:
    """All k-character windows of the whitespace-normalised text."""
    t = _norm(text)
    return {t[i:i + k] for i in range(len(t) - k + 1)}


def shared_fragments(text: str, draft: str, lengths: tuple[int, int], draft_frags: set[str]) -> tuple[set[str], ...]:
    """Per length, the windows of ``text`` that are also windows of ``draft`` (``draft_frags``: its windows of
    the first length): all a draft sentence's windows can meet, since a sentence lies within the whitespace-
    normalised draft. One pass over ``text`` at the shortest length finds where a shared window can start
    (a shared window's prefix is shared too); the longer ones are cut only there, instead of a set of every
    window of ``text`` at each length."""
    t, m = _norm(text), min(lengths)
    known = draft_frags if m == lengths[0] else fragments(draft, m)
    starts = [i for i in range(len(t) - m + 1) if t[i:i + m] in known]
    return tuple({t[i:i + n] for i in starts if i + n <= len(t)} for n in lengths)


def shares_fragment(text: str, k: int, known: set[str]) -> bool:
    """Whether any k-character window of the whitespace-normalised text is in ``known`` (stops at the first
    one: no set of the text's own windows is built, which was most of the provenance table's time)."""
    t = _norm(text)
    return any(t[i:i + k] in known for i in range(len(t) - k + 1))


def linked(text: str, url: str | None, other: str, other_fragments: set[str], k: int) -> bool:
    """Whether ``text`` is linked to ``other`` by URL or by a shared k-character fragment."""
    return bool(url and url in other) or shares_fragment(text, k, other_fragments)


def provenance(runs: list[RunRow], texts: dict[str, RunTexts], plan: Plan) -> Table:
    """Linked / total units per unit kind, over finished runs with a first draft."""
    k, strict = plan.provenance.fragment_chars, plan.provenance.strict_fragment_chars
    c: Counter[str] = Counter()
    n_runs = 0
    for run in runs:
        t = texts.get(run.run_id)
        if t is None or not t.drafts:
            continue
        n_runs += 1
        draft = t.drafts[min(t.drafts)]
        draft_frags = fragments(draft, k)
        units = [u for r in t.returns_before_first_draft for u in return_units(r)]
        for u in units:
            c[f"{u.kind}:total"] += 1
            c[f"{u.kind}:linked"] += linked(u.text, u.url, draft, draft_frags, k)
        joined = "\n".join(u.text for u in units)
        urls = [u.url for u in units if u.url]
        ret_frags, ret_strict = shared_fragments(joined, draft, (k, strict), draft_frags)
        for sentence in draft_units(draft):
            by_url = any(url in sentence for url in urls)
            c["draft:total"] += 1
            c["draft:linked"] += by_url or shares_fragment(sentence, k, ret_frags)
            c["draft:strict"] += by_url or shares_fragment(sentence, strict, ret_strict)
    rule = f"URL or verbatim {k} chars"
    ret_total = c["search_result:total"] + c["page_read:total"]
    ret_linked = c["search_result:linked"] + c["page_read:linked"]
    rows = [
        ["return units before first draft", rule, ret_linked, ret_total, share(ret_linked, ret_total), n_runs],
        ["  search results", rule, c["search_result:linked"], c["search_result:total"],
         share(c["search_result:linked"], c["search_result:total"]), n_runs],
        ["  page reads", rule, c["page_read:linked"], c["page_read:total"],
         share(c["page_read:linked"], c["page_read:total"]), n_runs],
        ["first-draft units", rule, c["draft:linked"], c["draft:total"], share(c["draft:linked"], c["draft:total"]),
         n_runs],
        ["  strict fragments", f"URL or verbatim {strict} chars", c["draft:strict"], c["draft:total"],
         share(c["draft:strict"], c["draft:total"]), n_runs],
    ]
    return Table(
        name="provenance", title="Mechanical provenance: tool returns linked into the first draft (cf. Table 35)",
        note="Runs: finished runs with a saved draft. Return units: search results and page reads received before "
             "the first draft; first-draft units: its sentences/lines. Each row has its own denominator "
             "(total); the return-unit and draft-unit rows use different anchors and are not added.",
        columns=["unit", "link_rule", "linked", "total", "share", "runs"],
        rows=rows, computed_by="draligned.analysis.provenance.provenance")
