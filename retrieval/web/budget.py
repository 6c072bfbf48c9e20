"""The server's decode budget: the memory that decoding images may take at once (``--max-decode-mb``).

Every decode of ``retrieval serve`` (an upload checked, matched or added; a thumbnail rendered) first reserves
what it costs: an upper bound of its peak memory read from the file's header
(:func:`retrieval.features.image.decode_cost` for the features' working image,
:func:`~retrieval.features.image.display_cost` for a thumbnail; measured per format and mode,
:mod:`retrieval.features.decode_plan`). An upload costing more than the per-request limit (half the budget) is
refused (413, one line) before any pixel is decoded; the others wait until their cost fits in what the decodes
running meanwhile leave, so that all of them together stay within the budget. A thumbnail of a photo the index
holds may take the whole budget (it waits until nothing else decodes): a photo that was accepted is always shown
(its thumbnail, :func:`~retrieval.features.image.load_display`, is decoded as its features were, reduced band by
band, and costs what its acceptance did plus its picture: a few tens of MB). Memory freed
by a large decode is handed back to the system at once (``malloc_trim``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading

from retrieval.core.machine import share_of_memory_mb
from retrieval.web.uploads import ApiError

DEFAULT_FRACTION = 0.25
DEFAULT_MIN_MB, DEFAULT_MAX_MB = 512, 4096


def default_budget_mb() -> int:
    """A quarter of the machine's memory, from 512 MB to 4,096 MB."""
    return share_of_memory_mb(DEFAULT_FRACTION, DEFAULT_MIN_MB, DEFAULT_MAX_MB)


def _trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc.malloc_trim if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_MALLOC_TRIM = _trim()


class DecodeBudget:
    """Bytes of decoding in flight, at most ``max_bytes`` (module docstring); thread-safe."""

    def __init__(self, max_bytes: int):
        if int(max_bytes) <= 0:
            raise ValueError(f"the decode budget must be > 0 bytes; got {max_bytes}.")
        self.max_bytes = int(max_bytes)
        self.per_request = self.max_bytes // 2
        self.in_use = 0
        self.peak = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, nbytes: int, what: str, *, whole: bool = False):
        """Hold ``nbytes`` of the budget for the decode of ``what`` (waiting for room); ApiError 413 when one decode
        would take more than the per-request limit (``whole``: more than the whole budget; for the thumbnails of
        photos the index holds)."""
        nbytes = int(nbytes)
        limit = self.max_bytes if whole else self.per_request
        if nbytes > limit:
            which = "the whole --max-decode-mb" if whole else "half of --max-decode-mb"
            raise ApiError(413, f"{what} needs {nbytes / 2**20:.0f} MB to decode, more than the limit of "
                                f"{limit / 2**20:.0f} MB per image ({which} {self.max_bytes / 2**20:.0f}).")
        with self._cond:
            while self.in_use + nbytes > self.max_bytes:
                self._cond.wait()
            self.in_use += nbytes
            self.peak = max(self.peak, self.in_use)
        try:
            yield
        finally:
            with self._cond:
                self.in_use -= nbytes
                self._cond.notify_all()
            if nbytes >= 64 << 20 and _MALLOC_TRIM is not None:
                _MALLOC_TRIM(0)   # a large decode's memory goes back to the system, not to this process's heap
