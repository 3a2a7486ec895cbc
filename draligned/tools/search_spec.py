"""The ``[search]`` table of a study: which backend serves ``search``/``read`` and how.

``corpus`` (BM25 over the study's corpus) and ``pool`` (logged candidate-pool search) are offline.
``tavily``, ``brave``, ``searxng`` and ``exa`` are live web providers behind the acquisition store
(:mod:`draligned.tools.web`); their fields are checked here so that a bad configuration stops the
study before any run, naming the field.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from draligned.cess.pool import ControllerConfig
from draligned.records import Record, SearchCondition

WEB_BACKENDS = ("tavily", "brave", "searxng", "exa")
"""The live web providers."""

READERS: dict[str, tuple[str, ...]] = {"tavily": ("http", "tavily"), "exa": ("http", "exa"),
                                       "brave": ("http",), "searxng": ("http",)}
"""How ``read(url)`` can get a page per provider: the http reader, or the provider's own extract endpoint."""

KEY_ENV = {"tavily": "TAVILY_API_KEY", "exa": "EXA_API_KEY", "brave": "BRAVE_API_KEY"}
"""The key variable read when ``api_key_env`` is not set (SearXNG needs no key)."""

_STR, _INT, _BOOL, _LIST, _NUM = (str,), (int,), (bool,), (list,), (int, float)
OPTION_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "tavily": {"search_depth": _STR, "topic": _STR, "time_range": _STR, "start_date": _STR, "end_date": _STR,
               "days": _INT, "country": _STR, "include_domains": _LIST, "exclude_domains": _LIST,
               "include_answer": (bool, str), "include_raw_content": (bool, str), "exact_match": _BOOL,
               "chunks_per_source": _INT, "extract_depth": _STR, "format": _STR, "auto_parameters": _BOOL},
    "brave": {"country": _STR, "search_lang": _STR, "ui_lang": _STR, "safesearch": _STR, "freshness": _STR,
              "result_filter": _STR, "extra_snippets": _BOOL, "spellcheck": _BOOL, "text_decorations": _BOOL,
              "goggles": (str, list), "offset": _INT},
    "searxng": {"categories": _STR, "engines": _STR, "language": _STR, "time_range": _STR, "safesearch": _INT,
                "pageno": _INT},
    "exa": {"type": _STR, "category": _STR, "include_domains": _LIST, "exclude_domains": _LIST,
            "start_published_date": _STR, "end_published_date": _STR, "include_text": _LIST,
            "exclude_text": _LIST, "user_location": _STR, "moderation": _BOOL, "max_age_hours": _NUM},
}
"""Documented request fields whose type is checked; other fields are sent verbatim unchecked."""

RESERVED_OPTIONS: dict[str, tuple[str, ...]] = {
    "tavily": ("query", "max_results", "urls", "api_key"), "brave": ("q", "count"),
    "searxng": ("q", "format"), "exa": ("query", "num_results", "urls", "contents"),
}
"""Fields the backend sets itself (the query, the contract's result count, the output format)."""


def _field_error(loc: tuple[str, ...], message: str) -> ValidationError:
    """A validation error located at ``loc`` inside ``[search]`` (the study error names it in full)."""
    kind = PydanticCustomError("search", "{message}", {"message": message})
    return ValidationError.from_exception_data("search", [InitErrorDetails(type=kind, loc=loc, input=None)])


class WebRetry(Record):
    """``[search.retry]``: bounded retries of provider and page faults (transport only: not part of any key)."""

    max_attempts: int = 4
    """Attempts per search or read, the first included."""
    max_total_s: float = 300.0
    """No attempt starts after this many seconds since the first one began."""
    initial_wait_s: float = 1.0
    """First backoff wait; it doubles per attempt, plus up to this much random jitter."""
    max_wait_s: float = 60.0
    """Cap on a backoff wait (a longer ``Retry-After`` from the server is still honoured)."""
    timeout_s: float = 30.0
    """Per-attempt timeout in seconds."""


