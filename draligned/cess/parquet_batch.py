"""Check one Arrow record batch of trajectories (from Parquet) with numpy, and gather its columns.

The nested columns arrive as flat child arrays plus offsets (numpy views, no Python objects per
number): every rule of :func:`draligned.cess.trajectory.check_record` that the estimators rely on is
checked over whole columns, and a row that breaks one (or comes close: a probability sum within
rounding of the tolerance) is only *suspect*; :mod:`draligned.cess.parquet` has the full validator
decide and name the field. The checks are stricter than the validator, never looser: nulls, NaN
and infinities are suspect wherever a number is required.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from draligned.cess.columns import first_positive_round
from draligned.cess.trajectory_rules import PROB_SUM_MARGIN, PROB_SUM_TOLERANCE, Y_TOLERANCE

try:
    from draligned.cess import _kernels as compiled_sums
except ImportError:  # installed without a C++ compiler (the extension is optional): numpy's reduceat
    compiled_sums = None  # type: ignore[assignment]

_RANKINGS = pa.array(["original", "pro", "anti"])
Checked = tuple[np.ndarray, dict[str, np.ndarray], list[str], list[str]]
"""Per row whether it is suspect, the column arrays, the trajectory ids and the task ids (:func:`check_batch`)."""


def unlist(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Offsets from 0 (len + 1) and the child values they index (null lists are flagged by the caller)."""
    off = np.asarray(arr.offsets, np.int64)
    return off - off[0], arr.values.slice(int(off[0]), int(off[-1] - off[0]))


def _floats(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Values as float64 (NaN for null) and which are not null."""
    values = np.asarray(arr.to_numpy(zero_copy_only=False), float)
    if arr.null_count == 0:
        return values, np.ones(len(values), bool)
    return values, ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)


def flag(arr: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy, null counted as True (suspect)."""
    return np.asarray((pc.fill_null(arr, True) if arr.null_count else arr).to_numpy(zero_copy_only=False), bool)


def nulls(arr: pa.Array) -> np.ndarray:
    """Per element, whether it is NULL."""
    if arr.null_count == 0:  # Arrow counts them with the validity bitmap: no bitmap to unpack
        return np.zeros(len(arr), bool)
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)


def _any_per(owner: np.ndarray, flags: np.ndarray, b: int) -> np.ndarray:
    """Per row, whether any of its elements (``owner``: the row of each) is flagged."""
    out = np.zeros(b, bool)
    out[owner[flags]] = True
    return out


