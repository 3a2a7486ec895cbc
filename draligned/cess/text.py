"""Tokens and TF-IDF vectors in plain numpy.

Used twice: query relevance inside the pool controller, and pre-search text
features for the ridge outcome model. Vectors are sublinear-TF × smoothed IDF,
L2-normalised, so a dot product is a cosine similarity.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    (
        "a an and are as at be been but by can could do does for from had has have he her his how i if in "
        "into is it its may more most much must no nor not of on or our should so such than that the "
        "their them then there these they this those to too us was we were what when where which while "
        "who why will with would you your"
    ).split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens without common English stop words."""
    return [tok for tok in _TOKEN.findall(text.lower()) if tok not in _STOPWORDS]


@dataclass(frozen=True)
class TfidfIndex:
    """A fitted vocabulary with inverse document frequencies."""

    vocabulary: dict[str, int]
    idf: np.ndarray
    tokenizer: Callable[[str], list[str]] = tokenize

    @classmethod
    def fit(
        cls,
        texts: Sequence[str],
        max_features: int | None = None,
        tokenizer: Callable[[str], list[str]] = tokenize,
    ) -> TfidfIndex:
        """Fit on ``texts``; keep the ``max_features`` most frequent terms (ties by term) if given."""
        doc_freq: Counter[str] = Counter()
        for text in texts:
            doc_freq.update(set(tokenizer(text)))
        terms = sorted(doc_freq, key=lambda term: (-doc_freq[term], term))
        if max_features is not None:
            terms = terms[:max_features]
        terms.sort()
        n = len(texts)
        idf = np.array([np.log((1 + n) / (1 + doc_freq[t])) + 1.0 for t in terms])
        return cls(vocabulary={t: i for i, t in enumerate(terms)}, idf=idf, tokenizer=tokenizer)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Rows of L2-normalised TF-IDF vectors (zero rows for texts without known terms)."""
        out = np.zeros((len(texts), len(self.vocabulary)))
        for row, text in enumerate(texts):
            counts = Counter(t for t in self.tokenizer(text) if t in self.vocabulary)
            if counts:
                cols = np.fromiter((self.vocabulary[t] for t in counts), dtype=int, count=len(counts))
                tf = np.fromiter(counts.values(), dtype=float, count=len(counts))
                out[row, cols] = (1.0 + np.log(tf)) * self.idf[cols]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=out, where=norms > 0)
