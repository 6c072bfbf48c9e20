"""Whether this process has loaded numba. A single query takes the NumPy path of a search that has one
(:class:`retrieval.search.IVFADC`) while numba is not loaded, so that a new process's first answer does not wait for
numba's start-up (about half a second: its import, and the type registries its first compiled call loads even from
the on-disk cache); both paths give the same results, bit for bit (each module's tests compare them). The
application loads the compiled kernels from a process's second search on (:mod:`retrieval.app.searcher`)."""

from __future__ import annotations

import sys

__all__ = ["numba_loaded"]


def numba_loaded() -> bool:
    """True once any module of this process has imported numba."""
    return "numba" in sys.modules
