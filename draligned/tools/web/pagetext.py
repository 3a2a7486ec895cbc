"""A fetched page as text: charset decoding, HTML main text (trafilatura), PDF text (pypdf).

Charsets: a byte-order mark wins; then a multi-byte charset the HTTP header declares, if it decodes
cleanly; then UTF-8 if the bytes are valid UTF-8 (UTF-8 bytes often decode cleanly, into nonsense, as
GB18030, so a ``<meta>`` left over from a template must not win over them); then a multi-byte
``<meta>`` charset that decodes cleanly; otherwise the declared charset is
checked against a detector (charset-normalizer), because Chinese pages are often served as GBK or
GB2312 with no header, or with a wrong ``ISO-8859-1`` one: a detected CJK charset then wins, and so
does GB18030 when it decodes the bytes into mostly CJK text (a detector guesses badly on a few
bytes). Otherwise the declared charset, or windows-1252 (HTML's default) when none is declared. GBK and
GB2312 are decoded as GB18030 (their superset), so characters outside GB2312 survive.
"""

from __future__ import annotations

import codecs
import io
import re
from typing import Literal

from draligned.tools.corpus import CorpusDocument
from draligned.tools.errors import ToolError
from draligned.tools.web.provider import doc_id
from draligned.tools.web.wire import Exchange, FetchFailed

_META_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_TITLE_RE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SINGLE_BYTE = {"ascii", "latin_1", "iso8859_1", "cp1252", "iso8859_15"}
_CJK_CODECS = {"gb18030", "gbk", "gb2312", "big5", "big5hkscs", "shift_jis", "euc_jp", "euc_kr", "cp932",
               "cp949", "cp950", "hz", "iso2022_jp"}
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _codec(name: str | None) -> str | None:
    """Python's codec name for a declared charset (GBK and GB2312 widened to GB18030), or None if unknown."""
    if not name:
        return None
    try:
        codec = codecs.lookup(name.strip().strip("\"'")).name.replace("-", "_")
    except LookupError:
        return None
    return "gb18030" if codec in ("gbk", "gb2312", "euc_cn") else codec


def _strict(body: bytes, codec: str | None) -> str | None:
    if codec is None:
        return None
    try:
        return body.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _detected(body: bytes) -> str | None:
    from charset_normalizer import from_bytes

    best = from_bytes(body[:200_000]).best()
    return _codec(best.encoding) if best is not None else None


def decode(body: bytes, header_charset: str | None) -> str:
    """The page's text under the rules in the module docstring (never raises; undecodable bytes replaced)."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body.decode(codec, "replace")
    meta = _META_RE.search(body[:4096])
    header, in_page = _codec(header_charset), _codec(meta.group(1).decode("ascii")) if meta else None
    declared = [c for c in (header, in_page) if c]
    if header is not None and header not in _SINGLE_BYTE and (text := _strict(body, header)) is not None:
        return text
    if (text := _strict(body, "utf-8")) is not None:  # stronger evidence than a <meta> copied with a template
        return text
    if in_page is not None and in_page not in _SINGLE_BYTE and (text := _strict(body, in_page)) is not None:
        return text
    detected = _detected(body)
    if detected in _CJK_CODECS and (text := _strict(body, detected)) is not None:
        return text
    if (text := _strict(body, "gb18030")) is not None and _mostly_cjk(text):  # short pages defeat detection
        return text
    return body.decode(declared[0] if declared else "cp1252", "replace")  # HTML's default when undeclared


def _mostly_cjk(text: str) -> bool:
    """True when at least 60% of the non-ASCII characters are CJK (Western text mis-read as GB18030 is not)."""
    wide = [c for c in text if ord(c) > 127]
    return bool(wide) and len(_CJK_RE.findall(text)) >= 0.6 * len(wide)


def _lang(text: str) -> Literal["en", "zh"]:
    """``zh`` when CJK characters are a tenth of the first 2,000 characters, else ``en`` (corpus languages)."""
    sample = text[:2000]
    return "zh" if len(_CJK_RE.findall(sample)) * 10 >= max(len(sample.strip()), 1) else "en"


def text_document(url: str, title: object, text: str) -> CorpusDocument:
    """A page as a corpus document (paragraphs on blank lines; the title falls back to the URL)."""
    body = re.sub(r"\n\s*", "\n\n", text.strip())
    if not body:
        raise FetchFailed(ToolError.NO_TEXT, f"{url} has no text")
    name = title.strip() if isinstance(title, str) and title.strip() else url
    return CorpusDocument(id=doc_id(url), url=url, title=name, text=body, lang=_lang(body))


def html_document(url: str, html: str) -> CorpusDocument:
    """The main text of an HTML page (trafilatura; its plain text when no main text is found)."""
    import trafilatura

    text = trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=True,
                               deduplicate=False) or trafilatura.html2txt(html)
    # Only the title is kept: trafilatura finds it before and apart from the date, whose search ``extensive``
    # widens to regex scans of the whole page (1.5 s of 1.7 s for a 5 MB page).
    meta = trafilatura.extract_metadata(html, extensive=False)
    title = meta.title if meta is not None and meta.title else None
    if title is None and (m := _TITLE_RE.search(html)):
        title = re.sub(r"\s+", " ", m.group(1))
    return text_document(url, title, text or "")


def pdf_document(url: str, body: bytes) -> CorpusDocument:
    """The text of a PDF, page after page (pypdf); an unreadable PDF is ``no_text``."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(body))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata is not None else None
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise FetchFailed(ToolError.NO_TEXT, f"{url} is a PDF that cannot be read ({type(exc).__name__})") from exc
    return text_document(url, title, "\n".join(p.strip() for p in pages if p.strip()))


def _media_type(headers: dict[str, str]) -> tuple[str, str | None]:
    """(media type, charset parameter) of the Content-Type header."""
    value = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    parts = [p.strip() for p in value.split(";")]
    charset = next((p.split("=", 1)[1] for p in parts[1:] if p.lower().startswith("charset=")), None)
    return parts[0].lower(), charset


def page_document(ex: Exchange) -> CorpusDocument:
    """The page an http answer holds: HTML, XHTML, plain text or PDF (by type, or sniffed when the type is
    missing or generic); anything else is ``not_html``."""
    media, charset = _media_type(ex.headers)
    head = ex.body[:1024].lstrip().lower()
    if media == "application/pdf" or ex.body.startswith(b"%PDF-"):
        return pdf_document(ex.url, ex.body)
    sniff_html = head.startswith((b"<!doctype html", b"<html")) or b"<body" in head
    if media in ("text/html", "application/xhtml+xml") or (media in ("", "application/octet-stream")
                                                            and sniff_html):
        return html_document(ex.url, decode(ex.body, charset))
    if media.startswith("text/") or media == "":
        return text_document(ex.url, None, decode(ex.body, charset))
    raise FetchFailed(ToolError.NOT_HTML, f"{ex.url} is {media}, not a page with text (HTML, text or PDF)")
