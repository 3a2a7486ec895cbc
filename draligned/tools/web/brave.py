"""Brave Search API over ``httpx`` (it has no maintained Python client): ``GET /res/v1/web/search``.

Wire format (api-dashboard.search.brave.com, Web Search API): query parameters ``q``, ``count``
(at most 20), ``country``, ``search_lang``, ``safesearch``, ``freshness``, ...; headers
``X-Subscription-Token: KEY`` and ``Accept: application/json``; the reply ``{"type": "search",
"query": {"original"}, "web": {"type": "search", "results": [{"title", "url", "description",
"extra_snippets"}]}}`` (``web`` absent when nothing was found). 429 when over the plan's rate.
"""

from __future__ import annotations

from typing import Any

import httpx

from draligned.tools.corpus import SearchHit
from draligned.tools.web.provider import Provider, body_json, hit, results_list
from draligned.tools.web.wire import Exchange, capturing_client


class Brave(Provider):
    name = "brave"
    default_base_url = "https://api.search.brave.com"
    search_path = "/res/v1/web/search"

    def make_client(self) -> httpx.AsyncClient:
        return capturing_client(self.spec.retry.timeout_s, headers={
            "X-Subscription-Token": self.key or "", "Accept": "application/json"})

    def search_request(self, query: str, k: int) -> dict[str, Any]:
        return {"q": query, "count": min(k, 20), **self.search_options()}

    async def send_search(self, request: dict[str, Any]) -> None:
        params = {k: str(v).lower() if isinstance(v, bool) else v for k, v in request.items()}
        await self.client.get(self.base_url + self.search_path, params=params)

    def parse_search(self, ex: Exchange) -> list[SearchHit]:
        items = results_list(body_json(ex, self.label), ex, self.label, "web", "results")
        return [h for r in items if isinstance(r, dict) and (h := hit(r.get("url"), r.get("title"),
                                                                      r.get("description")))]

    async def close_client(self, client: httpx.AsyncClient) -> None:
        await client.aclose()
