"""Load a JSON Lines trajectory file into :class:`TrajectoryColumns`, validating every line fast.

Ranges of the file are first given to pyarrow's JSON reader (:mod:`draligned.cess.arrowjson`,
parsing and checks over whole columns, in threads), which decides a range only when every line in
it is valid. Every other range takes the exact path below, line by line, in file order.

In the exact path each line is parsed by orjson and checked by hand-written shape checks (keys, types, lengths, doc ids)
and, per chunk of lines, by vectorised numpy checks of every number (ranges, probability sums, the
chosen document's probability, c_1 = 0, Y known and consistent). A line that fails any of them, or
that orjson cannot parse, goes to the full validator :func:`draligned.cess.trajectory.parse_trajectory`
(strict JSON, jsonschema, pydantic, the semantic rules), which raises the same error, naming line and
field, as :func:`draligned.cess.trajectory.load_trajectories`; a line the fast checks only doubted (a
sum within rounding of the tolerance) is kept when the full validator accepts it. The fast checks
accept nothing the full validator rejects: they are stricter, never looser.

Repeated keys, which orjson would silently collapse, are caught by counting quotes
(:func:`_no_repeated_key`): the line must hold exactly as many strings as the parsed record.
"""

from __future__ import annotations

import io
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from itertools import chain, repeat
from multiprocessing import get_context
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from draligned.cess.arrowjson import decode_block
from draligned.cess.columns import ColumnBuilder, TrajectoryColumns, first_positive_round
from draligned.cess.trajectory import (
    PROB_SUM_MARGIN,
    PROB_SUM_TOLERANCE,
    Y_TOLERANCE,
    TrajectoryError,
    parse_trajectory,
)

Decoded = tuple[dict[str, np.ndarray], list[str], list[str]]
"""A range's column arrays, trajectory ids and task ids (:func:`draligned.cess.arrowjson.decode_block`)."""
CHUNK_BYTES = 16 << 20
"""Lines are read, parsed and checked in chunks of about this many bytes (bounded memory)."""
_TOP, _TOP_REQUIRED = {"trajectory_id", "task_id", "ranking", "budget", "pool", "rounds"}, {
    "trajectory_id", "task_id", "budget", "pool", "rounds"}
_POOL = {"doc_ids", "y", "m"}
_ROUND, _ROUND_REQUIRED = {"probs", "chosen", "stop_prob", "y"}, {"probs", "chosen", "stop_prob"}
_RANKINGS = ("original", "pro", "anti", None)
_NUMBER, _NUMBER_OR_NULL = {float, int}, {float, int, type(None)}
_PROBS, _CHOSEN, _STOP = itemgetter("probs"), itemgetter("chosen"), itemgetter("stop_prob")


def _no_repeated_key(raw: bytes, strings: int) -> bool:
    """True when ``raw`` holds no more strings than the ``strings`` (keys included) its parsed record has.

    Every ``"`` of a JSON text opens or closes a string or is escaped inside one, so the line holds
    2 × (its string tokens) + (escaped quotes) of them; a repeated key adds at least its own token.
    False also when it cannot tell (an escaped quote): then the strict parser decides.
    """
    return raw.count(b'"') == 2 * strings


