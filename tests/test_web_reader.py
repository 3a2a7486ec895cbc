"""The http reader, the provider readers and the store, one request at a time over loopback servers."""

from __future__ import annotations

import asyncio

import pytest

from draligned.archive import Archive
from draligned.hashing import canonical_json, sha256_bytes
from draligned.tools.acquisition import AcquisitionTools, Fetched
from draligned.tools.web.backend import RunWeb
from draligned.tools.web.pagetext import decode
from draligned.tools.web.store import AcquisitionStore, StoreEntry, normalise_url
from draligned.tools.web.wire import USER_AGENT
from tests.web_helpers import study_web
from tests.web_servers import SEARCH_PATHS, PageServer, ProviderServer


class _Caps:
    search_results, snippet_chars, read_chars = 6, 400, 6000


pytestmark = pytest.mark.usefixtures("web_key")


def _read(tmp_path, web_pages: PageServer, path: str, **fields: object) -> Fetched:
    async def go() -> Fetched:
        web = study_web("brave", "http://127.0.0.1:9", tmp_path / "store", **fields)
        try:
            return await web.read(web_pages.url + path, Archive(tmp_path / "archive"))
        finally:
            await web.aclose()
    return asyncio.run(go())


def _text(fetched: Fetched) -> str:
    assert fetched.page is not None, fetched.message
    return fetched.page.text


def test_an_html_page_gives_its_main_text_without_the_navigation(tmp_path, web_pages):
    fetched = _read(tmp_path, web_pages, "/kyoto-hostels")
    assert "3,000 and 6,000 yen a night" in _text(fetched) and "Home | About" not in _text(fetched)
    assert fetched.page.title == "Kyoto hostels on a budget" and fetched.page.lang == "en"
    assert fetched.acquisition.live and fetched.acquisition.provider == "http"


def test_a_gbk_page_without_a_charset_header_decodes(tmp_path, web_pages):
    fetched = _read(tmp_path, web_pages, "/hangzhou-gbk")
    assert "杭州的青年旅舍每晚大约八十到一百五十元" in _text(fetched) and fetched.page.lang == "zh"
    assert fetched.page.title == "杭州旅行预算指南"


def test_a_gb2312_page_mislabelled_iso_8859_1_decodes_by_its_meta(tmp_path, web_pages):
    assert "龙井村的茶馆提供免费品茶" in _text(_read(tmp_path, web_pages, "/hangzhou-mislabelled"))


def test_charsets_a_latin_1_page_stays_latin_1_and_gbk_without_any_declaration_is_detected():
    assert decode("Café crème à Paris, très bon marché.".encode("latin-1"), "iso-8859-1") == \
        "Café crème à Paris, très bon marché."
    zh = "杭州的青年旅舍每晚大约八十到一百五十元，西湖附近的价格更高一些。" * 3
    assert decode(zh.encode("gbk"), None) == zh
    assert decode(zh.encode("gbk"), "iso-8859-1") == zh
    assert decode("\ufeffhello".encode("utf-8"), "gbk") == "hello"
    assert decode("杭州旅行预算".encode("gbk"), None) == "杭州旅行预算"  # too short for the detector
    assert decode("naïve café".encode("cp1252"), None) == "naïve café"


def test_a_pdf_gives_its_text(tmp_path, web_pages):
    fetched = _read(tmp_path, web_pages, "/report.pdf")
    assert "Dormitory beds cost 3,000 yen a night." in _text(fetched)
    assert fetched.page.title == "Budget travel report"


def test_a_redirect_chain_is_followed_and_each_hop_checked(tmp_path, web_pages):
    assert "3,000 and 6,000 yen" in _text(_read(tmp_path, web_pages, "/old-link"))
    assert [e["path"] for e in web_pages.log] == ["/old-link", "/moved-once", "/kyoto-hostels"]


@pytest.mark.parametrize(("path", "fields", "code"), [
    ("/loop-a", {}, "too_many_redirects"),
    ("/old-link", {"max_redirects": 1}, "too_many_redirects"),
    ("/huge", {}, "too_large"),
    ("/gone", {}, "http_404"),
    ("/photo.png", {}, "not_html"),
    ("/kyoto-hostels", {"allow_private_addresses": []}, "blocked_address"),
])
def test_a_failing_read_is_a_named_tool_error(tmp_path, web_pages, path, fields, code):
    fetched = _read(tmp_path, web_pages, path, **fields)
    assert fetched.page is None and fetched.error == code and fetched.message
    if code == "blocked_address":
        assert web_pages.log == []  # refused before any connection


@pytest.mark.slow
def test_a_5_mb_page_is_read_when_the_cap_allows_it(tmp_path, web_pages):
    assert "Kyoto budget travel notes." in _text(_read(tmp_path, web_pages, "/huge", max_page_bytes=8_000_000))


def test_only_http_and_https_urls_are_read(tmp_path, web_pages):
    async def go() -> list[Fetched]:
        web = study_web("brave", "http://127.0.0.1:9", tmp_path / "store")
        archive = Archive(tmp_path / "archive")
        try:
            return [await web.read(u, archive) for u in ("ftp://127.0.0.1/x", "file:///etc/passwd", "kyoto")]
        finally:
            await web.aclose()
    assert [f.error for f in asyncio.run(go())] == ["bad_url"] * 3


