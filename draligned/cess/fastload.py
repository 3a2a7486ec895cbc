"""Load a JSON Lines trajectory file into :class:`TrajectoryColumns`, validating every line fast.

The file is cut into ranges of about CHUNK_BYTES at line ends, checked in worker processes (one per
core, :func:`in_ranges`, which the ``--json`` pipeline :mod:`draligned.cess.jsonl_lines` shares) and
added in file order. In a range each line is parsed by simdjson and walked in C++ when the
optional extension is built (:meth:`LineChunk.take_lines`); a line it declines (or every line, without
it) is walked in Python (:meth:`LineChunk.take_line`: no Python object per number), or, when that cannot
read it, parsed by orjson (:meth:`LineChunk.take`), and checked by the shape checks; then, per range, by
vectorised numpy checks of every number (ranges, probability sums, the chosen document's probability,
c_1 = 0, Y known and consistent). A line that fails any of them, or that neither parser reads, goes to the full
validator :func:`draligned.cess.trajectory.parse_trajectory` (strict JSON, jsonschema, pydantic, the semantic rules),
which raises the same error, naming line and field, as :func:`draligned.cess.trajectory.load_trajectories`;
a line the fast checks only doubted (a sum within rounding of the tolerance) is kept when the full
validator accepts it. The fast checks accept nothing the full validator rejects: they are stricter, never looser.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson

from draligned.cess import line_chunk
from draligned.cess.columns import ColumnBuilder, TrajectoryColumns
from draligned.cess.heap import keep_freed_memory
from draligned.cess.line_chunk import LineChunk
from draligned.cess.trajectory import TrajectoryError, parse_trajectory
from draligned.forked import fork_pool

CHUNK_BYTES = 16 << 20
"""Lines are read, parsed and checked in ranges of about this many bytes (bounded memory)."""


def _full_check(raw: bytes, number: int) -> Any | None:
    """The record of a line the full validator accepts (None for a blank line); its error otherwise."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrajectoryError(number, "<json>", f"not UTF-8 text: {exc}") from None
    if not text.strip():
        return None
    return parse_trajectory(text, number).model_dump()


def _first_duplicate(ids: list[str], lines: Iterable[int], seen: set[str], offset: int = 0) -> TrajectoryError | None:
    """The error for the first id of ``ids`` already seen (its line: ``offset`` + its number in ``lines``),
    after adding them to ``seen``; None if each is new. Distinct new ids are added at once (set operations
    in C); they are walked one by one only to find the first repeated one."""
    new = set(ids)
    if len(new) == len(ids) and seen.isdisjoint(new):
        seen |= new
        return None
    for tid, line in zip(ids, lines, strict=True):
        if tid in seen:
            return TrajectoryError(offset + line, "trajectory_id", f"duplicate id {tid!r}")
        seen.add(tid)
    return None


def _gather(text: bytes, first_line: int) -> tuple[LineChunk, int, TrajectoryError | None]:
    """The lines of a chunk up to the first one the full validator rejects: the chunk, the number of lines
    looked at, and the error. Lines end at ``\n`` (as a binary file's lines do)."""
    chunk, start, count = LineChunk(), 0, 0
    while start < len(text):
        if line_chunk.compiled_walk is not None:
            start, taken = chunk.take_lines(text, start, first_line + count)
            count += taken
            if start >= len(text):
                break
        end = text.find(b"\n", start) + 1 or len(text)
        number, count, span = first_line + count, count + 1, (start, end)
        start = end
        if chunk.take_line(text, *span):  # parsed in place: the line's text is cut only if it is declined
            chunk.lines.append(number)
            continue
        raw = text[span[0]:span[1]]
        if not raw.strip():
            continue
        try:
            rec: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            rec = None
        if rec is None or not chunk.take(rec, raw):
            try:  # doubtful line: the full validator decides, and names what is wrong
                checked = _full_check(raw, number)
            except TrajectoryError as exc:
                return chunk, count, exc
            if checked is None:  # blank but for Unicode whitespace
                continue
            if not chunk.take(checked, None):
                raise AssertionError(f"line {number}: the shape checks reject a record the full validator accepts")
        chunk.lines.append(number)
    return chunk, count, None


def _check_chunk(text: bytes, first_line: int) -> tuple[LineChunk, dict[str, np.ndarray], int, TrajectoryError | None]:
    """The chunk's valid lines as arrays, its number of lines, and the full validator's error for its first
    invalid line."""
    chunk, count, error = _gather(text, first_line)
    bad, arrays = chunk.check() if chunk.ids else (np.zeros(0, bool), {})
    suspects = np.nonzero(bad)[0].tolist()
    ends = np.flatnonzero(np.frombuffer(text, np.uint8) == 0x0A) + 1 if suspects else np.zeros(0, np.int64)  # line ends
    for i in suspects:
        line = chunk.lines[i]
        if error is not None and line > error.line:
            break
        k = line - first_line
        try:
            _full_check(text[ends[k - 1] if k else 0:ends[k] if k < len(ends) else len(text)], line)
        except TrajectoryError as exc:
            error = exc
            break
    return chunk, arrays, count, error


def _raise_first(chunk: LineChunk, error: TrajectoryError | None, seen: set[str]) -> None:
    """Raise a checked chunk's first problem in file order (an invalid line or a repeated id), if any."""
    duplicate = _first_duplicate(chunk.ids, chunk.lines, seen)
    if duplicate is not None and (error is None or duplicate.line < error.line):
        raise duplicate
    if error is not None:
        raise error


