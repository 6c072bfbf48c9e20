"""The compiled loop of :mod:`retrieval.codes.pq`: its look-up tables (Jegou et al. 2012, eq. 23), imported on
first use so that importing the quantiser loads no numba."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["tables_kernel"]


@njit(cache=True, nogil=True)
def tables_kernel(x, codebooks, out, l2):
    """out[q, m, j] = ||x_q^m - c_{m,j}||^2 (l2) or <x_q^m, c_{m,j}>; x (nq, d), codebooks (M, ksub, dsub)."""
    M, ksub, dsub = codebooks.shape
    for q in range(x.shape[0]):
        for m in range(M):
            xm = x[q, m * dsub:(m + 1) * dsub]
            for j in range(ksub):
                c = codebooks[m, j]
                s = np.float32(0.0)
                if l2:
                    for t in range(dsub):
                        u = xm[t] - c[t]
                        s += u * u
                else:
                    for t in range(dsub):
                        s += xm[t] * c[t]
                out[q, m, j] = s
