"""The acquisition tools every harness shares: ``search(query)`` and ``read(url)``.

They format what a backend returns into the exact text the agent receives, applying
the contract's caps (6 results, 400-character snippets, 6,000 characters per page).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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


class AcquisitionLimits(Protocol):
    """The caps the acquisition tools read from a harness contract's limits (``harness.Limits``)."""

    search_results: int
    snippet_chars: int
    read_chars: int


@dataclass(frozen=True)
class ToolResult:
    """The text a tool returns to the agent, and the error it reports, if any."""

    text: str
    error: ToolError | None = None


class AcquisitionTools:
    """search/read over a backend with the contract's limits."""

    def __init__(self, backend: SearchBackend, limits: AcquisitionLimits) -> None:
        self.backend = backend
        self.k = limits.search_results
        self.snippet_chars = limits.snippet_chars
        self.read_chars = limits.read_chars

    def search(self, query: str) -> ToolResult:
        """Up to ``k`` results as numbered blocks of title, URL and snippet."""
        if not query.strip():
            return ToolResult("Error: the search query is empty.", error=ToolError.EMPTY_QUERY)
        try:
            hits = self.backend.search(query, self.k)[: self.k]
        except SearchSpent as spent:
            return ToolResult(str(spent), error=ToolError.SEARCH_SPENT)
        if not hits:
            return ToolResult("No results.")
        blocks = [
            f"[{i}] {h.title}\nURL: {h.url}\nSnippet: {snippet(h.text, self.snippet_chars)}"
            for i, h in enumerate(hits, 1)
        ]
        return ToolResult("\n\n".join(blocks))

    def read(self, url: str) -> ToolResult:
        """The first ``read_chars`` characters of the page's normalized text."""
        doc = self.backend.page(url.strip())
        if doc is None:
            return ToolResult(f"Error: could not open {url!r}: no such page.", error=ToolError.UNKNOWN_URL)
        return ToolResult(normalize_page_text(doc)[: self.read_chars])
