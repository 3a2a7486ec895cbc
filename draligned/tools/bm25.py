"""BM25 (Lucene variant) over pre-tokenized documents, in numpy alone.

The scores are bit for bit those of ``bm25s`` 0.2-0.3 (``BM25(method="lucene")``, float32, k1 = 1.5,
b = 0.75), which built the corpus index before: the same idf (``math.log`` per term, stored as float32), the
same term-frequency part in float64 stored as float32, the same float32 sums in query-term order
(tests/test_corpus.py compares both on the demo corpus and on random ones). What bm25s added is a
``scipy.sparse`` import: about 0.2 CPU-s in every process that opened a corpus (each study's worker too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

K1, B = 1.5, 0.75
"""Lucene's (and bm25s's) default saturation and length-normalisation parameters."""


class BM25:
    """Per-term postings (documents holding the term, and the term's BM25 weight in each)."""

    def __init__(self, doc_terms: Sequence[Sequence[int]], n_terms: int) -> None:
        """Index documents given as term ids in ``range(n_terms)`` (repeats count as term frequency)."""
        self.n_docs = len(doc_terms)
        lengths = np.array([len(t) for t in doc_terms], dtype=np.int64)
        avg_len = lengths.mean()  # float64, as bm25s computes it
        terms = np.fromiter((t for toks in doc_terms for t in toks), dtype=np.int64, count=int(lengths.sum()))
        docs = np.repeat(np.arange(self.n_docs, dtype=np.int64), lengths)
        # one entry per (term, document) pair, sorted by term then document, with its term frequency
        pairs, tf = np.unique((terms << 32) | docs, return_counts=True)
        term_of, self._docs = pairs >> 32, (pairs & 0xFFFFFFFF).astype(np.int32)
        df = np.bincount(term_of, minlength=n_terms)
        self._start = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(df, out=self._start[1:])
        n = self.n_docs
        idf = np.array([math.log(1 + (n - d + 0.5) / (d + 0.5)) if d else 0.0 for d in df.tolist()],
                       dtype=np.float32)
        tf32 = tf.astype(np.float32)
        tfc = tf32 / (K1 * ((1 - B) + B * lengths[self._docs] / avg_len) + tf32)
        self._weights = (idf[term_of] * tfc).astype(np.float32)

    def scores(self, term_ids: Sequence[int]) -> np.ndarray:
        """Every document's score (float32, document order) for the query terms ``term_ids`` (each counted
        once per occurrence, summed in the given order)."""
        scores = np.zeros(self.n_docs, dtype=np.float32)
        for t in term_ids:
            lo, hi = self._start[t], self._start[t + 1]
            scores[self._docs[lo:hi]] += self._weights[lo:hi]  # a term's documents are distinct
        return scores
