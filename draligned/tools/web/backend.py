"""The web backend of a study: every search and read through the acquisition store, once per request.

One :class:`StudyWeb` serves every run of a study (the provider client, the http reader, the
connection limit and the store are shared); each run sees it through a :class:`RunWeb` that
archives into the run's archive. A request is answered from the store when it holds the key
(``read-write``, ``read-only``); a read-only miss is ``not_in_store`` and sends nothing; otherwise it
is fetched live with bounded retries and the answer stored, so the arms of a study see one web.
Identical requests in flight at once share one provider call. A fault that outlasted the retries
(429, 5xx, timeout, connection error) is returned to the agent but not stored, so a rerun tries again;
every other outcome (hits, page, 404, not HTML, too large, blocked, malformed reply) is stored as is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from draligned.archive.store import Archive
from draligned.hashing import canonical_json, sha256_bytes, sha256_json
from draligned.records import Acquisition, ModelAttempt
from draligned.tools.acquisition import Fetched
from draligned.tools.corpus import CorpusDocument, SearchHit
from draligned.tools.errors import ToolError
from draligned.tools.search_spec import SearchSpec
from draligned.tools.web.pagetext import page_document
from draligned.tools.web.provider import Provider
from draligned.tools.web.reader import HttpReader
from draligned.tools.web.store import AcquisitionStore, StoreEntry, normalise_query, normalise_url, store_key
from draligned.tools.web.wire import Exchange, FetchFailed, utcnow, with_retries


def web_identity(spec: SearchSpec) -> str:
    """``Slot.search_sha256`` of a web study: what decides the returns (provider, endpoint, options, reader,
    reader bounds), not the store mode, retries or connection limit."""
    return sha256_json({"backend": spec.backend, "base_url": spec.base_url, "options": spec.options,
                        "reader": spec.reader, "allow_private_addresses": spec.allow_private_addresses,
                        "max_page_bytes": spec.max_page_bytes, "max_redirects": spec.max_redirects})


@dataclass(frozen=True)
class _Request:
    """One request to acquire: its key material and how to send and read it."""

    provider: str
    endpoint: str
    request: dict[str, Any]
    send: Callable[[], Awaitable[Exchange]]
    parse: Callable[[Exchange], list[SearchHit] | CorpusDocument]
    request_id: Callable[[Exchange], str | None]


class StudyWeb:
    """The shared web of one study (see module docstring). In a read-only replay (``store.mode``) nothing
    is ever sent, so the provider holds no key and no client is built."""

    def __init__(self, spec: SearchSpec, provider: Provider, store: AcquisitionStore | None) -> None:
        self.spec = spec
        self.provider = provider
        self.store = store
        self.live = store is None or store.mode != "read-only"
        self.reader = HttpReader(spec) if self.live and spec.reader == "http" else None
        self.sha256 = web_identity(spec)
        self._gate = asyncio.Semaphore(spec.max_connections)
        self._inflight: dict[str, asyncio.Task[tuple[StoreEntry, list[ModelAttempt], bytes | None]]] = {}

    def _search_request(self, query: str, k: int) -> _Request:
        p = self.provider
        request = {**p.search_request(normalise_query(query), k), "k": k}
        sent = {key: v for key, v in request.items() if key != "k"}
        return _Request(p.name, p.base_url + p.search_path, request,
                        send=lambda: p.exchange_search(sent), parse=p.parse_search, request_id=p.request_id)

    def _read_request(self, url: str) -> _Request:
        norm = normalise_url(url)
        if self.spec.reader == "http":
            request = {"url": norm, "max_page_bytes": self.spec.max_page_bytes,
                       "max_redirects": self.spec.max_redirects,
                       "allow_private_addresses": sorted(self.spec.allow_private_addresses)}
            reader = self.reader
            return _Request("http", norm, request, send=lambda: _need(reader).fetch(norm), parse=page_document,
                            request_id=lambda ex: None)
        p = self.provider
        request = p.extract_request(norm)
        return _Request(p.name, p.base_url + str(p.extract_path), request, send=lambda: p.exchange_extract(request),
                        parse=lambda ex: p.parse_extract(ex, norm), request_id=p.request_id)

    async def search(self, query: str, k: int, archive: Archive) -> Fetched:
        """A search's hits (at most ``k``) or its named failure, with provenance."""
        return await self._acquire(self._search_request(query, k), archive)

    async def read(self, url: str, archive: Archive) -> Fetched:
        """A page or its named failure, with provenance."""
        return await self._acquire(self._read_request(url), archive)

    async def _acquire(self, req: _Request, archive: Archive) -> Fetched:
        key = store_key(req.provider, req.endpoint, req.request, self.spec.reader)
        store = self.store
        if store is not None and (entry := store.get(key)) is not None:
            return self._fetched(entry, archive, live=False, body=store.body(entry.body_sha256))
        if not self.live:  # read-only replay: never a live call
            message = (f"the acquisition store {store.root if store else ''} has no entry for this request "
                       f"(read-only replay sends nothing)")
            return Fetched(error=ToolError.NOT_IN_STORE, message=message,
                           acquisition=Acquisition(store_key=key, live=False, provider=req.provider,
                                                   endpoint=req.endpoint))
        if store is None:
            fetched, attempts, body = await self._live(key, req)
            return self._fetched(fetched, archive, live=True, body=body, attempts=attempts)
        if (running := self._inflight.get(key)) is not None:  # an identical request is on its way
            fetched, _, body = await asyncio.shield(running)
            return self._fetched(fetched, archive, live=False, body=body)
        task = asyncio.ensure_future(self._live(key, req))
        self._inflight[key] = task
        try:
            fetched, attempts, body = await asyncio.shield(task)
        finally:
            self._inflight.pop(key, None)
        return self._fetched(fetched, archive, live=True, body=body, attempts=attempts)

    async def _live(self, key: str, req: _Request) -> tuple[StoreEntry, list[ModelAttempt], bytes | None]:
        """Fetch with retries, read the answer, store the outcome unless it is a fault that outlasted them."""
        async def attempt() -> Exchange:
            async with self._gate:
                try:  # httpx's timeout bounds each network wait; a reply dripped slowly needs a whole-attempt bound
                    async with asyncio.timeout(self.spec.retry.timeout_s):
                        return await req.send()
                except TimeoutError as exc:
                    raise FetchFailed(ToolError.TIMEOUT, f"{req.endpoint} did not answer within "
                                                         f"{self.spec.retry.timeout_s:g} s", retryable=True) from exc

        ex, attempts, failure = await with_retries(attempt, self.spec.retry)
        outcome: list[SearchHit] | CorpusDocument | None = None
        if failure is None and ex is not None:
            try:
                outcome = req.parse(ex)
            except FetchFailed as exc:
                failure = exc
        answer = ex if ex is not None else (failure.exchange if failure is not None else None)
        body = answer.body if answer is not None else None
        entry = StoreEntry(
            key=key, provider=req.provider, endpoint=req.endpoint, request=req.request, reader=self.spec.reader,
            fetched_at=answer.at if answer is not None else utcnow(),
            request_id=req.request_id(answer) if answer is not None else None,
            status=answer.status if answer is not None else None,
            body_sha256=None if body is None else sha256_bytes(body),
            hits=outcome[: req.request.get("k", len(outcome))] if isinstance(outcome, list) else None,
            page=outcome if isinstance(outcome, CorpusDocument) else None,
            error=None if failure is None else str(failure.code), message="" if failure is None else str(failure))
        if self.store is not None and self.store.mode == "read-write" and not (failure and failure.retryable):
            kept = self.store.put(entry, body)
            if kept is not entry:  # another process wrote it first: its answer is the study's
                return kept, attempts, self.store.body(kept.body_sha256)
        return entry, attempts, body

    def _fetched(self, entry: StoreEntry, archive: Archive, live: bool, body: bytes | None,
                 attempts: list[ModelAttempt] | None = None) -> Fetched:
        """The entry as the tools return it, its raw body and the entry itself archived as blobs."""
        acquisition = Acquisition(
            store_key=entry.key, live=live, provider=entry.provider, endpoint=entry.endpoint,
            fetched_at=entry.fetched_at, request_id=entry.request_id,
            raw_blob=archive.put_blob(body) if body is not None else None,
            entry_blob=archive.put_blob(canonical_json(entry.model_dump(mode="json"))))
        failed = ToolError(entry.error) if entry.error is not None else None
        return Fetched(hits=entry.hits, page=entry.page, error=failed, message=entry.message,
                       acquisition=acquisition, attempts=tuple(attempts or ()))

    async def aclose(self) -> None:
        """Close the provider's and the reader's clients."""
        await self.provider.aclose()
        if self.reader is not None:
            await self.reader.aclose()


def _need(reader: HttpReader | None) -> HttpReader:
    assert reader is not None  # built whenever requests may be sent with the http reader
    return reader


@dataclass(frozen=True)
class RunWeb:
    """The study's web as one run's search backend: it archives into that run's archive."""

    web: StudyWeb
    archive: Archive

    @property
    def sha256(self) -> str:
        return self.web.sha256

    async def fetch_search(self, query: str, k: int) -> Fetched:
        return await self.web.search(query, k, self.archive)

    async def fetch_page(self, url: str) -> Fetched:
        return await self.web.read(url, self.archive)