class _Chunk:
    """The gathered values of the lines of one chunk that passed the shape checks."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.ids: list[str] = []
        self.tasks: list[str] = []
        self.budget: list[int] = []
        self.n_docs: list[int] = []
        self.n_rounds: list[int] = []
        self.doc_y: list[Any] = []
        self.doc_m: list[Any] = []
        self.probs: list[Any] = []
        self.chosen: list[int] = []
        self.stop: list[Any] = []
        self.round_y: list[Any] = []
        self.numbers: dict[str, np.ndarray] = {}
        """``probs``, ``doc_m`` and ``stop`` as arrays, once their types are checked."""

    def take(self, rec: Any, raw: bytes | None, typed: bool = False) -> bool:
        """Gather ``rec`` if it has the schema's shape (and, from ``raw``, no repeated key); else False.

        The numbers' types are checked per chunk (:meth:`number_types_ok`), or here when ``typed``.
        """
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
        if typed and not all(set(map(type, v)) <= _NUMBER for v in (*probs, m or (), stop)):
            return False
        if typed and not all(set(map(type, v)) <= _NUMBER_OR_NULL for v in (y or (), round_y)):
            return False
        strings = len(rec) + len(pool) + sum(map(len, rounds)) + 2 + (type(rec.get("ranking")) is str) + n + len(rounds)
        if raw is not None and not _no_repeated_key(raw, strings):
            return False
        self.ids.append(tid)
        self.tasks.append(task)
        self.budget.append(budget)
        self.n_docs.append(n)
        self.n_rounds.append(len(rounds))
        self.doc_y.extend(y if y is not None else [None] * n)
        self.doc_m.extend(m if m is not None else [0.0] * n)
        self.probs.extend(chain.from_iterable(probs))
        self.chosen.extend(chosen)
        self.stop.extend(stop)
        self.round_y.extend(round_y)
        return True

    def number_types_ok(self, text: bytes) -> bool:
        """Every gathered number a plain int or float (not a bool, string or null), nulls only where allowed.

        ``text`` is the chunk's bytes: without a ``true`` or ``false`` in it no value is a bool, and an
        array numpy builds from a list of ints and floats only has an integer or float dtype.
        """
        if b"true" in text or b"false" in text:
            return False
        self.numbers = {name: np.array(getattr(self, name)) for name in ("probs", "doc_m", "stop")}
        return (all(a.dtype.kind in "fi" or not a.size for a in self.numbers.values())
                and all(set(map(type, v)) <= _NUMBER_OR_NULL for v in (self.doc_y, self.round_y)))

    def check(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per gathered line, whether a number breaks a rule (or comes close), and the column arrays."""
        n_docs, n_rounds = np.array(self.n_docs, np.int64), np.array(self.n_rounds, np.int64)
        b = len(n_docs)
        owner_r = np.repeat(np.arange(b), n_rounds)
        owner_d = np.repeat(np.arange(b), n_docs)
        probs = np.asarray(self.numbers.get("probs", self.probs), float)
        per_round = n_docs[owner_r]
        prob_start = np.concatenate([[0], np.cumsum(per_round)])[:-1]
        doc_start = np.concatenate([[0], np.cumsum(n_docs)])[:-1]
        doc_y = np.array(self.doc_y, float)  # None → NaN
        stop, round_y = np.asarray(self.numbers.get("stop", self.stop), float), np.array(self.round_y, float)
        chosen = np.array(self.chosen, np.int64)
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
        doc_m = np.asarray(self.numbers.get("doc_m", self.doc_m), float)
        arrays = {"budget": np.array(self.budget, float), "n_docs": n_docs, "doc_m": doc_m,
                  "doc_y": doc_y, "first_support": first_support, "n_rounds": n_rounds, "chosen": chosen,
                  "y": scores, "p": p, "stop": stop, "full_support": full}
        return bad, arrays


