"""Gather the lines of a JSON Lines chunk that have the trajectory schema's shape, then check their numbers at once.

A line is gathered from one of two parses, which gather the same values (``tests/cess/test_line_chunk.py``
compares them line by line):

- :meth:`LineChunk.take_line`: simdjson's DOM (C: strict JSON grammar, UTF-8, numbers parsed once), read
  without a Python object per number: each number array is copied out as one float64 buffer, which
  refuses a string, bool or null among the numbers. Every key of an object is accounted for by its field
  count (a repeated or unknown key makes the count differ), so nothing is silently dropped.
- :meth:`LineChunk.take`: a record parsed by orjson (for what the first could not read, e.g. nulls in
  ``pool.y`` or a line that only the full validator can judge), with the same shape and type checks in
  Python.

Before both, when it is built, the compiled walk (:meth:`LineChunk.take_lines`, ``_line_walk.cpp``: the same
simdjson parse, walked in C++) gathers every line of the canonical shape straight into the chunk's lists, and
declines any other to :meth:`LineChunk.take_line` and the rest, as if it had not looked.

All only gather: :meth:`LineChunk.check` then checks every number rule over the chunk's arrays (numpy),
and a line that breaks or nears one is judged by the full validator. A parse that cannot tell returns
False and leaves the line to the next one; neither accepts a line the full validator would reject.
"""

from __future__ import annotations

import threading
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import simdjson

from draligned.cess.columns import first_positive_round
from draligned.cess.trajectory import PROB_SUM_MARGIN, PROB_SUM_TOLERANCE, Y_TOLERANCE

try:
    from draligned.cess import _line_walk as compiled_walk
except ImportError:  # installed without a C++ compiler (the extension is optional): the Python walk alone
    compiled_walk = None  # type: ignore[assignment]

_TOP, _TOP_REQUIRED = {"trajectory_id", "task_id", "ranking", "budget", "pool", "rounds"}, {
    "trajectory_id", "task_id", "budget", "pool", "rounds"}
_POOL = {"doc_ids", "y", "m"}
_ROUND, _ROUND_REQUIRED = {"probs", "chosen", "stop_prob", "y"}, {"probs", "chosen", "stop_prob"}
_RANKINGS = ("original", "pro", "anti", None)
_NUMBER, _NUMBER_OR_NULL = {float, int}, {float, int, type(None)}
_PROBS, _CHOSEN, _STOP = itemgetter("probs"), itemgetter("chosen"), itemgetter("stop_prob")
_OBJECT, _ARRAY = simdjson.Object, simdjson.Array
_NUMBERS: dict[str, type] = {"budget": float, "n_docs": np.int64, "n_rounds": np.int64, "doc_y": float, "doc_m": float,
                             "probs": float, "chosen": np.int64, "stop": float, "round_y": float}
"""The numbers a chunk gathers per line, document and round, with their types (the compiled walk's order)."""
_SCALARS = ("budget", "n_docs", "n_rounds", "chosen", "stop", "round_y")
"""The fields of :data:`_NUMBERS` the Python walks gather as Python numbers (see :meth:`LineChunk._flush`)."""
_POOLS_KEPT = 1024
"""At most this many distinct pools are kept per chunk for :meth:`LineChunk._pool_ids`."""


_PARSERS = threading.local()


def _parser() -> Any:
    """This thread's simdjson parser: a parse frees the previous document, so two threads loading at once
    must not share one (the second parse would be refused while the first's document is in use)."""
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = _PARSERS.parser = simdjson.Parser()
    return parser


def _floats(values: Any, n: int) -> Any | None:
    """A simdjson array of ``n`` numbers as one float64 buffer (ints converted as float() does), else None."""
    if type(values) is not _ARRAY or len(values) != n:
        return None
    try:
        return values.as_buffer(of_type="d")  # TypeError: a string, bool, null, array or object among them
    except TypeError:
        return None


def _no_repeated_key(raw: bytes, strings: int) -> bool:
    """True when ``raw`` holds no more strings than the ``strings`` (keys included) its parsed record has.

    Every ``"`` of a JSON text opens or closes a string or is escaped inside one, so the line holds
    2 × (its string tokens) + (escaped quotes) of them; a repeated key (which orjson collapses) adds at
    least its own token. False also when it cannot tell (an escaped quote): then the strict parser decides.
    """
    return raw.count(b'"') == 2 * strings