def _segments(values: np.ndarray, start: np.ndarray, length: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc`` reduced over each segment (NaN for an empty one, flagged by the caller)."""
    out = np.full(len(start), np.nan)
    full = length > 0
    if full.any():
        out[full] = ufunc.reduceat(values, start[full])
    return out


def _round_min_sum(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each round's smallest probability and their sum (``offsets``: from 0, rounds + 1), NaN for an empty
    round or a NaN minimum: one compiled pass when the extension is built, else two of numpy."""
    if compiled_sums is None:
        start, length = offsets[:-1], np.diff(offsets)
        return _segments(values, start, length, np.minimum), _segments(values, start, length, np.add)
    low, total = np.empty(len(offsets) - 1), np.empty(len(offsets) - 1)
    compiled_sums.round_min_sum(np.ascontiguousarray(values, float), np.ascontiguousarray(offsets, np.int64),
                                low, total)
    return low, total


def _choices(doc_codes: np.ndarray, doc_start: np.ndarray, n: np.ndarray, owner_r: np.ndarray,
             chosen_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per round, the chosen document's index in its pool (-1 if absent); per row, a repeated doc id?

    Rows are taken in groups of equal pool size N, as (rows, N) matrices of document codes, one
    column at a time (no (rounds, N) matrix)."""
    chosen, repeated = np.full(len(owner_r), -1, np.int64), np.zeros(len(n), bool)
    for size in np.unique(n[n > 0]).tolist():
        rows = np.nonzero(n == size)[0]
        docs = doc_codes[doc_start[rows][:, None] + np.arange(size)]
        if len(rows) == len(n) and (docs == docs[0]).all() and len(np.unique(docs[0])) == size:  # one pool
            position = np.full(int(max(docs.max(), chosen_codes.max())) + 3, -1)
            position[docs[0] + 2] = np.arange(size)
            return position[chosen_codes + 2], repeated
        ordered = np.sort(docs, axis=1)
        repeated[rows] = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        rounds = np.nonzero(n[owner_r] == size)[0] if len(rows) < len(n) else np.arange(len(owner_r))
        local, wanted, found = np.searchsorted(rows, owner_r[rounds]), chosen_codes[rounds], np.full(len(rounds), -1)
        for k in range(size - 1, -1, -1):  # the first match wins, as list.index
            found[docs[:, k][local] == wanted] = k
        chosen[rounds] = found
    return chosen, repeated


def per_document(values: np.ndarray, off: np.ndarray, absent: np.ndarray, doc_off: np.ndarray,
                 fill: float) -> np.ndarray:
    """A pool list's values (``off``: its offsets from 0) at their documents (``doc_off``): the values themselves
    where every row's list is as long as its pool, else ``fill`` for a row whose list is absent (NULL) or of
    another length (the row is suspect then)."""
    if np.array_equal(off, doc_off):
        return values
    out, length = np.full(int(doc_off[-1]), fill), np.diff(off)
    fits = ~absent & (length == np.diff(doc_off))
    if fits.any():
        owner = np.repeat(np.arange(len(length)), length)
        keep = fits[owner]
        out[(doc_off[owner] + np.arange(len(values)) - off[owner])[keep]] = values[keep]
    return out


def check_batch(batch: pa.RecordBatch) -> Checked:
    """Per row whether it is suspect, the column arrays of :class:`~draligned.cess.columns.ColumnBuilder`
    (some of them views of the batch's buffers, which :class:`~draligned.cess.columns.ColumnSink` copies
    into place), and the trajectory and task ids."""
    b, col = batch.num_rows, batch.column
    budget, pool, rounds = (col(name) for name in ("budget", "pool", "rounds"))
    bad, ids, tasks = check_strings(batch)
    bad |= flag(pc.less(budget, 1)) | nulls(pool)
    budget_f = np.asarray(pc.fill_null(budget, 1).to_numpy(zero_copy_only=False), float)
    doc_ids, pool_y, pool_m = pool.flatten()

    doc_off, doc_values = unlist(doc_ids)
    n = np.diff(doc_off)
    owner_d = np.repeat(np.arange(b), n)
    encoded = encoded_ids(doc_values)
    doc_codes = codes(encoded)
    empty = pc.index(encoded.dictionary, "").as_py()
    bad |= nulls(doc_ids) | (n == 0) | _any_per(owner_d, (doc_codes < 0) | (doc_codes == empty), b)

    y_off, y_values = unlist(pool_y)
    yv, y_valid = _floats(y_values)
    y_len, y_absent = np.diff(y_off), nulls(pool_y)
    bad |= ~y_absent & (y_len != n)
    bad |= _any_per(np.repeat(np.arange(b), y_len), y_valid & ~((yv >= -1) & (yv <= 1)), b)
    doc_y = per_document(yv, y_off, y_absent, doc_off, np.nan)  # NaN: pool.y absent (unknown scores)

    m_off, m_values = unlist(pool_m)
    mv = np.asarray(m_values.to_numpy(zero_copy_only=False), float)
    m_absent = nulls(pool_m)
    bad |= ~m_absent & (np.diff(m_off) != n)
    bad |= _any_per(np.repeat(np.arange(b), np.diff(m_off)), ~np.isfinite(mv), b)
    doc_m = per_document(mv, m_off, m_absent, doc_off, 0.0)

    r_off, r_values = unlist(rounds)
    n_rounds = np.diff(r_off)
    owner_r = np.repeat(np.arange(b), n_rounds)
    bad |= nulls(rounds) | (n_rounds == 0) | (n_rounds > budget_f) | _any_per(owner_r, nulls(r_values), b)
    probs, chosen_ids, stop_prob, round_y = r_values.flatten()
    if pa.types.is_dictionary(chosen_ids.type):  # as Parquet stores it: look up the few distinct ids
        chosen_codes = pc.take(pc.index_in(chosen_ids.dictionary, value_set=encoded.dictionary), chosen_ids.indices)
    else:
        chosen_codes = pc.index_in(chosen_ids, value_set=encoded.dictionary)
    chosen, repeated = _choices(doc_codes, doc_off, n, owner_r,
                                np.asarray(pc.fill_null(chosen_codes, -2).to_numpy(zero_copy_only=False), np.int32))
    bad |= repeated

    p_off, p_values = unlist(probs)
    pv = np.asarray(p_values.to_numpy(zero_copy_only=False), float)  # null → NaN: suspect
    p_len, p_start = np.diff(p_off), p_off[:-1]
    low, total = _round_min_sum(pv, p_off)
    shaped = (p_len == n[owner_r]) & (chosen >= 0)
    p = pv[np.where(shaped, p_start + chosen, 0)] if len(pv) else np.zeros(len(owner_r))
    p = np.where(shaped, p, np.nan)
    sv = np.asarray(stop_prob.to_numpy(zero_copy_only=False), float)
    ry, ry_valid = _floats(round_y)
    first = np.zeros(len(owner_r), bool)
    first[r_off[:-1][n_rounds > 0]] = True
    pool_y_j = np.where(shaped, doc_y[np.where(shaped, doc_off[owner_r] + chosen, 0)], np.nan) if len(doc_y) else ry
    score = np.where(ry_valid, ry, pool_y_j)
    bad_round = (nulls(probs) | ~shaped | ~(low >= 0) | ~(np.abs(total - 1.0) <= PROB_SUM_TOLERANCE - PROB_SUM_MARGIN)
                 | ~(p > 0) | ~(sv >= 0) | ~(sv < 1) | (first & (sv != 0)) | np.isnan(score)
                 | (ry_valid & ~((ry >= -1) & (ry <= 1))) | (np.abs(ry - pool_y_j) > Y_TOLERANCE))
    bad |= _any_per(owner_r, bad_round, b)

    full = low > 0
    first_support = np.zeros(len(doc_codes), np.int64)
    varying = _any_per(owner_r, ~full, b) & ~_any_per(owner_r, ~shaped, b)
    for row in np.nonzero(varying)[0].tolist():  # rare: a zero probability somewhere
        r0, d0, size = int(r_off[row]), int(doc_off[row]), int(n[row])
        block = pv[p_start[r0]:p_start[r0] + n_rounds[row] * size].reshape(n_rounds[row], size) > 0
        first_support[d0:d0 + size] = first_positive_round(block)
    arrays = {"budget": budget_f, "n_docs": n, "doc_m": doc_m, "doc_y": doc_y, "first_support": first_support,
              "n_rounds": n_rounds, "chosen": chosen, "y": score, "p": p, "stop": sv, "full_support": full}
    return bad, arrays, ids, tasks


def check_strings(batch: pa.RecordBatch) -> tuple[np.ndarray, list[str], list[str]]:
    """Per row whether its trajectory or task id is empty (or NULL) or its ranking not one of the three
    (NULL: absent, allowed); and the trajectory and task ids as lists."""
    ids, tasks, ranking = (batch.column(name) for name in ("trajectory_id", "task_id", "ranking"))
    bad = flag(pc.equal(ids, "")) | flag(pc.equal(tasks, ""))
    bad |= ~flag(pc.or_kleene(pc.is_null(ranking), pc.is_in(ranking, value_set=_RANKINGS)))
    return bad, ids.to_pylist(), _shared_strings(tasks)


def codes(encoded: pa.DictionaryArray) -> np.ndarray:
    """A dictionary array's codes as int32, -1 where it is NULL."""
    return np.asarray(pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False), np.int32)


def encoded_ids(values: pa.Array) -> pa.DictionaryArray:
    """Strings as a dictionary array with distinct entries (equal ids, equal codes). A dictionary
    decoded from Parquet is kept (decoding its strings costs more than all the checks) unless another
    writer repeated an entry in it."""
    if pa.types.is_dictionary(values.type):
        if len(pc.unique(values.dictionary)) == len(values.dictionary):
            return values
        values = values.cast(values.type.value_type)
    return pc.dictionary_encode(values)


def _shared_strings(arr: pa.Array) -> list[str]:
    """``arr.to_pylist()`` with one str object per distinct value (a few hundred tasks for 10^6 rows: ~50 MB less)."""
    if arr.null_count:
        return arr.to_pylist()
    encoded = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
    names = encoded.dictionary.to_pylist()
    return [names[i] for i in encoded.indices.to_numpy().tolist()]