def _full_check(raw: bytes, number: int) -> Any | None:
    """The record of a line the full validator accepts (None for a blank line); its error otherwise."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrajectoryError(number, "<json>", f"not UTF-8 text: {exc}") from None
    if not text.strip():
        return None
    return parse_trajectory(text, number).model_dump()


def _first_duplicate(ids: list[str], lines: Iterable[int], seen: set[str]) -> TrajectoryError | None:
    for tid, line in zip(ids, lines, strict=True):
        if tid in seen:
            return TrajectoryError(line, "trajectory_id", f"duplicate id {tid!r}")
        seen.add(tid)
    return None


def _gather(raws: list[bytes], first_line: int, typed: bool) -> tuple[_Chunk, TrajectoryError | None]:
    """The lines of a chunk up to the first one the full validator rejects, and its error."""
    chunk = _Chunk()
    for offset, raw in enumerate(raws):
        number = first_line + offset
        if not raw.strip():
            continue
        try:
            rec: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            rec = None
        if rec is not None and chunk.take(rec, raw, typed):
            chunk.lines.append(number)
            continue
        try:  # doubtful line: the full validator decides, and names what is wrong
            checked = _full_check(raw, number)
        except TrajectoryError as exc:
            return chunk, exc
        if checked is not None:
            if not chunk.take(checked, None, True):
                raise AssertionError(f"line {number}: the shape checks reject a record the full validator accepts")
            chunk.lines.append(number)
    return chunk, None


def _check_chunk(raws: list[bytes], first_line: int) -> tuple[_Chunk, dict[str, np.ndarray], TrajectoryError | None]:
    """The chunk's valid lines as arrays, and the full validator's error for its first invalid line."""
    chunk, error = _gather(raws, first_line, typed=False)
    if not chunk.number_types_ok(b"".join(raws)):  # maybe a line holds a non-number: check line by line
        chunk, error = _gather(raws, first_line, typed=True)
    bad, arrays = chunk.check() if chunk.ids else (np.zeros(0, bool), {})
    for i in np.nonzero(bad)[0].tolist():
        line = chunk.lines[i]
        if error is not None and line > error.line:
            break
        try:
            _full_check(raws[line - first_line], line)
        except TrajectoryError as exc:
            error = exc
            break
    return chunk, arrays, error


def _add_chunk(chunk: _Chunk, arrays: dict[str, np.ndarray], error: TrajectoryError | None, seen: set[str],
               builder: ColumnBuilder) -> None:
    """Add a checked chunk; raise its first problem in file order (an invalid line or a repeated id)."""
    duplicate = _first_duplicate(chunk.ids, chunk.lines, seen)
    if duplicate is not None and (error is None or duplicate.line < error.line):
        raise duplicate
    if error is not None:
        raise error
    if chunk.ids:
        builder.extend(chunk.ids, chunk.tasks, **arrays)


def _read(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(start)
        return handle.read(end - start)


def _read_and_decode(path: Path, start: int, end: int) -> tuple[int, Decoded | None]:
    """The number of lines of one range, and their columns when pyarrow's path can decide them (else None)."""
    raw = _read(path, start, end)
    decoded = decode_block(raw if raw.endswith(b"\n") else raw + b"\n")
    return (raw.count(b"\n") + (not raw.endswith(b"\n")) if decoded is None else len(decoded[1])), decoded