class LineChunk:
    """The gathered values of the lines of one chunk that passed the shape checks."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.ids: list[str] = []
        self.tasks: list[str] = []
        self.parts: dict[str, list[Any]] = {name: [] for name in _NUMBERS}
        """Per field of :data:`_NUMBERS`, its values in line order, as buffers: one per line (``doc_y``,
        ``doc_m``: float64; ``probs``: per round or per line) or per run of lines (the compiled walk's, or
        :meth:`_flush`'s of the scalars below)."""
        self.budget: list[int] = []
        """The scalars of the lines the Python walks gathered since the last :meth:`_flush`."""
        self.n_docs: list[int] = []
        self.n_rounds: list[int] = []
        self.chosen: list[int] = []
        self.stop: list[Any] = []
        self.round_y: list[Any] = []
        """None: no score in the round."""
        self.pools: dict[str, tuple[list[str], dict[str, int]]] = {}
        """Checked pools by the minified JSON text of their ``doc_ids`` (see :meth:`_pool_ids`)."""

    def _add(self, tid: str, task: str, budget: int, n: int, doc_y: Any, doc_m: Any, probs: list[Any],
             chosen: list[int], stop: list[Any], round_y: list[Any]) -> None:
        self.ids.append(tid)
        self.tasks.append(task)
        self.budget.append(budget)
        self.n_docs.append(n)
        self.n_rounds.append(len(chosen))
        self.parts["doc_y"].append(doc_y)
        self.parts["doc_m"].append(doc_m)
        self.parts["probs"] += probs
        self.chosen += chosen
        self.stop += stop
        self.round_y += round_y

    def _flush(self) -> None:
        """Move the pending scalars into their fields' buffers (None → NaN), keeping line order."""
        for name in _SCALARS:
            pending = getattr(self, name)
            if pending:
                self.parts[name].append(np.array(pending, _NUMBERS[name]))
                pending.clear()

    def numbers(self, name: str) -> np.ndarray:
        """Every gathered value of the field ``name`` of :data:`_NUMBERS`, in line order."""
        self._flush()
        return np.frombuffer(b"".join(self.parts[name]), _NUMBERS[name])

    def take_lines(self, text: bytes, start: int, number: int) -> tuple[int, int]:
        """Gather the lines of ``text`` from byte ``start`` (numbered from ``number``) while the compiled walk
        accepts them: the start of the first line it declines (or ``len(text)``) and the number of lines
        gathered."""
        start, taken, numbers = compiled_walk.take_lines(text, start, number, (self.lines, self.ids, self.tasks))
        if taken:
            self._flush()
            for name, values in zip(_NUMBERS, numbers, strict=True):
                self.parts[name].append(values)
        return start, taken

    def take_line(self, text: bytes, start: int = 0, end: int | None = None) -> bool:
        """Gather the line ``text[start:end]`` (parsed in place) if simdjson reads it with the schema's shape
        and types; else False (then :meth:`take` or the full validator decides). The line must start with
        ``{``: simdjson skips a byte-order mark, which the other parsers refuse.

        A number buffer flattens a nested array (``[0.5, [0.2]]`` reads as two numbers), so the line must
        hold as many ``[`` as the arrays read (a ``[`` in a string declines the line too)."""
        end = len(text) if end is None else end
        if start >= end or text[start] != 0x7B:
            return False
        try:
            doc = _parser().parse(memoryview(text)[start:end])
        except ValueError:  # not JSON, not UTF-8
            return False
        except RuntimeError as exc:  # a number out of range; any other (a parser in use) is a bug, not a line
            if str(exc).startswith("BIGINT_ERROR"):
                return False
            raise
        try:
            return self._take_doc(doc, text.count(b"[", start, end))
        except (KeyError, TypeError):  # a required key missing (or one the field count implied), an unhashable id
            return False

    def _take_doc(self, doc: Any, brackets: int) -> bool:
        """Gather a parsed line whose text has ``brackets`` ``[`` bytes."""
        if type(doc) is not _OBJECT or not 5 <= (size := len(doc)) <= 6:
            return False
        tid, task, budget, pool, rounds = (doc["trajectory_id"], doc["task_id"], doc["budget"], doc["pool"],
                                           doc["rounds"])
        ranking = doc["ranking"] if size == 6 else None  # six fields: the sixth must be ranking
        if type(tid) is not str or not tid or type(task) is not str or not task or type(budget) is not int:
            return False
        if not (ranking is None or type(ranking) is str and ranking in _RANKINGS) or budget < 1:
            return False
        if type(pool) is not _OBJECT or type(rounds) is not _ARRAY or not 1 <= len(rounds) <= budget:
            return False
        if len(pool) == 3:  # all three fields: each named once, or a lookup fails
            doc_ids, y, m = pool["doc_ids"], pool["y"], pool["m"]
        else:
            keys = set(pool.keys())  # another number of fields: each named once, doc_ids among them
            if len(keys) != len(pool) or not {"doc_ids"} <= keys <= _POOL:
                return False
            doc_ids, y, m = (pool["doc_ids"], pool["y"] if "y" in keys else None,
                             pool["m"] if "m" in keys else None)
        pool_ids = self._pool_ids(doc_ids)
        if pool_ids is None:
            return False
        ids, index = pool_ids
        n = len(ids)
        doc_y = np.full(n, np.nan) if y is None else _floats(y, n)
        doc_y = _scores(y, n) if doc_y is None else doc_y  # nulls in pool.y: unknown scores
        doc_m = np.zeros(n) if m is None else _floats(m, n)
        if doc_y is None or doc_m is None:
            return False
        probs, chosen, stop, round_y = [], [], [], []
        for rnd in rounds:
            if type(rnd) is not _OBJECT or not 3 <= (fields := len(rnd)) <= 4:
                return False
            values, name, c = rnd["probs"], rnd["chosen"], rnd["stop_prob"]
            j: Any = index.get(name)  # type: ignore[arg-type]  # TypeError if an array or object: unhashable
            score = rnd["y"] if fields == 4 else None  # four fields: the fourth must be y
            if type(values) is not _ARRAY or len(values) != n or j is None or type(c) not in _NUMBER:
                return False
            if type(score) not in _NUMBER_OR_NULL:
                return False
            probs.append(values.as_buffer(of_type="d"))  # TypeError: not all numbers (see _floats)
            chosen.append(j)
            stop.append(c)
            round_y.append(score)
        if brackets != 2 + len(probs) + (y is not None) + (m is not None):  # doc_ids, rounds, probs, y, m
            return False
        self._add(tid, task, budget, n, doc_y, doc_m, probs, chosen, stop, round_y)
        return True

    def _pool_ids(self, doc_ids: Any) -> tuple[list[str], dict[str, int]] | None:
        """A pool's document ids and their positions, if they are distinct non-empty strings; else None.
        Files repeat a few pools many times, so they are decoded and checked once per distinct JSON text."""
        if type(doc_ids) is not _ARRAY:
            return None
        text = doc_ids.mini
        if text in self.pools:
            return self.pools[text]
        ids: list[Any] = doc_ids.as_list()
        n = len(ids)
        if not n or set(map(type, ids)) != {str} or "" in ids or len(set(ids)) != n:
            return None
        checked = ids, dict(zip(ids, range(n), strict=True))
        if len(self.pools) < _POOLS_KEPT:
            self.pools[text] = checked
        return checked

    def take(self, rec: Any, raw: bytes | None) -> bool:
        """Gather ``rec`` (a parsed record) if it has the schema's shape and types (and, from ``raw``, no
        repeated key); else False."""
        if type(rec) is not dict or not rec.keys() <= _TOP or not rec.keys() >= _TOP_REQUIRED:
            return False
        tid, task, budget, pool, rounds = (rec["trajectory_id"], rec["task_id"], rec["budget"], rec["pool"],
                                           rec["rounds"])
        if type(tid) is not str or not tid or type(task) is not str or not task or type(budget) is not int:
            return False
        if rec.get("ranking") not in _RANKINGS or budget < 1 or type(pool) is not dict:
            return False
        if not pool.keys() <= _POOL or type(ids := pool.get("doc_ids")) is not list or not ids:
            return False
        n, y, m = len(ids), pool.get("y"), pool.get("m")
        if set(map(type, ids)) != {str} or "" in ids or len(set(ids)) != n:
            return False
        if y is not None and (type(y) is not list or len(y) != n):
            return False
        if m is not None and (type(m) is not list or len(m) != n):
            return False
        if type(rounds) is not list or not rounds or len(rounds) > budget or set(map(type, rounds)) != {dict}:
            return False
        if not all(_ROUND_REQUIRED <= set(keys) <= _ROUND for keys in set(map(tuple, rounds))):
            return False
        probs, chosen = list(map(_PROBS, rounds)), list(map(_CHOSEN, rounds))
        if set(map(type, chosen)) != {str}:
            return False
        chosen = list(map(dict(zip(ids, range(n), strict=True)).get, chosen))  # None: not a pool id
        if set(map(type, probs)) != {list} or set(map(len, probs)) != {n} or None in chosen:
            return False
        stop, round_y = list(map(_STOP, rounds)), list(map(dict.get, rounds, repeat("y")))
        if not all(set(map(type, v)) <= _NUMBER for v in (*probs, m or (), stop)):
            return False
        if not all(set(map(type, v)) <= _NUMBER_OR_NULL for v in (y or (), round_y)):
            return False
        strings = len(rec) + len(pool) + sum(map(len, rounds)) + 2 + (type(rec.get("ranking")) is str) + n + len(rounds)
        if raw is not None and not _no_repeated_key(raw, strings):
            return False
        self._add(tid, task, budget, n, np.array(y if y is not None else [None] * n, float),
                  np.zeros(n) if m is None else np.array(m, float), [np.array(list(chain.from_iterable(probs)), float)],
                  chosen, stop, round_y)
        return True

    def check(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per gathered line, whether a number breaks a rule (or comes close), and the column arrays."""
        n_docs, n_rounds = self.numbers("n_docs"), self.numbers("n_rounds")
        b = len(n_docs)
        owner_r = np.repeat(np.arange(b), n_rounds)
        owner_d = np.repeat(np.arange(b), n_docs)
        probs = self.numbers("probs")
        per_round = n_docs[owner_r]
        prob_start = np.concatenate([[0], np.cumsum(per_round)])[:-1]
        doc_start = np.concatenate([[0], np.cumsum(n_docs)])[:-1]
        doc_y = self.numbers("doc_y")
        stop, round_y, chosen = self.numbers("stop"), self.numbers("round_y"), self.numbers("chosen")
        pool_y = doc_y[doc_start[owner_r] + chosen]
        scores = np.where(np.isnan(round_y), pool_y, round_y)
        p = probs[prob_start + chosen] if len(probs) else np.zeros(0)
        low = np.minimum.reduceat(probs, prob_start) if len(probs) else np.zeros(0)
        first = np.zeros(len(stop), bool)
        first[np.concatenate([[0], np.cumsum(n_rounds)])[:-1]] = True
        sums_off = np.abs(np.add.reduceat(probs, prob_start) - 1.0) > PROB_SUM_TOLERANCE - PROB_SUM_MARGIN
        bad_round = ((low < 0) | sums_off
                     | ~(p > 0) | ~(stop >= 0) | ~(stop < 1) | (first & (stop != 0)) | np.isnan(scores)
                     | (round_y < -1) | (round_y > 1) | (np.abs(round_y - pool_y) > Y_TOLERANCE))
        bad_doc = (doc_y < -1) | (doc_y > 1)
        bad = (np.bincount(owner_r, bad_round, b) > 0) | (np.bincount(owner_d, bad_doc, b) > 0)
        full = low > 0
        first_support = np.zeros(len(doc_y), np.int64)
        varying = np.nonzero(np.bincount(owner_r, ~full, b) > 0)[0]
        for row in varying.tolist():  # rare: some document had probability 0 in some round
            r0, d0 = int(np.searchsorted(owner_r, row)), int(doc_start[row])
            block = probs[prob_start[r0]:prob_start[r0] + n_rounds[row] * n_docs[row]].reshape(n_rounds[row], -1) > 0
            first_support[d0:d0 + n_docs[row]] = first_positive_round(block)
        arrays = {"budget": self.numbers("budget"), "n_docs": n_docs, "doc_m": self.numbers("doc_m"),
                  "doc_y": doc_y, "first_support": first_support, "n_rounds": n_rounds, "chosen": chosen,
                  "y": scores, "p": p, "stop": stop, "full_support": full}
        return bad, arrays


def _scores(values: Any, n: int) -> np.ndarray | None:
    """``pool.y`` with nulls (unknown scores) as float64, NaN for null; None unless every item is a number or null."""
    if type(values) is not _ARRAY:
        return None
    items = values.as_list()
    if len(items) != n or not set(map(type, items)) <= _NUMBER_OR_NULL:
        return None
    return np.array(items, float)
