"""Loopback fakes of the four search providers and of the web, written afresh from the providers' public
documentation (independently of ``tests/web_servers.py``) to check the web backends the way issue 15 will be.

They differ from the first fakes in documented, realistic ways:

- Tavily (docs.tavily.com, ``POST /search``, ``POST /extract``): replies carry every documented field
  (``answer``, ``images``, ``follow_up_questions``, ``response_time`` as a number, ``usage``), keys in
  another order, sent with chunked transfer encoding; extract results carry ``images`` and
  ``failed_results`` entries; errors as ``{"detail": {"error": ...}}``.
- Exa (docs.exa.ai, ``POST /search``, ``POST /contents``): ``costDollars``, ``resolvedSearchType``,
  ``searchTime``; results with ``favicon``, ``image``, no ``author`` and no ``publishedDate`` (both
  optional); URL-level failures of ``/contents`` in ``statuses`` of a 200 (``CRAWL_NOT_FOUND``,
  ``httpStatusCode``); request errors as ``{"requestId", "error", "tag"}``.
- Brave (api-dashboard.search.brave.com, ``GET /res/v1/web/search``): gzip-compressed replies (the docs'
  example sends ``Accept-Encoding: gzip``), ``query``/``mixed``/``web`` with ``profile``, ``meta_url``,
  ``extra_snippets``, ``page_age``; 429 with ``Retry-After`` as an HTTP date and the
  ``X-RateLimit-*`` headers.
- SearXNG (docs.searxng.org, ``GET /search?format=json``): ``number_of_results``, ``answers``,
  ``corrections``, ``infoboxes``, ``suggestions``, ``unresponsive_engines``; results with
  ``engines``, ``positions``, ``category``, ``parsed_url``, some without ``content`` (optional).

``Fake`` is one threaded loopback server answering from a route function; a reply may be gzipped, chunked,
slow (a delay, or a body dripped a few bytes at a time) or short (a Content-Length larger than the bytes
it sends). ``Planned`` faults answer the first requests of a path (429, 5xx, a malformed body).
"""

from __future__ import annotations

import email.utils
import gzip
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

KEY = "independent-key-7f3a"


@dataclass
class Reply:
    """One HTTP answer and how it is put on the wire."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    gzip: bool = False
    chunked: bool = False
    delay_s: float = 0.0
    drip_s: float = 0.0
    """Seconds between 16-byte pieces of the body (a slow reply that never pauses for a whole timeout)."""
    claimed_length: int | None = None
    """A Content-Length to announce instead of the body's (then the connection closes)."""


def json_reply(data: Any, status: int = 200, **kw: Any) -> Reply:
    return Reply(status, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(data).encode(), **kw)


Route = Callable[[dict[str, Any]], Reply]


