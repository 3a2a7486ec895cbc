"""A self-hosted SearXNG instance over ``httpx``: ``GET /search?q=...&format=json``.

Wire format (docs.searxng.org, Search API): parameters ``q``, ``format=json`` (the instance must
enable the json format in ``search.formats``, else it answers 403), ``categories``, ``engines``,
``language``, ``time_range``, ``safesearch``, ``pageno``; the reply ``{"query", "number_of_results",
"results": [{"url", "title", "content", "engine", "score"}], "answers", "suggestions",
"unresponsive_engines"}``. No key.
"""

from __future__ import annotations

from typing import Any

import httpx

from draligned.tools.corpus import SearchHit
from draligned.tools.web.provider import Provider, body_json, hit, results_list
from draligned.tools.web.wire import Exchange, capturing_client


class SearXNG(Provider):
    name = "searxng"
    default_base_url = ""  # self-hosted: base_url is required
    search_path = "/search"

    def make_client(self) -> httpx.AsyncClient:
        return capturing_client(self.spec.retry.timeout_s, headers={"Accept": "application/json"})

    def search_request(self, query: str, k: int) -> dict[str, Any]:
        return {"q": query, "format": "json", **self.search_options()}

    async def send_search(self, request: dict[str, Any]) -> None:
        await self.client.get(self.base_url + self.search_path, params=request)

    def parse_search(self, ex: Exchange) -> list[SearchHit]:
        items = results_list(body_json(ex, self.label), ex, self.label, "results")
        return [h for r in items if isinstance(r, dict) and (h := hit(r.get("url"), r.get("title"),
                                                                      r.get("content")))]

    async def close_client(self, client: httpx.AsyncClient) -> None:
        await client.aclose()
