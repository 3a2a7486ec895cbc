"""Candidate-pool files (JSON Lines) for the pool search backend.

One document per line: ``id``, ``title``, ``text``, optional ``url`` (a ``pool://<id>``
address is used when absent), optional ``lang``, optional evidence ``score`` in [-1, 1]
relative to the card's factor (+1 favours the P endpoint, −1 the Q endpoint; the Y of
the CESS paper) and optional outcome-model prediction ``m`` fixed before any search.
Errors name the file, the line and the field. The file's sha256 is its identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from draligned.cess.pool import CandidatePool, PoolDocument
from draligned.hashing import sha256_bytes
from draligned.tools.corpus import CorpusDocument


class PoolFileError(ValueError):
    """An unreadable pool file or a bad line (message: ``file:line: field 'x': problem``)."""


class PoolFileDocument(BaseModel):
    """One line of a pool file."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

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
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PoolFileError(f"{path}: not valid UTF-8: {exc}") from exc
    docs: list[PoolFileDocument] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PoolFileError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(obj, dict):
            raise PoolFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        try:
            doc = PoolFileDocument.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "<document>"
            raise PoolFileError(f"{where}: field '{field}': {err['msg']}") from exc
        for key, value in (("id", doc.id), ("url", doc.address)):
            seen = first_line.get(f"{key}:{value}")
            if seen is not None:
                raise PoolFileError(f"{where}: field '{key}': duplicate {key} {value!r} (first on line {seen})")
            first_line[f"{key}:{value}"] = lineno
        docs.append(doc)
    if not docs:
        raise PoolFileError(f"{path}: pool has no documents")
    return LoadedPool(path=path, sha256=sha256_bytes(raw), documents=tuple(docs))


def load_pool(path: str | Path) -> LoadedPool:
    """Read and validate a pool file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PoolFileError(f"{path}: cannot read pool file: {exc}") from exc
    return parse_pool(raw, path)