def _read(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(start)
        return handle.read(end - start)


def ranges(path: Path, chunk: int | None = None, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges of about ``chunk`` bytes (default CHUNK_BYTES) that end at a line end, from ``start`` (a
    line start) to ``end`` (a line end; default the file's end)."""
    size, bounds, chunk = path.stat().st_size if end is None else end, [start], chunk or CHUNK_BYTES
    with path.open("rb") as handle:
        while bounds[-1] + chunk < size:
            handle.seek(bounds[-1] + chunk)
            handle.readline()
            bounds.append(min(handle.tell(), size))
    return [(a, b) for a, b in zip(bounds, [*bounds[1:], size], strict=True) if a < b]


Checked = tuple[int, list[str], list[str], list[int], dict[str, np.ndarray], bool]
"""What a worker sends back for a range (:func:`_check_range`): its number of lines, then the ids, task ids,
line numbers (from 1 in the range) and column arrays of its valid lines, and whether some line is invalid."""
T = TypeVar("T")
NO_TRAJECTORIES = "no trajectories (the file is empty or has only blank lines)"
"""The error for a file without a trajectory (line 0, field ``<file>``)."""


def checked_range(path: Path, start: int, end: int, first_line: int = 1,
                  ) -> tuple[LineChunk, dict[str, np.ndarray], int, TrajectoryError | None]:
    """The valid lines of a range (numbered from ``first_line``) as a chunk and its column arrays, its
    number of lines, and the full validator's error for its first invalid line (see :func:`_check_chunk`)."""
    return _check_chunk(_read(path, start, end), first_line)


def _check_range(path: Path, start: int, end: int) -> Checked:
    """One range checked (in a worker process when the file has several: the parse holds the GIL)."""
    chunk, arrays, count, error = checked_range(path, start, end)
    return count, chunk.ids, chunk.tasks, chunk.lines, arrays, error is not None


def forkable() -> bool:
    """Whether this process may fork its workers: only with no other thread (``cess estimate``); a caller
    with threads of its own (a server, loopback threads) has every range checked in this process."""
    return threading.active_count() == 1


def in_ranges(path: Path, task: Callable[[Path, int, int], T], workers: int | None = None, chunk: int | None = None,
              ) -> Generator[tuple[int, int, T], None, None]:
    """Each range of about ``chunk`` bytes (default CHUNK_BYTES) of the file, with ``task(path, start, end)``
    of it, in file order.

    The tasks run in ``workers`` processes (default: one per core; at most two ranges per worker ahead of
    the caller: bounded memory) when the file has several ranges and this process has no other thread,
    else here. ``task`` is a module-level function (or a partial of one): it is sent to the workers."""
    spans = ranges(path, chunk)
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(spans) < 2 or not forkable():
        for start, end in spans:
            yield start, end, task(path, start, end)
        return
    pool = fork_pool(workers, keep_freed_memory)  # forked at once, before its own thread starts
    try:
        pending: deque[tuple[int, int, Future[T]]] = deque()
        for start, end in spans:
            if len(pending) >= 2 * workers:
                first, last, result = pending.popleft()
                yield first, last, result.result()
            pending.append((start, end, pool.submit(task, path, start, end)))
        while pending:
            first, last, result = pending.popleft()
            yield first, last, result.result()
    finally:
        pool.shutdown(cancel_futures=True)


def raise_first_problem(path: Path, line: int, start: int, end: int, ids: list[str], lines: list[int],
                        invalid: bool, seen: set[str]) -> None:
    """Raise the first problem of a range checked elsewhere, whose first line is ``line``: its ``ids`` at
    ``lines`` (numbered from 1 in the range) repeating one already ``seen`` (then added to it), or, if it
    has an invalid line, the error a single pass raises (the range is checked again here, numbered from
    ``line``)."""
    if invalid:
        chunk, _, _, error = _check_chunk(_read(path, start, end), line)
        _raise_first(chunk, error, seen)
        raise AssertionError(f"lines {line}+: the range was invalid in a worker and valid here")
    duplicate = _first_duplicate(ids, lines, seen, line - 1)
    if duplicate is not None:
        raise duplicate


def load_columns(path: str | Path, workers: int | None = None) -> TrajectoryColumns:
    """Read and validate a JSON Lines trajectory file as columns (the rules and errors of
    :func:`draligned.cess.trajectory.load_trajectories`, including refusing a file with no trajectory).

    Ranges of about CHUNK_BYTES are checked in ``workers`` processes (:func:`in_ranges`); results are
    added in file order, and a range with an invalid line is checked again here, numbered from its real
    first line, so the error is the one a single pass of
    :func:`~draligned.cess.trajectory.load_trajectories` raises.
    """
    path = Path(path)
    builder, seen, line = ColumnBuilder(), set[str](), 1
    with closing(in_ranges(path, _check_range, workers)) as checked:
        for start, end, (count, ids, tasks, lines, arrays, invalid) in checked:
            raise_first_problem(path, line, start, end, ids, lines, invalid, seen)
            if ids:
                builder.extend(ids, tasks, **arrays)
            line += count
    if not builder.ids:
        raise TrajectoryError(0, "<file>", NO_TRAJECTORIES)
    return builder.build()
