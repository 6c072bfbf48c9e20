"""One BLAS thread for the small matrix products of a search (threadpoolctl).

A search multiplies small matrices (a query's descriptors by one image's, a local PCA of a few thousand rows). A
multi-threaded BLAS gains nothing on them, and on a busy machine its threads spin waiting for cores that other
processes hold: on 2 cores with other jobs running, one image's ratio-test matching took 30 ms with two OpenBLAS
threads and 0.13 ms with one. Parallel searches (a server's worker threads) get their parallelism from running
side by side instead.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

_CONTROLLER = []
_LIMIT = {"depth": 0, "limiter": None}   # the process's one limit: BLAS's thread count is a global setting
_LIMIT_LOCK = threading.Lock()


@contextmanager
def single_threaded_blas():
    """Context in which BLAS calls use one thread. The thread count of a BLAS library is one setting of the process,
    not of a thread: the first context to open (in any thread) sets it to one and the last to close restores it, so
    that searches running side by side all compute with one thread (and give the same floats as a search alone)
    whatever the order they start and end in; re-entrant. The ``threadpoolctl`` controller (~10 ms) is created again
    only when modules were imported since (one may have loaded another BLAS library, e.g. SciPy's); each use
    otherwise costs microseconds."""
    with _LIMIT_LOCK:
        if _LIMIT["depth"] == 0:
            if not _CONTROLLER or _CONTROLLER[0][0] != len(sys.modules):
                from threadpoolctl import ThreadpoolController

                n_modules = len(sys.modules)
                _CONTROLLER[:] = [(n_modules, ThreadpoolController())]
            _take_blas_control()
            _LIMIT["limiter"] = _CONTROLLER[0][1].limit(limits=1, user_api="blas")
        _LIMIT["depth"] += 1
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            _LIMIT["depth"] -= 1
            if _LIMIT["depth"] == 0:
                _take_blas_control()
                _LIMIT["limiter"].restore_original_limits()
                _LIMIT["limiter"] = None


def _take_blas_control() -> None:
    """Let the calling thread set OpenBLAS's thread count: threadpoolctl 3.8 lets only the first thread that set it
    change it again (others silently do nothing), while here whichever thread opens the first context or closes the
    last one sets it, under :data:`_LIMIT_LOCK`."""
    from threadpoolctl import OpenBLASController

    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(threads: int):
    """The process's pool of ``threads`` worker threads (created on first use, shared by every caller), for work
    whose heavy part releases the GIL (matrix products): the images of a search's shortlist matched side by
    side. Callers submit from inside :func:`single_threaded_blas`, so each worker's products use one BLAS thread."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        pool = _POOLS.get(int(threads))
        if pool is None:
            pool = _POOLS[int(threads)] = ThreadPoolExecutor(int(threads), thread_name_prefix="retrieval-pool")
        return pool


def parallel_map(fn, items: list, threads: int) -> list:
    """``[fn(x) for x in items]``, run on :func:`shared_pool` when ``threads > 1`` and there are several items
    (same results in the same order; an exception of ``fn`` is raised here)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    return list(shared_pool(threads).map(fn, items))
