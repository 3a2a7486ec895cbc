"""The acquisition tools every harness shares: ``search(query)`` and ``read(url)``.

They format what a backend returns into the exact text the agent receives, applying
the contract's caps (6 results, 400-character snippets, 6,000 characters per page). A web
backend (:class:`LiveBackend`) answers asynchronously with a :class:`Fetched`: hits or a page,
or a named failure the agent reads, plus the provenance the tool event records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from draligned.records import Acquisition, ModelAttempt
from draligned.tools.corpus import CorpusDocument, SearchHit, normalize_page_text, snippet
from draligned.tools.errors import ToolError


class SearchSpent(Exception):
    """Raised by a backend whose search has ended (pool budget reached or a sampled stop);
    the message is what the agent reads."""


class SearchBackend(Protocol):
    """What a search backend offers: ranked hits for a query and pages by URL."""

    sha256: str

    def search(self, query: str, k: int) -> list[SearchHit]: ...

    def page(self, url: str) -> CorpusDocument | None: ...


@dataclass(frozen=True)
class Fetched:
    """A web backend's answer to one search or read: hits or a page, or a named failure."""

    hits: list[SearchHit] | None = None
    """Search results (best first), when the search succeeded."""
    page: CorpusDocument | None = None
    """The page as text, when the read succeeded."""
    error: ToolError | None = None
    """Why it failed, when it did (the agent reads ``message``)."""
    message: str = ""
    """What the agent reads when it failed."""
    acquisition: Acquisition | None = None
    """The store entry and provider call behind it (None when nothing was asked, e.g. a refused URL)."""
    attempts: tuple[ModelAttempt, ...] = ()
    """Failed provider attempts before the answer (live fetches only)."""


@runtime_checkable
class LiveBackend(Protocol):
    """A web backend: search and read go to a provider (through the acquisition store), asynchronously."""

    @property
    def sha256(self) -> str: ...

    async def fetch_search(self, query: str, k: int) -> Fetched: ...

    async def fetch_page(self, url: str) -> Fetched: ...


Backend = SearchBackend | LiveBackend
"""What serves an executor's search and read: offline (corpus, pool) or a web backend."""


class AcquisitionLimits(Protocol):
    """The caps the acquisition tools read from a harness contract's limits (``harness.Limits``)."""

    search_results: int
    snippet_chars: int
    read_chars: int


@dataclass(frozen=True)
class ToolResult:
    """The text a tool returns to the agent, the error it reports, if any, and a web return's provenance."""

    text: str
    error: ToolError | None = None
    acquisition: Acquisition | None = None
    attempts: tuple[ModelAttempt, ...] = ()


class AcquisitionTools:
    """search/read over a backend with the contract's limits."""

    def __init__(self, backend: Backend, limits: AcquisitionLimits) -> None:
        self.backend = backend
        self.k = limits.search_results
        self.snippet_chars = limits.snippet_chars
        self.read_chars = limits.read_chars

    async def search(self, query: str) -> ToolResult:
        """Up to ``k`` results as numbered blocks of title, URL and snippet."""
        if not query.strip():
            return ToolResult("Error: the search query is empty.", error=ToolError.EMPTY_QUERY)
        if isinstance(self.backend, LiveBackend):
            fetched = await self.backend.fetch_search(query, self.k)
            if fetched.hits is None:
                return _failed(fetched)
            return self._hits(fetched.hits, fetched)
        try:
            return self._hits(self.backend.search(query, self.k), Fetched())
        except SearchSpent as spent:
            return ToolResult(str(spent), error=ToolError.SEARCH_SPENT)

    def _hits(self, hits: list[SearchHit], fetched: Fetched) -> ToolResult:
        blocks = [
            f"[{i}] {h.title}\nURL: {h.url}\nSnippet: {snippet(h.text, self.snippet_chars)}"
            for i, h in enumerate(hits[: self.k], 1)
        ]
        return ToolResult("\n\n".join(blocks) or "No results.", acquisition=fetched.acquisition,
                          attempts=fetched.attempts)

    async def read(self, url: str) -> ToolResult:
        """The first ``read_chars`` characters of the page's normalized text."""
        if isinstance(self.backend, LiveBackend):
            fetched = await self.backend.fetch_page(url.strip())
            if fetched.page is None:
                return _failed(fetched)
            return ToolResult(normalize_page_text(fetched.page)[: self.read_chars],
                              acquisition=fetched.acquisition, attempts=fetched.attempts)
        doc = self.backend.page(url.strip())
        if doc is None:
            return ToolResult(f"Error: could not open {url!r}: no such page.", error=ToolError.UNKNOWN_URL)
        return ToolResult(normalize_page_text(doc)[: self.read_chars])


def _failed(fetched: Fetched) -> ToolResult:
    """A web failure as the agent reads it: the message and the named reason."""
    return ToolResult(f"Error: {fetched.message} ({fetched.error})", error=fetched.error,
                      acquisition=fetched.acquisition, attempts=fetched.attempts)
