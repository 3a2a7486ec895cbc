"""A small thread-safe least-recently-used map, for caches whose callers decide what is worth keeping
(a corpus by its bytes' size, a blob text by its length), which ``functools.lru_cache`` cannot express."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``most`` entries; a lookup makes an entry the most recent, and a new entry beyond ``most``
    pushes out the least recent."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()  # callers may look up from several threads of one process

    def get(self, key: K) -> V | None:
        """The entry of ``key`` (now the most recent), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` as the most recent entry."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self.most:
                self._entries.popitem(last=False)
