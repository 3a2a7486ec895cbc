"""The acquisition store: one web per study, shared by every run and arm (content-addressed, write-once).

An entry holds what one search or read returned (the hits, the page text or a named failure), the
request as sent, the provider's request id, the fetch time and the sha256 of the raw body, which is
kept beside it. The key (:func:`store_key`) is the sha256 of the provider, the endpoint, the request
with its query or URL normalised (the declared options included) and the reader: never the arm, the
run or the seed, so the P run and the Q run that ask the same thing receive the same entry. Entries
are written once; the first writer wins, and a later writer (another process) takes the entry it
finds. Layout: ``ROOT/entries/ab/<key>.json`` and ``ROOT/bodies/ab/<sha256>``.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from draligned.archive.store import ArchiveError, write_once
from draligned.hashing import canonical_json, sha256_bytes, sha256_json
from draligned.records import Record
from draligned.tools.corpus import CorpusDocument, SearchHit

StoreMode = Literal["off", "read-write", "read-only"]


def normalise_query(query: str) -> str:
    """A query as keyed: NFC, whitespace runs collapsed, ends stripped (case kept: providers may use it)."""
    return " ".join(unicodedata.normalize("NFC", query).split())


def _ascii_host(host: str) -> str:
    """An internationalised host in the ASCII form httpx connects to (``bücher.example`` ->
    ``xn--bcher-kva.example``), so both spellings share one entry; an invalid one is kept as given."""
    if host.isascii():
        return host
    import idna

    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        return host


def normalise_url(url: str) -> str:
    """A URL as keyed: scheme and host lower-cased (an IDN host in its ASCII form), default port and fragment
    dropped, empty path ``/``."""
    parts = urlsplit(url.strip())
    host = _ascii_host((parts.hostname or "").lower())
    host = f"[{host}]" if ":" in host else host  # an IPv6 literal keeps its brackets
    if parts.port and (parts.scheme.lower(), parts.port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{parts.port}"
    if parts.username:
        host = f"{parts.username}{':' + parts.password if parts.password else ''}@{host}"
    return urlunsplit((parts.scheme.lower(), host, parts.path or "/", parts.query, ""))


def store_key(provider: str, endpoint: str, request: dict[str, Any], reader: str) -> str:
    """The entry key (see module docstring); ``request`` holds the normalised query or URL and the options."""
    return sha256_json({"provider": provider, "endpoint": endpoint, "request": request, "reader": reader})


class StoreEntry(Record, frozen=True):
    """What one search or read returned, as every later identical request receives it."""

    key: str
    """The entry's key."""
    provider: str
    """Who answered: the backend name, or ``http`` for the http reader."""
    endpoint: str
    """The endpoint URL called (the page URL for the http reader)."""
    request: dict[str, Any]
    """The request fields as keyed (normalised query or URL, result count, declared options)."""
    reader: str
    """The study's reader (``http``, ``tavily`` or ``exa``)."""
    fetched_at: str
    """UTC ISO time of the answer."""
    request_id: str | None = None
    """The provider's request id, when it sent one."""
    status: int | None = None
    """HTTP status of the answer; None when none was received."""
    body_sha256: str | None = None
    """sha256 of the raw body (in ``bodies/``); None when no body was received."""
    hits: list[SearchHit] | None = None
    """Search results, best first (a search that succeeded)."""
    page: CorpusDocument | None = None
    """The page as text (a read that succeeded)."""
    error: str | None = None
    """The named failure (a tool-error code) when it failed."""
    message: str = ""
    """What the agent reads when it failed."""


class AcquisitionStore:
    """A store directory used in one mode (``off`` is never opened)."""

    def __init__(self, root: str | Path, mode: StoreMode) -> None:
        self.root = Path(root)
        self.mode = mode

    def _entry_path(self, key: str) -> Path:
        return self.root / "entries" / key[:2] / f"{key}.json"

    def _body_path(self, sha: str) -> Path:
        return self.root / "bodies" / sha[:2] / sha

    def get(self, key: str) -> StoreEntry | None:
        """The entry under ``key``, or None."""
        path = self._entry_path(key)
        return StoreEntry.model_validate_json(path.read_bytes()) if path.exists() else None

    def put(self, entry: StoreEntry, body: bytes | None) -> StoreEntry:
        """Store an entry and its body; the first writer wins (the entry already there is returned)."""
        if body is not None:
            write_once(self._body_path(sha256_bytes(body)), body)
        try:
            write_once(self._entry_path(entry.key), canonical_json(entry.model_dump(mode="json")))
        except ArchiveError:
            kept = self.get(entry.key)
            assert kept is not None  # write_once refused because an entry exists
            return kept
        return entry

    def body(self, sha: str | None) -> bytes | None:
        """A stored raw body, or None (also for an entry that has none: a refusal before any request)."""
        if not sha:
            return None
        path = self._body_path(sha)
        return path.read_bytes() if path.exists() else None
