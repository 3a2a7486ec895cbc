"""The ``http`` reader: ``read(url)`` fetches the page itself, within fixed bounds.

http(s) only; every hop of a redirect chain is checked again (at most ``max_redirects``, no loops);
a host that resolves to a private, loopback, link-local, multicast or reserved address is refused
(``blocked_address``) unless ``allow_private_addresses`` lists it; the body is read up to
``max_page_bytes`` (a larger page is ``too_large``: the declared length is checked first, then the
bytes as they arrive); no cookies are kept or sent; one fixed user agent; the study's timeout per
attempt. The address check resolves the host before httpx connects (httpx resolves it again, so a
name whose address changes in between is not caught: the bound is against configuration mistakes
and ordinary links, not a hostile resolver).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from http.cookiejar import CookieJar, DefaultCookiePolicy
from urllib.parse import urljoin, urlsplit

import httpx

from draligned.tls import tls_context
from draligned.tools.errors import ToolError
from draligned.tools.search_spec import SearchSpec
from draligned.tools.web.wire import USER_AGENT, Exchange, FetchFailed, transport_failure, utcnow

REDIRECTS = (301, 302, 303, 307, 308)
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
                or ip.is_unspecified)


class HttpReader:
    """Fetches pages for ``read(url)`` (see module docstring)."""

    def __init__(self, spec: SearchSpec) -> None:
        self.max_bytes = spec.max_page_bytes
        self.max_redirects = spec.max_redirects
        self.allowed: list[IPNetwork] = [ipaddress.ip_network(a, strict=False) for a in spec.allow_private_addresses]
        no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        self._http = httpx.AsyncClient(
            timeout=spec.retry.timeout_s, follow_redirects=False, cookies=no_cookies, trust_env=False,
            verify=tls_context(trust_env=False),
            headers={"User-Agent": USER_AGENT,
                     "Accept": "text/html,application/xhtml+xml,application/pdf;q=0.9,text/plain;q=0.8,*/*;q=0.1"})

    async def check_address(self, url: str) -> None:
        """Refuse a URL that is not http(s) or whose host resolves to an address the study does not allow."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchFailed(ToolError.BAD_URL, f"{url!r} is not an absolute http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise FetchFailed(ToolError.CONNECTION_ERROR, f"{parts.hostname} cannot be resolved ({exc})") from exc
        for info in infos:
            ip = ipaddress.ip_address(info[4][0])
            if not _public(ip) and not any(ip in net for net in self.allowed):
                raise FetchFailed(ToolError.BLOCKED_ADDRESS, f"{url} resolves to {ip}, a private or loopback "
                                                             f"address the study does not allow")

    async def fetch(self, url: str) -> Exchange:
        """One attempt: follow the checked redirect chain and read the capped body."""
        seen: list[str] = []
        for _ in range(self.max_redirects + 1):
            await self.check_address(url)
            seen.append(url)
            try:
                async with self._http.stream("GET", url) as response:
                    if response.status_code in REDIRECTS and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        if url in seen:
                            raise FetchFailed(ToolError.TOO_MANY_REDIRECTS, f"{seen[0]} redirects in a loop")
                        continue
                    return await self._read(url, response)
            except httpx.HTTPError as exc:
                failure = transport_failure(exc, url)
                if failure is None:
                    raise FetchFailed(ToolError.HTTP_ERROR, f"{url}: {type(exc).__name__}: {exc}") from exc
                raise failure from exc
        raise FetchFailed(ToolError.TOO_MANY_REDIRECTS, f"{seen[0]} redirects more than {self.max_redirects} times")

    async def _read(self, url: str, response: httpx.Response) -> Exchange:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise FetchFailed(ToolError.TOO_LARGE, f"{url} is {int(length):,} bytes (the cap is {self.max_bytes:,})")
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchFailed(ToolError.TOO_LARGE, f"{url} is larger than the cap of {self.max_bytes:,} bytes")
            chunks.append(chunk)
        ex = Exchange(url, response.status_code, dict(response.headers), b"".join(chunks), utcnow())
        return _checked_status(ex)

    async def aclose(self) -> None:
        await self._http.aclose()


def _checked_status(ex: Exchange) -> Exchange:
    """The answer, or the named failure of its error status (429 and 5xx retried)."""
    s = ex.status
    if s < 400:
        return ex
    if s in (404, 410):
        raise FetchFailed(ToolError.HTTP_404, f"{ex.url} does not exist (HTTP {s})", ex)
    if s == 429:
        raise FetchFailed(ToolError.RATE_LIMITED, f"{ex.url} is rate limiting (HTTP 429)", ex, retryable=True)
    raise FetchFailed(ToolError.HTTP_ERROR, f"{ex.url} answered HTTP {s}", ex, retryable=s >= 500 or s == 408)
