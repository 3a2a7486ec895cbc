"""Exa through its official async client (``exa-py``): ``POST /search`` and ``POST /contents``.

Wire format (docs.exa.ai, API reference): ``x-api-key: KEY``; search body ``{"query", "numResults",
"contents": {"text": {...}}, "type", ...}`` (camelCase) answered by ``{"requestId", "results": [{"id",
"url", "title", "text", "score", "publishedDate"}]}``; contents body ``{"urls": [...], "text": {...}}``
answered by ``{"requestId", "results": [{"id", "url", "title", "text"}], "statuses": [{"id", "status",
"error": {"tag", "httpStatusCode"}}]}``.
"""

from __future__ import annotations

import inspect
from typing import Any

from exa_py import AsyncExa

from draligned.tools.corpus import CorpusDocument, SearchHit
from draligned.tools.errors import ToolError
from draligned.tools.web.pagetext import text_document
from draligned.tools.web.provider import Provider, body_json, hit, results_list
from draligned.tools.web.wire import Exchange, FetchFailed, capturing_client

_SEARCH_ARGS = frozenset(inspect.signature(AsyncExa.search).parameters) - {"self", "query"}


class Exa(Provider):
    name = "exa"
    default_base_url = "https://api.exa.ai"
    search_path = "/search"
    extract_path = "/contents"
    extract_options = frozenset({"max_age_hours", "livecrawl"})

    def make_client(self) -> AsyncExa:
        client = AsyncExa(api_key=self.key, api_base=self.base_url, timeout=self.spec.retry.timeout_s)
        # exa-py builds its httpx client lazily from these three; ours also keeps each answer.
        client._client = capturing_client(self.spec.retry.timeout_s, base_url=self.base_url, headers=client.headers)
        return client

    def search_request(self, query: str, k: int) -> dict[str, Any]:
        return {"query": query, "num_results": k, **self.search_options()}

    async def send_search(self, request: dict[str, Any]) -> None:
        known = {k: v for k, v in request.items() if k in _SEARCH_ARGS}
        extra = {k: v for k, v in request.items() if k not in _SEARCH_ARGS and k != "query"}
        await self.client.search(request["query"], **known, extra_body=extra or None)

    def parse_search(self, ex: Exchange) -> list[SearchHit]:
        items = results_list(body_json(ex, self.label), ex, self.label, "results")
        return [h for r in items if isinstance(r, dict)
                and (h := hit(r.get("url"), r.get("title"), r.get("text") or " ".join(r.get("highlights") or [])))]

    def extract_request(self, url: str) -> dict[str, Any]:
        return {"urls": [url], **self.extract_fields()}

    async def send_extract(self, request: dict[str, Any]) -> None:
        await self.client.get_contents(**request)

    def parse_extract(self, ex: Exchange, url: str) -> CorpusDocument:
        data = body_json(ex, self.label)
        for r in results_list(data, ex, self.label, "results"):
            if isinstance(r, dict) and isinstance(r.get("text"), str) and r["text"].strip():
                return text_document(r.get("url") or url, r.get("title"), r["text"])
        statuses = [s for s in results_list(data, ex, self.label, "statuses") if isinstance(s, dict)]
        error = statuses[0].get("error") if statuses else None
        error = error if isinstance(error, dict) else {}
        code = ToolError.HTTP_404 if error.get("httpStatusCode") in (404, 410) else ToolError.HTTP_ERROR
        raise FetchFailed(code, f"{self.label} could not get the page: {error.get('tag', 'no content')}", ex)

    def request_id(self, ex: Exchange) -> str | None:
        try:
            rid = body_json(ex, self.label).get("requestId")
        except FetchFailed:
            rid = None
        return rid if isinstance(rid, str) else super().request_id(ex)

    async def close_client(self, client: AsyncExa) -> None:
        await client.aclose()