def _decoded(pool: ThreadPoolExecutor, path: Path, ranges: list[tuple[int, int]],
             ahead: int) -> Iterator[tuple[int, Decoded | None]]:
    """:func:`_read_and_decode` of every range in file order, at most ``ahead`` ranges in flight (bounded memory)."""
    pending: deque[Future[tuple[int, Decoded | None]]] = deque()
    for start, end in ranges:
        pending.append(pool.submit(_read_and_decode, path, start, end))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _ranges(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of about CHUNK_BYTES that end at a line end."""
    size, bounds = path.stat().st_size, [0]
    with path.open("rb") as handle:
        while bounds[-1] + CHUNK_BYTES < size:
            handle.seek(bounds[-1] + CHUNK_BYTES)
            handle.readline()
            bounds.append(min(handle.tell(), size))
    return [(a, b) for a, b in zip(bounds, [*bounds[1:], size], strict=True) if a < b]


Exact = tuple[list[str], list[str], list[int], dict[str, np.ndarray], bool]
"""What a worker sends back for a range (:func:`_exact_range`): ids, task ids, line numbers (from 1 in the
range) and column arrays of its valid lines, and whether some line is invalid."""


def _exact_range(path: Path, start: int, end: int) -> Exact:
    """The exact path over one range, its lines numbered from 1 (run in a worker process: it holds the GIL)."""
    chunk, arrays, error = _check_chunk(io.BytesIO(_read(path, start, end)).readlines(), 1)
    return chunk.ids, chunk.tasks, chunk.lines, arrays, error is not None


def forkable() -> bool:
    """Whether this process may fork its exact-path workers: only with no other thread (``cess estimate``);
    a caller with threads of its own (a server, loopback threads) has the exact path run in this process."""
    return threading.active_count() == 1


class _ExactWorkers:
    """Worker processes for the ranges pyarrow cannot decide. They are forked at once, before any thread
    starts (a fork copies other threads' locks in an unknown state; spawned workers would import the
    caller's main module again); idle, they share their pages with this process."""

    def __init__(self, workers: int) -> None:
        self.pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"))
        self.pool.submit(int)  # the first task forks every worker, then starts the pool's own thread

    def submit(self, path: Path, start: int, end: int) -> Future[Exact]:
        return self.pool.submit(_exact_range, path, start, end)

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


def load_columns(path: str | Path, workers: int | None = None) -> TrajectoryColumns:
    """Read and validate a JSON Lines trajectory file as columns (the rules and errors of
    :func:`draligned.cess.trajectory.load_trajectories`, including refusing a file with no trajectory).

    Ranges of about CHUNK_BYTES are decoded in ``workers`` threads (default: one per core) by
    pyarrow's path (:mod:`draligned.cess.arrowjson`). A range it cannot decide (escapes, blank lines,
    a line that breaks or nears a rule) is checked line by line by the exact path, in ``workers``
    processes when the file has several ranges and this process has no other thread; results are added in
    file order, and a range with an invalid line is checked again here, numbered from its real first line,
    so the error is the one a single pass of :func:`~draligned.cess.trajectory.load_trajectories` raises.
    """
    path = Path(path)
    builder, seen, line = ColumnBuilder(), set[str](), 1
    ranges = _ranges(path)
    workers = workers or os.cpu_count() or 1
    exact = _ExactWorkers(workers) if workers > 1 and len(ranges) > 1 and forkable() else None
    pending: deque[tuple[int, int, int, int, Decoded | Future[Exact] | None]] = deque()

    def raise_duplicate(ids: list[str], lines: Iterable[int]) -> None:
        duplicate = _first_duplicate(ids, lines, seen)
        if duplicate is not None:
            raise duplicate

    def add(first: int, count: int, start: int, end: int, result: Decoded | Future[Exact] | None) -> None:
        """Add one range's lines (numbered from ``first``) or raise its first problem."""
        if isinstance(result, tuple):
            arrays, ids, tasks = result  # one line per row: no blank line in the range
            raise_duplicate(ids, range(first, first + count))
            builder.extend(ids, tasks, **arrays)
            return
        if result is not None:
            ids, tasks, lines, arrays, invalid = result.result()
            if not invalid:
                raise_duplicate(ids, [first - 1 + n for n in lines])
                if ids:
                    builder.extend(ids, tasks, **arrays)
                return
        # one worker, or an invalid line: checked here, numbered from the range's real first line
        _add_chunk(*_check_chunk(io.BytesIO(_read(path, start, end)).readlines(), first), seen, builder)

    try:
        with ThreadPoolExecutor(workers) as pool:
            for (start, end), (count, decoded) in zip(ranges, _decoded(pool, path, ranges, workers + 1), strict=True):
                result = decoded if decoded is not None or exact is None else exact.submit(path, start, end)
                pending.append((line, count, start, end, result))
                line += count
                while pending and (not isinstance(head := pending[0][4], Future) or head.done()
                                   or len(pending) > 2 * workers):
                    add(*pending.popleft())
            while pending:
                add(*pending.popleft())
    finally:
        if exact is not None:
            exact.close()
    if not builder.ids:
        raise TrajectoryError(0, "<file>", "no trajectories (the file is empty or has only blank lines)")
    return builder.build()
