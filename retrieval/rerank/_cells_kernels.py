"""Compiled loop of :func:`retrieval.rerank.cells.probed_matches`: the two nearest database rows of each query row
among the rows of its probed cells."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["probe_nearest_two"]


@njit(cache=True, nogil=True, fastmath=True)
def probe_nearest_two(q, probes, db, perm, starts):
    """Squared distances ``(d1, d2)`` (n,) float32 of each row of ``q`` (n, d) to its nearest and second nearest
    rows of ``db`` among those listed for its cells ``probes[i]`` (``perm[starts[c]:starts[c + 1]]``); inf when
    fewer were found. The distances are ``|q|^2 + |b|^2 - 2 q.b``, as the exact test computes them."""
    n, d = q.shape
    m = db.shape[0]
    db_sq = np.empty(m, np.float32)
    for j in range(m):
        s = np.float32(0.0)
        for t in range(d):
            s += db[j, t] * db[j, t]
        db_sq[j] = s
    d1 = np.full(n, np.inf, np.float32)
    d2 = np.full(n, np.inf, np.float32)
    for i in range(n):
        b1 = np.float32(np.inf)
        b2 = np.float32(np.inf)
        q_sq = np.float32(0.0)
        for t in range(d):
            q_sq += q[i, t] * q[i, t]
        for p in range(probes.shape[1]):
            c = probes[i, p]
            for r in range(starts[c], starts[c + 1]):
                j = perm[r]
                dot = np.float32(0.0)
                for t in range(d):
                    dot += q[i, t] * db[j, t]
                v = db_sq[j] - np.float32(2.0) * dot
                if v < b1:
                    b2 = b1
                    b1 = v
                elif v < b2:
                    b2 = v
        d1[i] = max(b1 + q_sq, np.float32(0.0))
        d2[i] = max(b2 + q_sq, np.float32(0.0))
    return d1, d2


@njit(cache=True, nogil=True)
def smallest_columns(D, p):
    """The columns of the ``p`` smallest values of each row of ``D`` (n, k), nearest first (ties: lowest column),
    (n, p) int32: one pass per row keeping a sorted list of ``p``."""
    n, k = D.shape
    out = np.empty((n, p), np.int32)
    best = np.empty(p, np.float32)
    for i in range(n):
        m = 0
        for c in range(k):
            v = D[i, c]
            if m == p and v >= best[p - 1]:
                continue
            j = m if m < p else p - 1
            while j > 0 and best[j - 1] > v:
                best[j] = best[j - 1]
                out[i, j] = out[i, j - 1]
                j -= 1
            best[j] = v
            out[i, j] = c
            if m < p:
                m += 1
    return out
