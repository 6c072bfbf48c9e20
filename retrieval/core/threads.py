"""One BLAS thread for the small matrix products of a search (threadpoolctl).

A search multiplies small matrices (a query's descriptors by one image's, a local PCA of a few thousand rows). A
multi-threaded BLAS gains nothing on them, and on a busy machine its threads spin waiting for cores that other
processes hold: on 2 cores with other jobs running, one image's ratio-test matching took 30 ms with two OpenBLAS
threads and 0.13 ms with one. Parallel searches (a server's worker threads) get their parallelism from running
side by side instead.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

_CONTROLLER = []
_LOCAL = threading.local()


@contextmanager
def single_threaded_blas():
    """Context in which the calling thread's BLAS calls use one thread; re-entrant: the outermost context of a
    thread sets the limit and restores the previous count. The ``threadpoolctl`` controller is created once
    (~10 ms); each use then costs microseconds."""
    depth = getattr(_LOCAL, "depth", 0)
    if depth == 0:
        if not _CONTROLLER:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER.append(ThreadpoolController())
        _LOCAL.limiter = _CONTROLLER[0].limit(limits=1, user_api="blas")
    _LOCAL.depth = depth + 1
    try:
        yield
    finally:
        _LOCAL.depth -= 1
        if _LOCAL.depth == 0:
            _LOCAL.limiter.restore_original_limits()
            _LOCAL.limiter = None
