"""Loopback web servers for the web backends, written from the providers' public API documentation.

``ProviderServer(kind)`` speaks one provider's wire format on 127.0.0.1:

- ``tavily``: ``POST /search`` (``{"query", "max_results", ...}`` with ``Authorization: Bearer KEY``) and
  ``POST /extract`` (``{"urls": [...]}``), answering ``{"results": [{"title", "url", "content", "score"}],
  "request_id"}`` / ``{"results": [{"url", "raw_content"}], "failed_results": [{"url", "error"}]}``; errors
  as ``{"detail": {"error": "..."}}``;
- ``exa``: ``POST /search`` (``{"query", "numResults", "contents"}`` with ``x-api-key: KEY``) and ``POST
  /contents`` (``{"urls": [...]}``), answering ``{"requestId", "results": [{"id", "url", "title", "text"}]}``
  (plus ``"statuses"`` for contents);
- ``brave``: ``GET /res/v1/web/search?q=&count=`` with ``X-Subscription-Token: KEY``, answering ``{"type":
  "search", "web": {"results": [{"title", "url", "description"}]}}`` (``description`` with ``<strong>``);
- ``searxng``: ``GET /search?q=&format=json`` (403 without ``format=json``), answering ``{"query",
  "results": [{"url", "title", "content", "engine"}], "unresponsive_engines": []}``.

Every search returns the site's pages that share a word with the query (all of them when none does),
so the sim agent always has something to read. ``PageServer`` serves those pages: English HTML, a
long page (60 paragraphs), a GBK page without a charset header, a GB2312 page mislabelled ISO-8859-1,
a PDF, a redirect chain, a redirect loop, a redirect that sets a cookie (its target echoes any cookie
sent back), a 5 MB page, a 404 and a PNG. Faults are planned per endpoint by request number
(1-based): ``(status, headers)`` for an error status, ``"malformed"`` for a 200 that is not JSON,
``"hang"`` for an answer only once the server is closed (later than any test timeout). ``log`` keeps every
request (path, headers, body).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.loopback_wire import Loopback

KEY = "test-web-key-123"
Fault = tuple[int, dict[str, str]] | str


def make_pdf(lines: list[str], title: str = "Budget travel report") -> bytes:
    """A one-page PDF with the lines as text (Helvetica), built by hand: objects, xref table, trailer."""
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
    for line in lines:
        ops.append("(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*")
    ops.append("ET")
    stream = zlib.compress("\n".join(ops).encode("latin-1"))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Title (" + title.encode("latin-1") + b") >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _html(title: str, paragraphs: list[str], charset_meta: str = "") -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html><html><head>{charset_meta}<title>{title}</title></head><body>"
            f"<nav>Home | About | Contact</nav><article><h1>{title}</h1>{body}</article>"
            f"<footer>Copyright 2026 Example Travel</footer></body></html>")


_EN = ["Hostels in Kyoto cost between 3,000 and 6,000 yen a night for a dormitory bed, and most of them are "
       "close to a train station, which keeps the daily budget for transport low.",
       "A traveller on a budget can eat well at convenience stores and noodle bars for under 2,000 yen a day; "
       "temples charge small entry fees and many gardens are free in the early morning.",
       "Booking a month ahead usually saves a fifth of the price, and weekday nights are cheaper than weekends."]
_ZH = ["杭州的青年旅舍每晚大约八十到一百五十元，西湖附近的价格更高一些。",
       "预算有限的旅行者可以乘坐公交和地铁，一天的交通费用通常不超过二十元。",
       "龙井村的茶馆提供免费品茶，周末游客较多，建议工作日前往。"]


def site_pages() -> dict[str, tuple[int, dict[str, str], bytes]]:
    """path -> (status, headers, body) of every page the page server knows."""
    html = "text/html"
    notes = [f"Note {i}: " + "Kyoto budget travel notes. " * 40 for i in range(5000)]  # distinct: not deduplicated
    big = _html("Enormous archive page", notes).encode()
    long = _html("Long guide", [f"Section {i}: " + _EN[i % 3] for i in range(60)]).encode()
    return {
        "/kyoto-hostels": (200, {"Content-Type": f"{html}; charset=utf-8"},
                           _html("Kyoto hostels on a budget", _EN).encode()),
        "/hangzhou-gbk": (200, {"Content-Type": html},  # GBK bytes, no charset anywhere
                          _html("杭州旅行预算指南", _ZH).encode("gbk")),
        "/hangzhou-mislabelled": (200, {"Content-Type": f"{html}; charset=iso-8859-1"},
                                  _html("杭州西湖住宿", _ZH, '<meta charset="gb2312">').encode("gb2312")),
        "/report.pdf": (200, {"Content-Type": "application/pdf"},
                        make_pdf(["Kyoto budget travel report 2026.", "Dormitory beds cost 3,000 yen a night."])),
        "/old-link": (301, {"Location": "/moved-once"}, b""),
        "/moved-once": (302, {"Location": "/kyoto-hostels"}, b""),
        "/loop-a": (302, {"Location": "/loop-b"}, b""),
        "/loop-b": (302, {"Location": "/loop-a"}, b""),
        "/huge": (200, {"Content-Type": html}, big),
        "/long": (200, {"Content-Type": html}, long),
        "/photo.png": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + b"\0" * 64),
        "/gone": (404, {"Content-Type": html}, b"<html><body>Not found</body></html>"),
        "/set-cookie": (302, {"Location": "/echo-cookie", "Set-Cookie": "session=abc; Path=/"}, b""),
        "/echo-cookie": (200, {"Content-Type": "text/plain"}, b"echo"),
    }


def _titles() -> dict[str, str]:
    return {"/kyoto-hostels": "Kyoto hostels on a budget", "/hangzhou-gbk": "杭州旅行预算指南",
            "/report.pdf": "Kyoto budget travel report (PDF)", "/old-link": "Budget travel, moved",
            "/gone": "A page that is gone", "/huge": "Enormous archive page"}


class _Server(Loopback):
    """A threaded loopback HTTP server whose handler calls ``answer(method, path, query, headers, body)``."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
                parts = urlsplit(self.path)
                entry = {"method": method, "path": parts.path, "query": parse_qs(parts.query),
                         "headers": dict(self.headers), "body": json.loads(raw) if raw.strip() else None}
                with server.lock:
                    server.log.append(entry)
                status, headers, body = server.answer(entry)
                if status == -1:  # a hang: answer only once the test is done with the server (a sync client's
                    server.closing.wait(60)  # thread, which no timeout can stop, then ends at once)
                    status, headers, body = 504, {}, b""
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        super().__exit__(*exc)

    def answer(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        raise NotImplementedError



class PageServer(_Server):
    """The pages the providers' results point to (see module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.pages = site_pages()

    def answer(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if entry["path"] == "/echo-cookie" and "Cookie" in entry["headers"]:
            return 200, {"Content-Type": "text/plain"}, b"a cookie came back: " + entry["headers"]["Cookie"].encode()
        return self.pages.get(entry["path"], (404, {"Content-Type": "text/html"}, b"<html>no such page</html>"))

    def text_of(self, path: str) -> str:
        """A page's words for snippets (HTML tags dropped; non-HTML pages by title)."""
        status, headers, body = self.pages[path]
        if path.endswith(".pdf") or status != 200:
            return _titles().get(path, path)
        charset = "gbk" if "hangzhou" in path else "utf-8"
        return re.sub(r"<[^>]+>", " ", body[:3000].decode(charset, "replace"))


class ProviderServer(_Server):
    """One provider's search (and extract) API over the ``PageServer``'s pages."""

    def __init__(self, kind: str, pages: PageServer, faults: dict[str, dict[int, Fault]] | None = None,
                 results: list[str] | None = None) -> None:
        super().__init__()
        self.kind, self.pages = kind, pages
        self.faults = faults or {}
        self.counts: dict[str, int] = {}
        self.results = results or ["/kyoto-hostels", "/hangzhou-gbk", "/report.pdf", "/old-link", "/gone"]

    def requests(self, path: str) -> list[dict[str, Any]]:
        """The logged requests to one endpoint path."""
        return [e for e in self.log if e["path"] == path]

    def _hits(self, query: str, n: int) -> list[tuple[str, str, str]]:
        words = set(re.findall(r"\w+", query.lower()))
        scored = [p for p in self.results if words & set(re.findall(r"\w+", self.pages.text_of(p).lower()))]
        return [(self.pages.url + p, _titles().get(p, p), self.pages.text_of(p)) for p in (scored or self.results)][:n]

    def answer(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        path = entry["path"]
        with self.lock:
            self.counts[path] = n = self.counts.get(path, 0) + 1
        fault = self.faults.get(path, {}).get(n)
        if fault == "hang":
            return -1, {}, b""
        if fault == "malformed":
            return 200, {"Content-Type": "application/json"}, b"<html><body>502 Bad Gateway (proxy)</body></html>"
        if isinstance(fault, tuple):
            status, headers = fault
            detail = json.dumps({"detail": {"error": f"planned fault {status}"}}).encode()
            return status, {"Content-Type": "application/json", **headers}, detail
        denied = self._auth(entry)
        if denied is not None:
            return denied
        return getattr(self, f"_{self.kind}")(entry)

    def _auth(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        h = {k.lower(): v for k, v in entry["headers"].items()}
        sent = {"tavily": h.get("authorization"), "exa": h.get("x-api-key"),
                "brave": h.get("x-subscription-token"), "searxng": None}[self.kind]
        want = {"tavily": f"Bearer {KEY}", "exa": KEY, "brave": KEY, "searxng": None}[self.kind]
        if sent != want:
            return 401, {"Content-Type": "application/json"}, json.dumps({"detail": {"error": "bad key"}}).encode()
        return None

    @staticmethod
    def _json(data: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode()

    def _page_text(self, url: str) -> str | None:
        path = urlsplit(url).path
        status, _, _ = self.pages.pages.get(path, (404, {}, b""))
        return self.pages.text_of(path) if status == 200 else None

    def _tavily(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        body = entry["body"] or {}
        rid = str(uuid.uuid4())
        if entry["path"] == "/search":
            hits = self._hits(body["query"], int(body.get("max_results", 5)))
            return self._json({"query": body["query"], "follow_up_questions": None, "answer": None, "images": [],
                               "results": [{"title": t, "url": u, "content": c[:500], "score": 0.9,
                                            "raw_content": None} for u, t, c in hits],
                               "response_time": "0.31", "request_id": rid})
        results, failed = [], []
        for url in body["urls"]:
            text = self._page_text(url)
            if text is None:
                failed.append({"url": url, "error": "Failed to fetch url"})
            else:
                results.append({"url": url, "raw_content": text, "images": []})
        return self._json({"results": results, "failed_results": failed, "response_time": 0.2, "request_id": rid})

    def _exa(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        body = entry["body"] or {}
        rid = uuid.uuid4().hex
        if entry["path"] == "/search":
            hits = self._hits(body["query"], int(body.get("numResults", 10)))
            return self._json({"requestId": rid, "resolvedSearchType": "neural",
                               "results": [{"id": u, "url": u, "title": t, "score": 0.5, "publishedDate": None,
                                            "author": None, "text": c} for u, t, c in hits],
                               "costDollars": {"total": 0.005}})
        results, statuses = [], []
        for url in body["urls"]:
            text = self._page_text(url)
            if text is None:
                statuses.append({"id": url, "status": "error",
                                 "error": {"tag": "CRAWL_NOT_FOUND", "httpStatusCode": 404}})
            else:
                results.append({"id": url, "url": url, "title": _titles().get(urlsplit(url).path, ""), "text": text})
                statuses.append({"id": url, "status": "success"})
        return self._json({"requestId": rid, "results": results, "statuses": statuses})

    def _brave(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        q = entry["query"]
        hits = self._hits(q["q"][0], int(q.get("count", ["20"])[0]))
        results = [{"title": t, "url": u, "description": f"<strong>{t}</strong> {c[:300]}", "type": "search_result",
                    "language": "en", "family_friendly": True} for u, t, c in hits]
        web = {"web": {"type": "search", "results": results, "family_friendly": True}} if results else {}
        return self._json({"type": "search", "query": {"original": q["q"][0]}, **web},
                          {"X-RateLimit-Limit": "1, 15000", "X-RateLimit-Remaining": "0, 14999"})

    def _searxng(self, entry: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        q = entry["query"]
        if q.get("format") != ["json"]:
            return 403, {"Content-Type": "text/html"}, b"<html>403 Forbidden</html>"
        hits = self._hits(q["q"][0], 30)
        return self._json({"query": q["q"][0], "number_of_results": 0, "answers": [], "corrections": [],
                           "infoboxes": [], "suggestions": [], "unresponsive_engines": [],
                           "results": [{"url": u, "title": t, "content": c[:300], "engine": "duckduckgo",
                                        "engines": ["duckduckgo"], "positions": [i + 1], "score": 1.0,
                                        "category": "general"} for i, (u, t, c) in enumerate(hits)]})


SEARCH_PATHS = {"tavily": "/search", "exa": "/search", "brave": "/res/v1/web/search", "searxng": "/search"}
