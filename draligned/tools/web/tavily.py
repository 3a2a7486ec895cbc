"""Tavily through its official async client (``tavily-python``): ``POST /search`` and ``POST /extract``.

Wire format (docs.tavily.com, API reference): ``Authorization: Bearer KEY``; search body
``{"query", "max_results", "search_depth", ...}`` answered by ``{"query", "results": [{"title", "url",
"content", "score", "raw_content"}], "response_time", "request_id"}``; extract body ``{"urls": [...],
"extract_depth", "format"}`` answered by ``{"results": [{"url", "raw_content"}], "failed_results":
[{"url", "error"}], "request_id"}``.
"""

from __future__ import annotations

from typing import Any

from tavily import AsyncTavilyClient

from draligned.tools.corpus import CorpusDocument, SearchHit
from draligned.tools.errors import ToolError
from draligned.tools.web.pagetext import text_document
from draligned.tools.web.provider import Provider, body_json, hit, results_list
from draligned.tools.web.wire import Exchange, FetchFailed, capturing_client


class Tavily(Provider):
    name = "tavily"
    default_base_url = "https://api.tavily.com"
    search_path = "/search"
    extract_path = "/extract"
    extract_options = frozenset({"extract_depth", "format"})

    def make_client(self) -> AsyncTavilyClient:
        http = capturing_client(self.spec.retry.timeout_s, base_url=self.base_url)
        return AsyncTavilyClient(api_key=self.key, api_base_url=self.base_url, client=http)

    def search_request(self, query: str, k: int) -> dict[str, Any]:
        return {"query": query, "max_results": k, **self.search_options()}

    async def send_search(self, request: dict[str, Any]) -> None:
        await self.client.search(**request, timeout=self.spec.retry.timeout_s)

    def parse_search(self, ex: Exchange) -> list[SearchHit]:
        items = results_list(body_json(ex, self.label), ex, self.label, "results")
        return [h for r in items if isinstance(r, dict) and (h := hit(r.get("url"), r.get("title"),
                                                                      r.get("content")))]

    def extract_request(self, url: str) -> dict[str, Any]:
        return {"urls": [url], **self.extract_fields()}

    async def send_extract(self, request: dict[str, Any]) -> None:
        await self.client.extract(**request, timeout=self.spec.retry.timeout_s)

    def parse_extract(self, ex: Exchange, url: str) -> CorpusDocument:
        data = body_json(ex, self.label)
        for r in results_list(data, ex, self.label, "results"):
            if isinstance(r, dict) and isinstance(r.get("raw_content"), str):
                return text_document(r.get("url") or url, r.get("title"), r["raw_content"])
        failed = [f for f in results_list(data, ex, self.label, "failed_results") if isinstance(f, dict)]
        why = failed[0].get("error", "no reason given") if failed else "no result for the URL"
        raise FetchFailed(ToolError.HTTP_ERROR, f"{self.label} could not extract the page: {why}", ex)

    def request_id(self, ex: Exchange) -> str | None:
        try:
            rid = body_json(ex, self.label).get("request_id")
        except FetchFailed:
            rid = None
        return rid if isinstance(rid, str) else super().request_id(ex)

    async def close_client(self, client: AsyncTavilyClient) -> None:
        await client._client.aclose()  # ours (an external client: tavily-python leaves it open)
