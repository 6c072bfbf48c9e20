"""Compiled loop of :func:`retrieval.rerank.cells.probed_matches`: the two nearest database rows of each query row
among the rows of its probed cells."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["probe_nearest_two"]


@njit(cache=True, nogil=True, fastmath=True)
def probe_nearest_two(q, probes, db, perm, starts):
    """Squared distances ``(d1, d2)`` (n,) float32 of each row of ``q`` (n, d) to its nearest and second nearest
    rows of ``db`` among those listed for its cells ``probes[i]`` (``perm[starts[c]:starts[c + 1]]``), inf when
    fewer were found, and ``j1`` (n,) int64 the nearest row (-1 when none). The distances are ``|q|^2 + |b|^2 - 2
    q.b``, as the exact test computes them."""
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
    j1 = np.full(n, -1, np.int64)
    for i in range(n):
        b1 = np.float32(np.inf)
        b2 = np.float32(np.inf)
        best = -1
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
                if v < b1 or (v == b1 and j < best):
                    b2 = b1
                    b1 = v
                    best = j
                elif v < b2:
                    b2 = v
        d1[i] = max(b1 + q_sq, np.float32(0.0))
        d2[i] = max(b2 + q_sq, np.float32(0.0))
        j1[i] = best
    return d1, d2, j1


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


@njit(cache=True, nogil=True)
def unprobed_bound(D, probes, gap2):
    """For each row: the smallest squared distance to a cell it does not probe, by the bisecting hyperplane between
    that cell and its nearest (``probes[i, 0]``): ``max(0, D[i, c] - D[i, c1])^2 / (4 |c - c1|^2)`` (``D``: squared
    distances to the centres up to a per-row constant, ``gap2 = 4 |c_i - c_j|^2``); inf when every cell is
    probed. (n,) float32."""
    n, k = D.shape
    p = probes.shape[1]
    out = np.full(n, np.inf, np.float32)
    mark = np.zeros(k, np.bool_)
    for i in range(n):
        for t in range(p):
            mark[probes[i, t]] = True
        c1 = probes[i, 0]
        base = D[i, c1]
        b = np.inf
        for c in range(k):
            if mark[c]:
                continue
            g = gap2[c, c1]
            if g <= 0.0:
                b = 0.0
                break
            h = max(D[i, c] - base, np.float32(0.0))
            v = h * h / g
            if v < b:
                b = v
        for t in range(p):
            mark[probes[i, t]] = False
        out[i] = b
    return out