class SearchSpec(Record):
    """The ``[search]`` table of a study (absent: the corpus backend)."""

    backend: Literal["corpus", "pool", "tavily", "brave", "searxng", "exa"] = "corpus"
    """``corpus``: BM25 over the study's corpus; ``pool``: logged candidate-pool search; a web provider."""
    pools: dict[str, str] = Field(default_factory=dict)
    """Pool file per card id (``[search.pools]``), relative to the study file; every card needs one."""
    selection: list[Literal["agent", "uniform"]] = ["agent"]
    """Selection cells to run (a list expands into slots): controller or uniform probabilities."""
    stopping: list[Literal["fixed", "adaptive"]] = ["fixed"]
    """Stopping cells to run: exactly K searches, or the agent's wish as a sampled decision."""
    ranking: list[Literal["original", "pro", "anti"]] = ["original"]
    """Ranking conditions to run: original, supporting-first (pro) or opposing-first (anti)."""
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    """``[search.controller]``: budget K, ε, temperature, penalties, stop probabilities (0.75 / 0.10)."""
    base_url: str | None = None
    """Web: the provider endpoint (its public one when absent; required for self-hosted SearXNG)."""
    api_key_env: str | None = None
    """Web: the variable holding the provider key (default TAVILY_API_KEY, BRAVE_API_KEY, EXA_API_KEY)."""
    reader: Literal["http", "tavily", "exa"] = "http"
    """Web: how ``read(url)`` gets a page: fetch it (``http``) or the provider's extract endpoint."""
    cache: Literal["off", "read-write", "read-only"] = "read-write"
    """Web: the acquisition store mode: ``off`` always fetches live (and still archives everything),
    ``read-write`` reuses and stores entries, ``read-only`` replays with no key and no network."""
    store_dir: str | None = None
    """Web: the acquisition store, relative to the study file; default ``<archive>/acquisition``
    (``draligned run --acquisition-store`` names another archive's store to replay it)."""
    max_connections: int = 4
    """Web: requests in flight to the provider (and to pages) across all runs of the study."""
    allow_private_addresses: list[str] = Field(default_factory=list)
    """Web: private or loopback addresses (or CIDR ranges) the http reader may fetch; absent: refused."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Web: provider request fields sent verbatim with every search (and extract), recorded as sent."""
    retry: WebRetry = Field(default_factory=WebRetry)
    """Web: retries of 429/5xx/timeouts/connection errors and the per-attempt timeout (not part of any key)."""
    max_page_bytes: int = 4_000_000
    """Web: the http reader's size cap; a larger page is the ``too_large`` tool error."""
    max_redirects: int = 5
    """Web: the http reader's redirect bound; a longer chain is ``too_many_redirects``."""

    @field_validator("selection", "stopping", "ranking", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> SearchSpec:
        if {"selection", "stopping"} & self.controller.model_fields_set:
            raise ValueError("set selection and stopping in [search], not in [search.controller]")
        for name in ("selection", "stopping", "ranking"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{name} must list distinct values")
        if (self.backend == "pool") != bool(self.pools):
            raise ValueError("[search.pools] (card id = pool file) is required with backend 'pool' and only then")
        return self

    @model_validator(mode="after")
    def _web_fields(self) -> SearchSpec:
        """Web fields only with a web backend, each valid for that provider."""
        web_fields = {"base_url", "api_key_env", "reader", "cache", "store_dir", "max_connections",
                      "allow_private_addresses",
                      "options", "retry", "max_page_bytes", "max_redirects"}
        if not self.is_web:
            if stray := sorted(web_fields & self.model_fields_set):
                raise _field_error((stray[0],), f"only used by the web backends ({', '.join(WEB_BACKENDS)}), "
                                                f"not by backend {self.backend!r}")
            return self
        if self.reader not in READERS[self.backend]:
            raise _field_error(("reader",), f"backend {self.backend!r} has no {self.reader!r} reader "
                                            f"(it offers: {', '.join(READERS[self.backend])})")
        if self.backend == "searxng" and self.base_url is None:
            raise _field_error(("base_url",), "SearXNG is self-hosted: give the instance's address")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise _field_error(("base_url",), f"{self.base_url!r} is not an http(s) URL")
        for name in ("max_connections", "max_page_bytes"):
            if getattr(self, name) < 1:
                raise _field_error((name,), "must be at least 1")
        if self.max_redirects < 0:
            raise _field_error(("max_redirects",), "must be at least 0")
        for key, value in self.options.items():
            if key in RESERVED_OPTIONS[self.backend]:
                raise _field_error(("options", key), "is set by draligned itself (the query, the contract's "
                                                     "result count or the reply format); remove it")
            types = OPTION_TYPES[self.backend].get(key)
            if types and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
                want = " or ".join(t.__name__ for t in types)
                raise _field_error(("options", key), f"must be {want}, got {type(value).__name__} {value!r}")
        return self

    @property
    def is_web(self) -> bool:
        """True for a live web provider."""
        return self.backend in WEB_BACKENDS

    @property
    def key_env(self) -> str | None:
        """The variable that must hold the provider key (None for SearXNG, which needs none)."""
        return self.api_key_env or KEY_ENV.get(self.backend)

    def conditions(self) -> list[SearchCondition | None]:
        """The cells every (card, arm, model, harness, seed) runs: [None] for corpus and web search."""
        if self.backend != "pool":
            return [None]
        return [SearchCondition(selection=a, stopping=b, ranking=r)
                for a, b, r in itertools.product(self.selection, self.stopping, self.ranking)]
