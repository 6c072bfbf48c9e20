"""A thread-safe least-recently-used cache bounded by bytes.

Used to keep what spatial re-ranking reads for each database image (its frames and its descriptors in the space of
the ratio test) across the searches of one process: a server or an evaluation verifies the same popular images
again and again, and reading an entry of the feature store and describing it costs more than matching it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable


class BytesLRU:
    """Least-recently-used cache of values whose sizes are given in bytes; the total stays at most ``max_bytes``.

    A value larger than ``max_bytes`` is not kept; ``max_bytes=0`` disables the cache. Safe to share between
    threads (one lock around the bookkeeping; values are computed outside it, so two threads missing the same key
    at once both compute it and the second one's value is kept).

    Parameters
    ----------
    max_bytes : int
    """

    def __init__(self, max_bytes: int):
        if int(max_bytes) < 0:
            raise ValueError(f"max_bytes must be >= 0; got {max_bytes}.")
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def get(self, key: Hashable, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return default
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value, nbytes: int) -> None:
        """Keep ``value`` (of ``nbytes`` bytes) under ``key``, evicting the least recently used values over the
        budget; a value over the whole budget is not kept."""
        nbytes = int(nbytes)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if nbytes > self.max_bytes:
                return
            self._items[key] = (value, nbytes)
            self.nbytes += nbytes
            while self.nbytes > self.max_bytes:
                _, (_, n) = self._items.popitem(last=False)
                self.nbytes -= n

    def get_or_compute(self, key: Hashable, compute: Callable[[], object], size: Callable[[object], int]):
        """The cached value of ``key``, or ``compute()`` kept with its ``size(value)`` in bytes."""
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value, size(value))
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.nbytes = 0


def cached(cache: BytesLRU | None, key: Hashable, compute: Callable[[], object], size: Callable[[object], int]):
    """``cache.get_or_compute(key, compute, size)``, or ``compute()`` when there is no cache."""
    return compute() if cache is None else cache.get_or_compute(key, compute, size)
