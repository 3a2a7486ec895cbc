"""Candidate-pool files (JSON Lines) for the pool search backend.

One document per line: ``id``, ``title``, ``text``, optional ``url`` (a ``pool://<id>``
address is used when absent), optional ``lang``, optional evidence ``score`` in [-1, 1]
relative to the card's factor (+1 favours the P endpoint, −1 the Q endpoint; the Y of
the CESS paper) and optional outcome-model prediction ``m`` fixed before any search.
Errors name the file, the line and the field. The file's sha256 is its identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from draligned.cess.pool import CandidatePool, PoolDocument
from draligned.hashing import sha256_bytes
from draligned.records import Record
from draligned.tools.corpus import CorpusDocument
from draligned.tools.jsonl import parse_documents, read_file


class PoolFileError(ValueError):
    """An unreadable pool file or a bad line (message: ``file:line: field 'x': problem``)."""


class PoolFileDocument(Record, frozen=True):
    """One line of a pool file."""

    id: str = Field(min_length=1)
    """Stable document id, unique within the pool (logged as the chosen id)."""
    title: str = Field(min_length=1)
    """Title shown in the search result; used for query relevance."""
    text: str = Field(min_length=1)
    """Page body returned by ``read``; used for query relevance."""
    url: str | None = None
    """Address the agent reads the document by; ``pool://<id>`` when absent."""
    lang: Literal["en", "zh"] = "en"
    """Language of the document."""
    score: float | None = Field(default=None, ge=-1.0, le=1.0)
    """Evidence score Y: +1 favours the card's P endpoint, −1 the Q endpoint, 0 neither."""
    m: float | None = Field(default=None, ge=-1.0, le=1.0)
    """Outcome-model prediction of the score, fixed before any search (DR/CESS use m ≡ 0 without it)."""

    @property
    def address(self) -> str:
        """The URL the agent sees and reads."""
        return self.url or f"pool://{self.id}"

    def page(self) -> CorpusDocument:
        """The document as a readable page."""
        return CorpusDocument(id=self.id, url=self.address, title=self.title, text=self.text, lang=self.lang)


@dataclass(frozen=True)
class LoadedPool:
    """A validated pool file: its documents in file order and its identity."""

    path: Path
    sha256: str
    documents: tuple[PoolFileDocument, ...]

    @property
    def candidates(self) -> CandidatePool:
        """The pool as the CESS controller sees it (ids, titles, texts, ranking scores)."""
        return CandidatePool(documents=[
            PoolDocument(id=d.id, title=d.title, text=d.text, score=d.score) for d in self.documents])

    @property
    def scores(self) -> list[float | None]:
        """Y per document in pool order (None where unscored)."""
        return [d.score for d in self.documents]

    @property
    def predictions(self) -> list[float] | None:
        """m per document when every document has one, else None (m ≡ 0)."""
        m = [d.m for d in self.documents]
        return None if any(v is None for v in m) else [float(v) for v in m if v is not None]


def parse_pool(raw: bytes, path: Path) -> LoadedPool:
    """Validate pool-file bytes; the first bad line raises :class:`PoolFileError`."""
    docs = parse_documents(raw, path, PoolFileDocument, PoolFileError, "pool",
                           lambda d: [("id", d.id, d.id), ("url", d.address, d.address)])
    return LoadedPool(path=path, sha256=sha256_bytes(raw), documents=tuple(docs))


def load_pool(path: str | Path) -> LoadedPool:
    """Read and validate a pool file."""
    path = Path(path)
    return parse_pool(read_file(path, PoolFileError, "pool"), path)
