"""Work on the parts of a file in threads, the results in the file's order (the pipelines of `cess estimate`).

The work releases the GIL (pyarrow, numpy, the compiled kernels), so threads use every core without the
copies a process would need; at most twice as many parts as threads are in memory at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

P = TypeVar("P")
T = TypeVar("T")


def in_order(count: int, workers: int, task: Callable[[int], list[T]]) -> Iterator[T]:
    """What ``task`` makes of each part ``0 .. count - 1``, in order; the parts run in ``workers`` threads, at
    most 2 × ``workers`` of them in memory."""
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[Future[list[T]]] = deque()
        for part in range(count):
            pending.append(pool.submit(task, part))
            if len(pending) >= 2 * workers:
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()


def made_in_order(parts: list[P], workers: int, make: Callable[[P], list[T]]) -> Iterator[T]:
    """What ``make`` makes of every part, in order, in ``workers`` threads; each part is let go once made
    (``parts`` is emptied: the caller keeps no other reference to them)."""
    held: list[P | None] = list(parts)
    parts.clear()

    def made(i: int) -> list[T]:
        part, held[i] = held[i], None
        if part is None:
            raise AssertionError(f"part {i} made twice")
        return make(part)

    return in_order(len(held), workers, made)
