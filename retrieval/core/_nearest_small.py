"""Compiled nearest-centre search for small d (PQ sub-spaces, d <= 32): one fused pass per row, faster there than
a BLAS product followed by an argmin over a (rows, K) block. Imported on first use (numba)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def nearest_small(X, Ct, c_sq, labels, sqdist):
    """X (n, d) float32, Ct (d, K) float32, c_sq (K,) float32 -> labels (n,) int64, sqdist (n,) float32 (in place).

    Ranks by ``||c||^2 - 2 <x, c>`` accumulated in float32; ties go to the lowest index."""
    n, d = X.shape
    K = Ct.shape[1]
    buf = np.empty(K, dtype=np.float32)
    for i in range(n):
        for j in range(K):
            buf[j] = c_sq[j]
        xn = np.float32(0.0)
        for t in range(d):
            v = X[i, t]
            xn += v * v
            v2 = np.float32(-2.0) * v
            for j in range(K):
                buf[j] += v2 * Ct[t, j]
        best = 0
        bv = buf[0]
        for j in range(1, K):
            if buf[j] < bv:
                bv = buf[j]
                best = j
        labels[i] = best
        sqdist[i] = max(bv + xn, np.float32(0.0))
