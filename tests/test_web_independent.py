"""Issue 15's checks, repeated against independently written fakes of each provider and of the web
(``tests/web_fakes_independent.py``), through the real clients, with the sim agent."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from draligned.archive import Archive
from draligned.cli import main
from draligned.records import FetchAttemptEvent
from draligned.tools.acquisition import Fetched
from draligned.tools.web.pagetext import decode
from draligned.tools.web.store import normalise_url
from draligned.workflow import run_study_file
from tests.study_helpers import run, write_study
from tests.web_fakes_independent import (
    EXTRACT,
    KEY,
    SEARCH,
    Fake,
    Provider,
    Reply,
    Web,
    http_date,
    malformed,
    rate_limited,
)
from tests.web_helpers import KEY_ENV, returns, study_web, tool_events, web_study

BACKENDS = [("tavily", "http"), ("tavily", "tavily"), ("exa", "http"), ("exa", "exa"), ("brave", "http"),
            ("searxng", "http")]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def web():
    with Web() as w:
        yield w


def _events(result, tool: str | None = None):
    return [e for r in result.archive.records() for e in tool_events(r, tool)]


@pytest.mark.parametrize(("kind", "reader"), BACKENDS, ids=lambda v: str(v))
def test_each_backend_runs_a_study_within_the_caps_and_p_and_q_share_returns(tmp_path, web, kind, reader):
    with Provider(kind, web) as provider:
        result = run(web_study(tmp_path, kind, provider.url, reader))
    assert result.statuses == {"completed": 2}
    assert provider.requests(SEARCH[kind])
    if reader != "http":
        assert provider.requests(EXTRACT[reader]) and not web.log  # the provider read the pages
    for record in result.archive.records():
        for text in returns(result.archive, record, "search"):
            blocks = text.split("\n\n")
            assert len(blocks) == 6  # the fakes send 14 hits; the contract shows 6
            assert all(len(b.split("\nSnippet: ")[1]) <= 400 for b in blocks)
            assert "<strong>" not in text and "&amp;" not in text
        assert all(len(t) <= 6000 for t in returns(result.archive, record, "read"))
    p, q = ({e.request_text: e for e in tool_events(r)} for r in sorted(result.archive.records(),
                                                                         key=lambda r: r.slot.arm))
    shared = set(p) & set(q)
    assert shared
    for text in shared:
        assert p[text].return_blob == q[text].return_blob
        assert p[text].acquisition.raw_blob == q[text].acquisition.raw_blob
    searched = [r for r in provider.log if r["path"] == SEARCH[kind]]
    assert len(searched) == len({e.request_text for e in _events(result, "search")})  # one call per query


@pytest.mark.parametrize("kind", ["tavily", "brave"])
def test_a_429_with_an_http_date_then_a_503_is_retried_and_recorded(tmp_path, web, kind):
    with Provider(kind, web) as provider:
        provider.plan[SEARCH[kind]] = [rate_limited(http_date(5)), Reply(503, {}, b"upstream down")]
        result = run(web_study(tmp_path, kind, provider.url))
    assert result.statuses == {"completed": 2}
    attempts = [e.attempt for r in result.archive.records() for e in r.events if isinstance(e, FetchAttemptEvent)]
    assert [(a.error, a.status_code) for a in attempts] == [("rate_limited", 429), ("provider_error", 503)]
    assert attempts[0].wait_s >= 3  # the HTTP date was honoured (a second of clock skew allowed)
    assert all(e.error is None for e in _events(result, "search"))


def test_a_malformed_provider_body_is_a_named_tool_error_with_its_raw_body_archived(tmp_path, web):
    with Provider("exa", web) as provider:
        provider.plan["/search"] = [malformed() for _ in range(50)]
        result = run(web_study(tmp_path, "exa", provider.url))
    searches = _events(result, "search")
    assert searches and all(e.error == "malformed_reply" for e in searches)
    assert result.archive.get_blob(searches[0].acquisition.raw_blob).startswith(b'{"results": [{"url"')


def test_read_only_replay_sends_zero_requests_and_export_reruns_offline(tmp_path, web, monkeypatch, capsys):
    with Provider("searxng", web) as provider:
        study = web_study(tmp_path, "searxng", provider.url)
        first = run(study)
        sent, fetched = len(provider.log), len(web.log)
        monkeypatch.delenv(KEY_ENV)
        replay = run_study_file(study, tmp_path / "new", acquisition_store=first.archive.root / "acquisition")
        assert (len(provider.log), len(web.log)) == (sent, fetched)
    assert replay.statuses == {"completed": 2}
    assert [e.return_blob for e in _events(first)] == [e.return_blob for e in _events(replay)]
    out = tmp_path / "snap" / "corpus.jsonl"
    assert main(["acquisition", "export", str(first.archive.root), "--out", str(out)]) == 0
    capsys.readouterr()
    (tmp_path / "offline").mkdir()
    offline = write_study(tmp_path / "offline", ["travel_budget_en.json"], name="offline")
    offline.write_text(re.sub(r'corpus = ".*"', f'corpus = "{out}"', offline.read_text()))
    assert run(offline).statuses == {"completed": 2}
    assert any(json.loads(line)["url"].startswith(web.url) for line in out.read_text().splitlines())


def _read(tmp_path: Path, url: str, **fields: object) -> Fetched:
    async def go() -> Fetched:
        w = study_web("brave", "http://127.0.0.1:9", tmp_path / "store", **fields)
        try:
            return await w.read(url, Archive(tmp_path / "archive"))
        finally:
            await w.aclose()
    return asyncio.run(go())


@pytest.mark.parametrize(("path", "expect"), [
    ("/chengdu", "成都的青年旅舍每晚大约六十到一百二十元"),
    ("/chengdu-meta-lies", "乘坐地铁和共享单车"),
    ("/utf8-meta-says-gb2312", "宽窄巷子的茶馆"),
    ("/timetable.pdf", "Vienna to Venice night train timetable"),
    ("/r1", "a couchette costs about sixty euros"),
    ("/night-trains", "Budget travellers can save on food"),  # chunked
])
def test_pages_give_sensible_text(tmp_path, web, path, expect):
    fetched = _read(tmp_path, web.url + path)
    assert fetched.page is not None, fetched.message
    assert expect in fetched.page.text


@pytest.mark.parametrize(("path", "code"), [
    ("/five-mb", "too_large"), ("/five-mb-gzip", "too_large"), ("/huge-claim", "too_large"),
    ("/short-body", "connection_error"), ("/missing", "http_404"), ("/to-private", "blocked_address"),
])
def test_pages_that_cannot_be_read_are_named_errors(tmp_path, web, path, code):
    fetched = _read(tmp_path, web.url + path, retry={"timeout_s": 1.0, "max_attempts": 1})
    assert fetched.page is None and fetched.error == code, fetched.message


def test_a_5_mb_page_gives_text_when_the_cap_allows_it(tmp_path, web):
    fetched = _read(tmp_path, web.url + "/five-mb-gzip", max_page_bytes=6_000_000)
    assert fetched.page is not None and "the 21:04 from Wien Hbf runs daily" in fetched.page.text


def test_a_redirect_to_a_private_address_is_refused_even_on_loopback(tmp_path):
    with Fake(lambda req: Reply(200, {"Content-Type": "text/plain"}, b"secret")) as inner, Web() as w:
        # 127.0.0.2 is reachable on Linux loopback but not listed: an allow list of one address is exact
        w.pages["/to-private"] = Reply(302, {"Location": f"http://127.0.0.2:{inner.port}/"})
        w.pages["/to-https"] = Reply(301, {"Location": "https://10.1.2.3/admin"})
        w.pages["/to-metadata"] = Reply(302, {"Location": "http://169.254.169.254/latest/meta-data/"})
        for path in ("/to-private", "/to-https", "/to-metadata"):
            assert _read(tmp_path, w.url + path).error == "blocked_address"
        assert inner.log == []


def test_a_reply_that_drips_slowly_is_a_timeout_within_the_per_attempt_bound(tmp_path, web):
    start = time.monotonic()
    fetched = _read(tmp_path, web.url + "/drip", retry={"timeout_s": 0.3, "max_attempts": 1})
    assert fetched.error == "timeout", fetched.message
    assert time.monotonic() - start < 3  # the whole body takes ~12 s at the fake's pace


def test_a_provider_that_drips_its_reply_is_a_timeout(tmp_path, web):
    async def go() -> Fetched:
        w = study_web("brave", provider.url, tmp_path / "store", retry={"timeout_s": 0.3, "max_attempts": 1})
        try:
            return await w.search("night trains", 6, Archive(tmp_path / "archive"))
        finally:
            await w.aclose()
    with Provider("brave", web) as provider:
        provider.plan[SEARCH["brave"]] = [Reply(200, {"Content-Type": "application/json"},
                                                b'{"web": {"results": []}}' + b" " * 400, drip_s=0.1)]
        start = time.monotonic()
        fetched = asyncio.run(go())
    assert fetched.error == "timeout" and time.monotonic() - start < 3


def test_a_header_charset_wins_over_a_meta_that_lies():
    page = '<html><head><meta charset="gb2312"></head><body><p>杭州西湖</p></body></html>'.encode()
    assert "杭州西湖" in decode(page, "utf-8")
    assert "杭州西湖" in decode(page, None)  # valid UTF-8 is stronger evidence than a meta tag


def test_store_keys_ignore_fragments_and_case_but_idn_hosts_key_as_their_ascii_form():
    assert normalise_url("HTTP://Example.COM:80/a?b=1#top") == normalise_url("http://example.com/a?b=1")
    assert normalise_url("http://Bücher.example/x") == normalise_url("http://xn--bcher-kva.example/x")
    assert normalise_url("http://example.com/a?b=1") != normalise_url("http://example.com/a?b=2")


def test_failing_reads_in_a_study_are_named_tool_errors_the_agent_reads(tmp_path, web):
    with Provider("tavily", web) as provider:
        provider.hit_urls = [web.url + p for p in ("/missing", "/to-private", "/five-mb")]
        result = run(web_study(tmp_path, "tavily", provider.url))
    assert result.statuses == {"completed": 2}, [(r.status, r.status_reason) for r in result.archive.records()]
    reads = _events(result, "read")
    assert reads and {e.error for e in reads} <= {"http_404", "blocked_address", "too_large"}
    for e in reads:
        assert f"({e.error})" in result.archive.get_text(e.return_blob)


def test_a_stored_refusal_without_a_body_is_served_from_the_store(tmp_path, web):
    async def go() -> list[Fetched]:
        w = study_web("brave", "http://127.0.0.1:9", tmp_path / "store")
        archive = Archive(tmp_path / "archive")
        try:  # a 404 leaves a body in the store; a blocked address was refused before any request: none
            return [await w.read(web.url + p, archive) for p in ("/missing", "/to-private", "/to-private")]
        finally:
            await w.aclose()
    missing, first, again = asyncio.run(go())
    assert (missing.error, first.error, again.error) == ("http_404", "blocked_address", "blocked_address")
    assert first.acquisition.live and not again.acquisition.live and again.acquisition.raw_blob is None
