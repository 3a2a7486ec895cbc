"""Frozen offline web corpus: JSONL loading, a CJK-aware tokenizer and BM25 search.

Every run of an agent searches the same bytes (identified by ``Corpus.sha256``), so
the only thing that differs between counterfactual arms is the prompt, never the web.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from draligned.hashing import sha256_bytes
from draligned.lru import LRU
from draligned.records import Record
from draligned.tools.bm25 import BM25
from draligned.tools.jsonl import parse_documents, read_file

__all__ = [
    "Corpus",
    "CorpusDocument",
    "CorpusError",
    "SearchHit",
    "STOPWORDS",
    "load_corpus",
    "normalize_page_text",
    "snippet",
    "tokenize",
]


class CorpusError(ValueError):
    """A corpus file is unreadable or has a bad line (message names file, line and field)."""


class CorpusDocument(Record, frozen=True):
    """One synthetic web page of the corpus."""

    id: str = Field(min_length=1)
    """Stable document id, unique within the corpus (e.g. ``d001``)."""
    url: str = Field(min_length=1)
    """Page address, unique within the corpus (trailing slash ignored for uniqueness)."""
    title: str = Field(min_length=1)
    """Page title, indexed together with the text."""
    text: str = Field(min_length=1)
    """Page body; paragraphs separated by blank lines."""
    lang: Literal["en", "zh"]
    """Language of the page."""


class SearchHit(Record, frozen=True):
    """One ranked result of ``Corpus.search``."""

    doc_id: str
    """Id of the matching document."""
    title: str
    """Title of the matching document."""
    url: str
    """URL of the matching document (use with ``Corpus.page``)."""
    text: str
    """Full, unnormalised text of the document; callers cut snippets themselves."""
    score: float
    """BM25 score (> 0); only comparable within one query."""


# --------------------------------------------------------------------------- tokenizer

STOPWORDS: frozenset[str] = frozenset(
    """
    a about after all also am an and any are as at be been being both but by can could
    did do does each for from had has have he her here his how i if in into is it its
    just me my no not of on or our over s she should so such t than that the their them
    then there these they this those to up us was we were what when where which who
    why will with would you your
    """.split()
)
"""Small English stopword list: function words that only add noise to BM25 scores."""

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+)")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def tokenize(text: str) -> list[str]:
    """Split text into BM25 terms, for English and Chinese alike.

    Steps: NFKC-normalise (full-width digits and commas become ASCII) and casefold;
    drop thousands separators so "6,000" and "6000" are the same term; take runs of
    letters/digits as words (underscore and punctuation separate) and drop ``STOPWORDS``;
    for each run of CJK characters emit overlapping character bigrams ("杭州沙龙" ->
    "杭州", "州沙", "沙龙"), or the character itself for a one-character run. Bigrams
    make Chinese searchable without a word segmenter (no dictionary, fully
    deterministic) at the cost of some noise bigrams that BM25's idf down-weights.
    No stemming: "hostel" and "hostels" are different terms.
    """
    return list(_terms(text) if len(text) <= TOKENIZED_CHARS else _split_terms(text))


TOKENIZED, TOKENIZED_CHARS = 256, 4096
"""Texts whose terms ``tokenize`` remembers, and the longest one it does: the simulators and the corpus search
tokenize the same search results and messages at every step of a run (the demo's 14,000 calls are texts under
2 KB, 96% of them hits with 256 kept). The bound is about 8 MB: a 4 KB English text has about 26 KB of terms."""


def _split_terms(text: str) -> tuple[str, ...]:
    """The terms of ``text`` (see :func:`tokenize`), as a tuple: a remembered value is never changed."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    norm = _THOUSANDS_RE.sub("", norm)
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(norm):
        run = match.group("cjk")
        if run is not None:
            if len(run) == 1:
                tokens.append(run)
            else:
                tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            word = match.group("word")
            if word not in STOPWORDS:
                tokens.append(word)
    return tuple(tokens)


_terms = lru_cache(maxsize=TOKENIZED)(_split_terms)


# --------------------------------------------------------------------------- page text

_PARA_SPLIT_RE = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_WS_RE = re.compile(r"\s+")


def _collapse(text: str) -> str:
    """Collapse every whitespace run (newlines included) to one space and strip."""
    return _WS_RE.sub(" ", text).strip()


def normalize_page_text(doc: CorpusDocument) -> str:
    """What ``fetch`` shows: title, blank line, text with whitespace runs collapsed.

    Paragraph breaks (blank lines) survive as exactly one "\\n\\n"; all other whitespace
    runs become one space. No length cap here (the executor applies it).
    """
    paragraphs = [_collapse(p) for p in _PARA_SPLIT_RE.split(doc.text.strip())]
    body = "\n\n".join(p for p in paragraphs if p)
    return f"{_collapse(doc.title)}\n\n{body}"


def snippet(text: str, n: int) -> str:
    """First ``n`` characters of ``text`` after collapsing all whitespace to single spaces.

    Python slices by code point, so the cut never splits a character; no ellipsis is added.
    """
    if n < 0:
        raise ValueError(f"snippet length must be >= 0, got {n}")
    # Collapsing never lengthens text, so a prefix that still collapses to more than n characters gives the
    # same first n (only its last character may be a cut run or word): every search result costs a snippet.
    head = _collapsed_head(text[:2 * n + 64])
    if len(head) > n:
        return head[:n]
    return _collapse(text)[:n]


