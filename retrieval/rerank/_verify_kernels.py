"""Compiled loop of :func:`retrieval.rerank.verification.verify`'s first step: every single-correspondence
hypothesis scored against every tentative match in one pass, without the (hypotheses x matches) temporaries."""

from __future__ import annotations

from numba import njit

__all__ = ["score_hypotheses"]


@njit(cache=True, nogil=True)
def score_hypotheses(T, qx, qy, dx, dy, thr2, counts, costs):
    """For each affine hypothesis ``T[h]`` (2, 3) float32: ``counts[h]`` the matches it maps within ``sqrt(thr2)``
    pixels and ``costs[h]`` the truncated quadratic cost ``sum_i min(e_i^2, thr2)`` (float64 sum of float32
    terms). The residuals are computed in float32 in the order of the vectorised form (``a x + b y + (c - x')``)."""
    for h in range(T.shape[0]):
        a, b, c = T[h, 0, 0], T[h, 0, 1], T[h, 0, 2]
        d, e, f = T[h, 1, 0], T[h, 1, 1], T[h, 1, 2]
        n = 0
        s = 0.0
        for i in range(qx.shape[0]):
            ex = a * qx[i] + b * qy[i] + (c - dx[i])
            ey = d * qx[i] + e * qy[i] + (f - dy[i])
            e2 = ex * ex + ey * ey
            if e2 < thr2:
                n += 1
                s += e2
            else:
                s += thr2
        counts[h] = n
        costs[h] = s