class Fake:
    """A threaded loopback HTTP server: ``route(request) -> Reply``; ``log`` keeps every request."""

    def __init__(self, route: Route, host: str = "127.0.0.1") -> None:
        self.route = route
        self.log: list[dict[str, Any]] = []
        self.plan: dict[str, list[Reply]] = {}
        """path -> replies for its next requests (faults), used up in order."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = {"method": self.command, "path": parts.path, "query": parse_qs(parts.query),
                           "headers": dict(self.headers), "body": body}
                fake.log.append(request)
                planned = fake.plan.get(parts.path)
                reply = planned.pop(0) if planned else fake.route(request)
                self._send(reply)

            def _send(self, r: Reply) -> None:
                time.sleep(r.delay_s)
                body = gzip.compress(r.body) if r.gzip else r.body
                self.send_response(r.status)
                for k, v in r.headers.items():
                    self.send_header(k, v)
                if r.gzip:
                    self.send_header("Content-Encoding", "gzip")
                if r.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(r.claimed_length or len(body)))
                if r.claimed_length is not None:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    if r.chunked:
                        for i in range(0, len(body), 1000):
                            piece = body[i:i + 1000]
                            self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    elif r.drip_s:
                        for i in range(0, len(body), 16):
                            self.wfile.write(body[i:i + 16])
                            self.wfile.flush()
                            time.sleep(r.drip_s)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_GET = do_POST = _serve

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"

    def requests(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.log if r["path"] == path]

    def __enter__(self) -> Self:
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- the web the providers point to ---------------------------------------------------------------

ARTICLE = ["Night trains between Vienna and Venice leave at nine in the evening and a couchette costs about "
           "sixty euros when booked two months ahead.",
           "Budget travellers can save on food by buying regional produce at morning markets in Ljubljana.",
           "A rail pass pays off only for more than four long journeys within a month."]
CHINESE = ["成都的青年旅舍每晚大约六十到一百二十元，春熙路附近的价格更高。",
           "乘坐地铁和共享单车，一天的交通费用通常不超过十五元。",
           "宽窄巷子的茶馆可以免费休息，周末人多，建议早上去。"]


def html(title: str, paragraphs: list[str], head: str = "") -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<html lang='x'><head>{head}<title>{title}</title></head><body><header>Menu | Login</header>"
            f"<main><h1>{title}</h1>{body}</main><footer>Rail Notes 2026</footer></body></html>")


def pdf(text: str) -> bytes:
    """A one-page uncompressed PDF holding ``text`` (written by hand from the PDF 1.4 object syntax)."""
    content = b"BT /F1 11 Tf 50 700 Td (" + text.encode("latin-1") + b") Tj ET"
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Times-Roman >>"]
    out, at = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"), []
    for n, o in enumerate(objs, 1):
        at.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, o)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1) + b"".join(b"%010d 00000 n \n" % a for a in at)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def pages(private_target: str) -> dict[str, Reply]:
    """path -> reply of the web fake; ``private_target`` is a private address a redirect points to."""
    h = {"Content-Type": "text/html; charset=UTF-8"}
    five_mb = html("Timetable archive", [f"Row {i}: the 21:04 from Wien Hbf runs daily. " * 20
                                         for i in range(5300)]).encode()
    return {
        "/night-trains": Reply(200, h, html("Night trains on a budget", ARTICLE).encode(), chunked=True),
        "/chengdu": Reply(200, {"Content-Type": "text/html"}, html("成都旅行预算", CHINESE).encode("gbk")),
        # GBK bytes whose <meta> claims UTF-8, served without a header charset
        "/chengdu-meta-lies": Reply(200, {"Content-Type": "text/html"},
                                    html("成都住宿", CHINESE, '<meta charset="utf-8">').encode("gbk")),
        # UTF-8 bytes, a correct UTF-8 header, and a copied template's <meta> claiming GB2312
        "/utf8-meta-says-gb2312": Reply(200, h, html("成都美食", CHINESE, '<meta charset="gb2312">').encode()),
        "/timetable.pdf": Reply(200, {"Content-Type": "application/pdf"},
                                pdf("Vienna to Venice night train timetable, winter 2026.")),
        "/r1": Reply(301, {"Location": "/r2"}), "/r2": Reply(307, {"Location": "/r3"}),
        "/r3": Reply(308, {"Location": "/night-trains?from=redirect"}),
        "/to-private": Reply(302, {"Location": private_target}),
        "/five-mb": Reply(200, h, five_mb),
        "/five-mb-gzip": Reply(200, h, five_mb, gzip=True),
        "/short-body": Reply(200, h, b"<html><body><p>only a little</p>", claimed_length=3_000_000),
        "/huge-claim": Reply(200, h, b"<html>tiny</html>", claimed_length=10**12),
        "/drip": Reply(200, h, html("Slow", ARTICLE * 8).encode(), drip_s=0.15),
        "/slow": Reply(200, h, html("Slow", ARTICLE).encode(), delay_s=3.0),
        "/missing": Reply(404, h, b"<html><body>No such page</body></html>"),
        "/flaky": Reply(200, h, html("Flaky but fine", ARTICLE).encode()),
    }


class Web(Fake):
    """The pages (see :func:`pages`); unknown paths are 404."""

    def __init__(self, private_target: str = "http://10.255.255.1/") -> None:
        self.pages = pages(private_target)
        super().__init__(lambda req: self.pages.get(req["path"], Reply(404, {}, b"not here")))


# --- the providers ----------------------------------------------------------------------------------

HIT_PATHS = ["/night-trains", "/chengdu", "/timetable.pdf", "/r1", "/missing"]
SEARCH = {"tavily": "/search", "exa": "/search", "brave": "/res/v1/web/search", "searxng": "/search"}
EXTRACT = {"tavily": "/extract", "exa": "/contents"}


def _snippet(path: str) -> str:
    return " ".join(CHINESE if "chengdu" in path else ARTICLE)


class Provider(Fake):
    """One provider's wire format; its hits point to ``web`` (many results, so the caps are tested)."""

    def __init__(self, kind: str, web: Web, n_hits: int = 9) -> None:
        self.kind, self.web = kind, web
        self.hit_urls = [web.url + p for p in HIT_PATHS] + [f"{web.url}/night-trains?copy={i}" for i in range(n_hits)]
        super().__init__(getattr(self, "_" + kind))
        self._n = 0

    def _rid(self) -> str:
        self._n += 1
        return f"req-{self.kind}-{self._n:04d}"

    def _tavily(self, req: dict[str, Any]) -> Reply:
        if req["headers"].get("Authorization") != f"Bearer {KEY}" and (req["body"] or {}).get("api_key") != KEY:
            return json_reply({"detail": {"error": "Unauthorized: missing or invalid API key."}}, 401)
        body = req["body"]
        if req["path"] == "/search":
            n = int(body.get("max_results", 5))
            results = [{"url": u, "title": f"Result {i}: night trains <b>&amp;</b> budgets", "score": 0.91 - i / 100,
                        "raw_content": None, "content": _snippet(u) * 3, "favicon": None}
                       for i, u in enumerate(self.hit_urls[:n])]
            return json_reply({"results": results, "images": [], "follow_up_questions": None, "answer": None,
                               "query": body["query"], "response_time": 1.67, "request_id": self._rid(),
                               "usage": {"credits": 1}}, chunked=True)
        results, failed = [], []
        for url in body["urls"]:
            path = urlsplit(url).path
            if path in ("/night-trains", "/chengdu"):
                results.append({"images": [], "raw_content": "\n".join(ARTICLE if path == "/night-trains" else CHINESE),
                                "url": url, "favicon": None})
            else:
                failed.append({"url": url, "error": "Failed to fetch url"})
        return json_reply({"failed_results": failed, "results": results, "response_time": 0.4,
                           "request_id": self._rid()}, chunked=True)

    def _exa(self, req: dict[str, Any]) -> Reply:
        if req["headers"].get("x-api-key") != KEY:
            return json_reply({"requestId": self._rid(), "error": "Invalid API key", "tag": "INVALID_API_KEY"}, 401)
        body = req["body"]
        cost = {"total": 0.005, "breakDown": [{"search": 0.005, "contents": 0}]}
        if req["path"] == "/search":
            n = int(body.get("numResults", 10))
            results = [{"id": u, "title": f"Exa hit {i}", "url": u, "favicon": "https://x/f.ico", "image": None,
                        "text": _snippet(u) * 3, "score": 0.3} for i, u in enumerate(self.hit_urls[:n])]
            return json_reply({"requestId": self._rid(), "resolvedSearchType": "neural", "results": results,
                               "searchTime": 812.5, "costDollars": cost})
        results, statuses = [], []
        for url in body["urls"]:
            path = urlsplit(url).path
            if path in ("/night-trains", "/chengdu"):
                results.append({"id": url, "url": url, "title": "Extracted",
                                "text": "\n".join(ARTICLE if path == "/night-trains" else CHINESE)})
                statuses.append({"id": url, "status": "success"})
            else:
                statuses.append({"id": url, "status": "error",
                                 "error": {"tag": "CRAWL_NOT_FOUND", "httpStatusCode": 404}})
        return json_reply({"requestId": self._rid(), "results": results, "statuses": statuses,
                           "costDollars": cost})

    def _brave(self, req: dict[str, Any]) -> Reply:
        if req["headers"].get("X-Subscription-Token") != KEY:
            return json_reply({"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID",
                                                                  "status": 422}}, 422)
        q = req["query"]
        n = min(int(q.get("count", ["20"])[0]), 20)
        results = [{"type": "search_result", "subtype": "generic", "title": f"<strong>Rail</strong> page {i}",
                    "url": u, "is_source_local": False, "profile": {"name": "Rail", "url": u},
                    "meta_url": {"scheme": "http", "hostname": "127.0.0.1", "path": urlsplit(u).path},
                    "description": "<strong>Night</strong> trains &amp; " + _snippet(u) * 3,
                    "extra_snippets": ["More about rail passes."], "page_age": "2026-11-02T00:00:00"}
                   for i, u in enumerate(self.hit_urls[:n])]
        data = {"query": {"original": q["q"][0], "more_results_available": True}, "mixed": {"type": "mixed"},
                "type": "search", "web": {"type": "search", "results": results, "family_friendly": True}}
        return Reply(200, {"Content-Type": "application/json", "X-RateLimit-Limit": "1, 15000",
                           "X-RateLimit-Remaining": "0, 14999"}, json.dumps(data).encode(), gzip=True)

    def _searxng(self, req: dict[str, Any]) -> Reply:
        q = req["query"]
        if q.get("format") != ["json"]:
            return Reply(403, {"Content-Type": "text/html"}, b"<html>403 Forbidden</html>")
        results = []
        for i, u in enumerate(self.hit_urls):
            r = {"url": u, "title": f"SearX {i}", "engine": "duckduckgo", "engines": ["duckduckgo", "brave"],
                 "positions": [i + 1], "score": 2.0 / (i + 1), "category": "general", "template": "default.html",
                 "parsed_url": ["http", urlsplit(u).netloc, urlsplit(u).path, "", "", ""]}
            if i % 3 != 2:  # content is optional
                r["content"] = _snippet(u) * 3
            results.append(r)
        return json_reply({"query": q["q"][0], "number_of_results": 0, "results": results, "answers": [],
                           "corrections": [], "infoboxes": [], "suggestions": ["night train"],
                           "unresponsive_engines": [["google", "timeout"]]})


def http_date(seconds_from_now: float) -> str:
    """An HTTP date (RFC 9110 IMF-fixdate) ``seconds_from_now`` ahead."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def rate_limited(after: str) -> Reply:
    """A 429 asking to wait (``Retry-After``: seconds or an HTTP date)."""
    return Reply(429, {"Content-Type": "application/json", "Retry-After": after}, b'{"error": "rate limited"}')


def malformed() -> Reply:
    """A 200 whose JSON body is cut off."""
    return Reply(200, {"Content-Type": "application/json"}, b'{"results": [{"url": "http://x/", "title": ')