@lru_cache(maxsize=1024)
def _collapsed_head(prefix: str) -> str:
    """A text's prefix with its whitespace runs collapsed and leading ones dropped, remembered for the last 1,024
    prefixes (each at most ``2 n + 64`` characters): a study's searches return the same pages again and again,
    and the collapse was a tool call's largest cost."""
    return _WS_RE.sub(" ", prefix).lstrip()


# --------------------------------------------------------------------------- corpus


def _url_key(url: str) -> str:
    """Lookup key for a URL: exact string except that a trailing slash is ignored."""
    return url.rstrip("/") or url


class Corpus:
    """An immutable document collection with a BM25 index built once at construction."""

    def __init__(self, documents: Sequence[CorpusDocument], *, path: Path, sha256: str) -> None:
        """Index ``documents`` (title + text); ``path``/``sha256`` identify the source file."""
        if not documents:
            raise CorpusError(f"{path}: corpus has no documents")
        self.path: Path = path
        """File the corpus was loaded from."""
        self.sha256: str = sha256
        """Hex sha256 of the corpus file bytes (the corpus identity recorded in archives)."""
        self._docs: tuple[CorpusDocument, ...] = tuple(documents)
        self._by_id = {d.id: d for d in self._docs}
        self._by_url = {_url_key(d.url): d for d in self._docs}
        if len(self._by_id) != len(self._docs) or len(self._by_url) != len(self._docs):
            raise CorpusError(f"{path}: document ids and urls must be unique")

        doc_tokens = [tokenize(d.title) + tokenize(d.text) for d in self._docs]
        # Own vocabulary with a sorted (hence run-independent) term order.
        self._vocab: dict[str, int] = {
            tok: i for i, tok in enumerate(sorted({t for toks in doc_tokens for t in toks}))
        }
        self._bm25 = BM25([[self._vocab[t] for t in toks] for toks in doc_tokens], len(self._vocab))

    def __len__(self) -> int:
        """Number of documents."""
        return len(self._docs)

    def __iter__(self) -> Iterator[CorpusDocument]:
        """Documents in file order."""
        return iter(self._docs)

    @property
    def documents(self) -> tuple[CorpusDocument, ...]:
        """All documents in file order."""
        return self._docs

    def get(self, doc_id: str) -> CorpusDocument | None:
        """Document by id, or None."""
        return self._by_id.get(doc_id)

    def page(self, url: str) -> CorpusDocument | None:
        """Document by exact URL (a trailing-slash difference is tolerated), or None."""
        return self._by_url.get(_url_key(url.strip()))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (float32, file order; zeros if no term matches)."""
        terms = list(dict.fromkeys(tokenize(query)))  # dedupe, keep first-seen order
        ids = [self._vocab[t] for t in terms if t in self._vocab]
        return self._bm25.scores(ids)

    def search(self, query: str, k: int) -> list[SearchHit]:
        """Top ``k`` documents with a positive BM25 score, best first.

        Query terms are deduplicated. Ties are broken by document position in the file,
        so the same query always yields the same list. Empty or unsearchable queries
        (only stopwords/punctuation, or no term in the vocabulary) return [].
        """
        if k <= 0:
            return []
        scores = self.scores(query)
        order = np.lexsort((np.arange(len(scores)), -scores))
        hits: list[SearchHit] = []
        for i in order[:k]:
            score = float(scores[i])
            if score <= 0.0:
                break
            d = self._docs[int(i)]
            hits.append(SearchHit(doc_id=d.id, title=d.title, url=d.url, text=d.text, score=score))
        return hits


LOADED, LOADED_BYTES = 4, 8 << 20
"""Corpora ``load_corpus`` keeps, by the sha256 of their bytes, and the largest file it keeps: a process
running many studies over one corpus (the tests, a study's stages) tokenizes and indexes it once."""

_loaded: LRU[str, Corpus] = LRU(LOADED)  # studies may run in several threads of one process


def load_corpus(path: str | Path) -> Corpus:
    """Load a JSONL corpus (one ``CorpusDocument`` object per line; blank lines skipped).

    Raises ``CorpusError`` whose message starts with ``<file>:<line>:`` and names the
    offending field for invalid JSON, non-object lines, missing/invalid/extra fields and
    duplicate ids or urls. The file is read and hashed every time; bytes loaded before (by any path; the
    last ``LOADED`` files of at most ``LOADED_BYTES``) give the corpus built from them then, so an edited
    file is never served stale.
    """
    path = Path(path)
    raw = read_file(path, CorpusError, "corpus")
    sha256 = sha256_bytes(raw)
    if (known := _loaded.get(sha256)) is not None:
        if known.path == path:
            return known
        same = copy.copy(known)  # the documents and index are shared (nothing changes them), the path is its own
        same.path = path
        return same
    docs = parse_documents(raw, path, CorpusDocument, CorpusError, "corpus",
                           lambda d: [("id", d.id, d.id), ("url", _url_key(d.url), d.url)])
    corpus = Corpus(docs, path=path, sha256=sha256)
    if len(raw) <= LOADED_BYTES:
        _loaded.put(sha256, corpus)
    return corpus
