"""What a web search provider says about itself: how to send a search (and an extract) and read the reply.

A provider module says only what differs: the request fields (what the store key and the record
hold), how its client sends them, and where the hits are in its JSON. Retries, the store, the
connection limit and the events live in :mod:`draligned.tools.web.backend`, once.
"""

from __future__ import annotations

import html
import json
import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from draligned.hashing import sha256_text
from draligned.tools.corpus import CorpusDocument, SearchHit
from draligned.tools.errors import ToolError
from draligned.tools.search_spec import SearchSpec
from draligned.tools.web.wire import Exchange, FetchFailed, exchange

_TAG_RE = re.compile(r"<[^>]+>")


def plain(text: object) -> str:
    """A provider's snippet as plain text (Brave and SearXNG mark matches up with HTML tags and entities)."""
    return html.unescape(_TAG_RE.sub("", text)) if isinstance(text, str) else ""


def doc_id(url: str) -> str:
    """A stable document id for a web page: ``w`` and 15 hex digits of its URL's sha256."""
    return "w" + sha256_text(url)[:15]


def hit(url: object, title: object, text: object) -> SearchHit | None:
    """One result as a search hit (the title falls back to the URL); None without a usable URL."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    name = plain(title).strip() or url
    return SearchHit(doc_id=doc_id(url), title=name, url=url, text=plain(text), score=1.0)


def body_json(ex: Exchange, what: str) -> dict[str, Any]:
    """The reply body as a JSON object, or the ``malformed_reply`` failure (its body is archived)."""
    try:
        data = json.loads(ex.body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise FetchFailed(ToolError.MALFORMED_REPLY, f"{what} sent a reply that is not a JSON object", ex)
    return data


def results_list(data: dict[str, Any], ex: Exchange, what: str, *path: str) -> list[Any]:
    """The list at ``path`` of the reply (a missing optional container is an empty list), or malformed."""
    node: Any = data
    for key in path[:-1]:
        node = node.get(key, {}) if isinstance(node, dict) else None
    value = node.get(path[-1], []) if isinstance(node, dict) else None
    if not isinstance(value, list):
        raise FetchFailed(ToolError.MALFORMED_REPLY, f"{what} sent no result list at {'.'.join(path)}", ex)
    return value


class Provider(ABC):
    """A web search provider behind its client, pointed at ``base_url``."""

    name: ClassVar[str]
    """The backend name in ``[search]``."""
    default_base_url: ClassVar[str]
    """The provider's public endpoint."""
    search_path: ClassVar[str]
    """The search endpoint's path."""
    extract_path: ClassVar[str | None] = None
    """The extract endpoint's path, for providers that offer one as a reader."""
    extract_options: ClassVar[frozenset[str]] = frozenset()
    """``options`` fields sent with extract requests instead of searches."""

    def __init__(self, spec: SearchSpec, key: str | None) -> None:
        """``key`` None: the provider only forms requests (store keys of a read-only replay) and sends nothing."""
        self.spec = spec
        self.key = key
        self.base_url = (spec.base_url or self.default_base_url).rstrip("/")
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The provider's client, built on first use (never for a replay that sends nothing)."""
        if self._client is None:
            self._client = self.make_client()
        return self._client

    @abstractmethod
    def make_client(self) -> Any:
        """The client that sends requests, built on the capturing httpx client of :mod:`.wire`."""

    async def exchange_search(self, request: dict[str, Any]) -> Exchange:
        """One search attempt: the answer as received, or its named failure."""
        return await exchange(lambda: self.send_search(request), self.label)

    async def exchange_extract(self, request: dict[str, Any]) -> Exchange:
        """One extract attempt: the answer as received, or its named failure."""
        return await exchange(lambda: self.send_extract(request), self.label)

    @property
    def label(self) -> str:
        """How messages name the provider."""
        return f"{self.name} ({self.base_url})"

    def search_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.spec.options.items() if k not in self.extract_options}

    def extract_fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.spec.options.items() if k in self.extract_options}

    @abstractmethod
    def search_request(self, query: str, k: int) -> dict[str, Any]:
        """The search's request fields as sent (never the key): part of the store key and of the record."""

    @abstractmethod
    async def send_search(self, request: dict[str, Any]) -> None:
        """Send one search with the provider's client (the answer is captured by the caller)."""

    @abstractmethod
    def parse_search(self, ex: Exchange) -> list[SearchHit]:
        """The hits of a search reply, best first; ``FetchFailed`` (malformed_reply) when it cannot be read."""

    def extract_request(self, url: str) -> dict[str, Any]:
        """The extract's request fields as sent (readers ``tavily`` and ``exa`` only)."""
        raise NotImplementedError(f"{self.name} has no extract endpoint")

    async def send_extract(self, request: dict[str, Any]) -> None:
        raise NotImplementedError(f"{self.name} has no extract endpoint")

    def parse_extract(self, ex: Exchange, url: str) -> CorpusDocument:
        """The page of an extract reply, or the provider's named failure for it."""
        raise NotImplementedError(f"{self.name} has no extract endpoint")

    def request_id(self, ex: Exchange) -> str | None:
        """The provider's request id: the ``x-request-id`` header unless the provider says otherwise."""
        return {k.lower(): v for k, v in ex.headers.items()}.get("x-request-id")

    async def aclose(self) -> None:
        """Close the provider's client, if one was built."""
        if self._client is not None:
            await self.close_client(self._client)

    @abstractmethod
    async def close_client(self, client: Any) -> None:
        """Close a client :meth:`make_client` built."""