def test_no_cookie_is_kept_or_sent_and_the_user_agent_is_fixed(tmp_path, web_pages):
    assert _text(_read(tmp_path, web_pages, "/set-cookie")) == "echo"
    assert all("Cookie" not in e["headers"] for e in web_pages.log)
    assert {e["headers"]["User-Agent"] for e in web_pages.log} == {USER_AGENT}


def test_tool_returns_apply_the_contract_caps(tmp_path, web_pages):
    async def go() -> tuple[str, str]:
        with ProviderServer("searxng", web_pages, results=["/kyoto-hostels"] * 10) as provider:
            web = study_web("searxng", provider.url, tmp_path / "store")
            tools = AcquisitionTools(RunWeb(web, Archive(tmp_path / "archive")), _Caps())
            try:
                found = await tools.search("kyoto budget")
                read = await tools.read(web_pages.url + "/long")
            finally:
                await web.aclose()
        return found.text, read.text
    found, read = asyncio.run(go())
    assert found.count("\nURL: ") == 6 and all(len(b.split("Snippet: ")[1]) <= 400 for b in found.split("\n\n"))
    assert len(read) == 6000


def test_a_malformed_provider_reply_is_a_tool_error_with_its_raw_body_archived(tmp_path, web_pages):
    async def go() -> Fetched:
        with ProviderServer("tavily", web_pages, faults={"/search": {1: "malformed"}}) as provider:
            web = study_web("tavily", provider.url, tmp_path / "store")
            try:
                return await web.search("kyoto", 6, Archive(tmp_path / "archive"))
            finally:
                await web.aclose()
    fetched = asyncio.run(go())
    assert fetched.error == "malformed_reply" and fetched.hits is None
    assert b"502 Bad Gateway (proxy)" in Archive(tmp_path / "archive").get_blob(fetched.acquisition.raw_blob)


@pytest.mark.parametrize("kind", ["tavily", "exa", "brave", "searxng"])
def test_a_provider_that_hangs_is_a_timeout_after_the_bounded_retries(tmp_path, web_pages, kind):
    async def go() -> Fetched:
        faults = {SEARCH_PATHS[kind]: {1: "hang", 2: "hang"}}
        with ProviderServer(kind, web_pages, faults=faults) as provider:
            web = study_web(kind, provider.url, tmp_path / "store",
                            retry={"timeout_s": 0.05, "max_attempts": 2})
            try:
                return await web.search("kyoto", 6, Archive(tmp_path / "archive"))
            finally:
                await web.aclose()
    fetched = asyncio.run(go())
    assert fetched.error == "timeout" and [a.error for a in fetched.attempts] == ["timeout", "timeout"]


@pytest.mark.parametrize("kind", ["tavily", "exa"])
def test_the_provider_reader_names_a_page_it_cannot_get(tmp_path, web_pages, kind):
    async def go() -> Fetched:
        with ProviderServer(kind, web_pages) as provider:
            web = study_web(kind, provider.url, tmp_path / "store", reader=kind)
            try:
                return await web.read(web_pages.url + "/gone", Archive(tmp_path / "archive"))
            finally:
                await web.aclose()
    fetched = asyncio.run(go())
    assert fetched.page is None and fetched.error in ("http_404", "http_error") and fetched.acquisition.raw_blob


def test_identical_requests_in_flight_share_one_provider_call(tmp_path, web_pages):
    async def go() -> list[Fetched]:
        with ProviderServer("exa", web_pages) as provider:
            web = study_web("exa", provider.url, tmp_path / "store")
            archive = Archive(tmp_path / "archive")
            try:
                got = await asyncio.gather(*(web.search("kyoto  hostels", 6, archive) for _ in range(5)),
                                           web.search(" kyoto hostels ", 6, archive))
            finally:
                await web.aclose()
            assert len(provider.requests("/search")) == 1
            return list(got)
    got = asyncio.run(go())
    assert sum(f.acquisition.live for f in got) == 1
    assert len({canonical_json([h.model_dump() for h in f.hits]) for f in got}) == 1
    assert len({f.acquisition.entry_blob for f in got}) == 1


def test_urls_are_keyed_normalised():
    assert normalise_url("HTTP://Example.COM:80/a?b=1#frag") == "http://example.com/a?b=1"
    assert normalise_url("https://example.com") == "https://example.com/"
    assert normalise_url("https://example.com:8443/x") == "https://example.com:8443/x"
    assert normalise_url("http://[::1]:8080/x") == "http://[::1]:8080/x"


def test_the_first_writer_of_an_entry_wins(tmp_path):
    store = AcquisitionStore(tmp_path, "read-write")
    first = StoreEntry(key="ab" * 32, provider="brave", endpoint="e", request={"q": "x"}, reader="http",
                       fetched_at="2026-01-01T00:00:00+00:00", error="http_404", message="first")
    later = first.model_copy(update={"fetched_at": "2026-01-02T00:00:00+00:00", "message": "later"})
    assert store.put(first, b"one") == first
    assert store.put(later, b"two") == first and store.get(first.key) == first
    assert store.body(sha256_bytes(b"two")) == b"two"  # bodies are content-addressed: both kept
