"""What an archive acquired from the web: figures (``acquisition stats``) and a corpus file (``acquisition
export``) that the ``corpus`` backend serves, so a live study can be rerun offline on BM25 over what it saw.

Both read the run records alone: every web ``search``/``read`` tool event names its store entry as an
archive blob, so neither needs the acquisition store.
"""

from __future__ import annotations

import json
from pathlib import Path

from draligned.archive.store import Archive, write_once
from draligned.records import FetchAttemptEvent, Record, RunRecord, ToolCallEvent
from draligned.tools.corpus import CorpusDocument, _url_key
from draligned.tools.web.pagetext import text_document
from draligned.tools.web.provider import doc_id
from draligned.tools.web.store import StoreEntry


class AcquisitionStats(Record):
    """Web acquisition figures of an archive (its sealed runs)."""

    searches: int = 0
    """Web search tool calls."""
    reads: int = 0
    """Web read tool calls."""
    live: int = 0
    """Calls that fetched from the provider (or the page) themselves."""
    store_hits: int = 0
    """Calls served by the acquisition store or by an identical request in flight."""
    failures: dict[str, int] = {}
    """Calls that returned a named tool error, by reason."""
    failed_attempts: int = 0
    """Provider attempts that failed and were retried (or ended the call)."""
    bytes: int = 0
    """Raw bytes received by the live calls."""
    first_fetch: str | None = None
    """Earliest fetch time of any return (UTC ISO)."""
    last_fetch: str | None = None
    """Latest fetch time of any return (UTC ISO)."""


def _web_events(records: list[RunRecord]) -> list[tuple[RunRecord, ToolCallEvent]]:
    return [(r, e) for r in sorted(records, key=lambda r: r.run_id) for e in r.events
            if isinstance(e, ToolCallEvent) and e.acquisition is not None]


def acquisition_stats(archive: Archive) -> AcquisitionStats:
    """The archive's web figures (all zero for an archive without web backends)."""
    records = archive.records()
    events = _web_events(records)
    failures: dict[str, int] = {}
    stats = AcquisitionStats(failed_attempts=sum(isinstance(e, FetchAttemptEvent) for r in records for e in r.events))
    times = sorted(e.acquisition.fetched_at for _, e in events if e.acquisition and e.acquisition.fetched_at)
    for _, ev in events:
        a = ev.acquisition
        assert a is not None
        stats.searches += ev.tool == "search"
        stats.reads += ev.tool == "read"
        stats.live += a.live
        stats.store_hits += not a.live
        if ev.error:
            failures[ev.error] = failures.get(ev.error, 0) + 1
        if a.live and a.raw_blob and archive.blob_path(a.raw_blob).exists():
            stats.bytes += archive.blob_path(a.raw_blob).stat().st_size
    stats.failures = dict(sorted(failures.items()))
    stats.first_fetch, stats.last_fetch = (times[0], times[-1]) if times else (None, None)
    return stats


class Snapshot(Record):
    """The label written next to an exported corpus: what it is a snapshot of."""

    label: str
    """One line: a snapshot of the web as the archive's runs saw it, from the first to the last fetch."""
    archive: str
    """The archive it was exported from."""
    first_fetch: str | None
    """Earliest fetch time (UTC ISO)."""
    last_fetch: str | None
    """Latest fetch time (UTC ISO)."""
    documents: int
    """Documents in the corpus."""
    pages: int
    """Of which pages read (full text)."""
    hits: int
    """Of which search hits never read (their snippet as text)."""


def export_corpus(archive: Archive, out: Path) -> Snapshot:
    """Write every page read and search hit of the archive as a corpus file (JSON Lines of corpus documents:
    a page read under the URL the agent asked for, its full text; a hit never read, its snippet), and the
    snapshot label beside it as ``<name>.snapshot.json``. A URL is written once (a page beats a hit)."""
    pages: dict[str, CorpusDocument] = {}
    hits: dict[str, CorpusDocument] = {}
    times: list[str] = []
    for _, ev in _web_events(archive.records()):
        a = ev.acquisition
        if a is None or a.entry_blob is None:
            continue
        entry = StoreEntry.model_validate_json(archive.get_blob(a.entry_blob))
        times.append(entry.fetched_at)
        if entry.page is not None and ev.request_text:
            url = ev.request_text.strip()
            pages.setdefault(_url_key(url), entry.page.model_copy(update={"url": url, "id": doc_id(url)}))
        for h in entry.hits or []:
            hits.setdefault(_url_key(h.url), text_document(h.url, h.title, h.text or h.title))
    docs = {**hits, **pages}
    if not docs:
        raise ValueError(f"{archive.root}: no web search hit or page read to export (is it a web study's archive?)")
    first, last = (min(times), max(times)) if times else (None, None)
    snapshot = Snapshot(label=f"a snapshot of the web as fetched from {first} to {last} by the runs of "
                              f"{archive.root}", archive=str(archive.root), first_fetch=first, last_fetch=last,
                        documents=len(docs), pages=len(pages), hits=len(docs) - len(pages))
    lines = [json.dumps(d.model_dump(mode="json"), ensure_ascii=False, sort_keys=True) for d in docs.values()]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_once(out, ("\n".join(lines) + "\n").encode() if lines else b"")
    write_once(out.with_name(out.stem + ".snapshot.json"),
               (json.dumps(snapshot.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n").encode())
    return snapshot
