"""The search loops of :class:`retrieval.search.ivfadc.IVFADC` for one query, in NumPy: what a process that has not
loaded numba runs (a new ``retrieval query`` process answers without numba's start-up, about half a second).

Each function performs the same float32 operations, in the same order and with the same rounding, as its compiled
counterpart (``_ivfadc_kernels.coarse_topk``, ``_ivfadc_kernels.ivf_scan``, ``retrieval.codes.pq._tables_kernel``)
and selects by the same total order, (distance, index) ascending; so a query ranks alike on both paths, bit for bit
(``tests/search/test_ivfadc_numpy.py``). The compiled scan sums a code's ``M`` table entries in four partial sums
(two terms each for ``M = 8``, four for ``M = 16``, strided otherwise); the sums here follow the same grouping.
"""

from __future__ import annotations

import numpy as np

__all__ = ["coarse_topk_one", "ivf_scan_one", "tables_one"]


def smallest_lex(d: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest (d, idx) pairs in lexicographic order, ascending, padded with (inf, -1)."""
    n = d.shape[0]
    if n > k:
        thr = np.partition(d, k - 1)[k - 1]
        keep = np.flatnonzero(d <= thr)
        d, idx = d[keep], idx[keep]
    order = np.lexsort((idx, d))[:k]
    outD = np.full(k, np.inf, np.float32)
    outI = np.full(k, -1, np.int64)
    outD[:len(order)] = d[order]
    outI[:len(order)] = idx[order]
    return outD, outI


def coarse_topk_one(v: np.ndarray, xnorm: np.float32, p: int) -> tuple[np.ndarray, np.ndarray]:
    """``nprobe = p`` lists of one query: v (nlist,) float32 = ``float32(||c||^2 - 2 <x, c>)`` -> (distances
    ``max(v + ||x||^2, 0)`` (p,) float32, lists (p,) int64), nearest first, (inf, -1) padded."""
    d, lists = smallest_lex(v, np.arange(v.shape[0], dtype=np.int64), p)
    valid = lists >= 0
    d[valid] = np.maximum(d[valid] + np.float32(xnorm), np.float32(0.0))
    return d, lists


def tables_one(x: np.ndarray, codebooks: np.ndarray, l2: bool) -> np.ndarray:
    """(M, ksub) float32: ``||x^m - c_{m,j}||^2`` (l2) or ``<x^m, c_{m,j}>`` for one vector x (d,), summed over
    the ``dsub`` coordinates in order from 0 as the compiled kernel does."""
    M, ksub, dsub = codebooks.shape
    xs = np.asarray(x, np.float32).reshape(M, 1, dsub)
    out = np.zeros((M, ksub), np.float32)
    for t in range(dsub):
        if l2:
            u = xs[:, :, t] - codebooks[:, :, t]
            out += u * u
        else:
            out += xs[:, :, t] * codebooks[:, :, t]
    return out


def _code_sums(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """sum_m table[m, codes[r, m]] for each row, float32, grouped as ``scan_block_into_heap`` groups the sum."""
    M = codes.shape[1]
    c = [np.take(table[m], codes[:, m]) for m in range(M)]
    if M == 8:
        s0, s1, s2, s3 = c[0] + c[1], c[2] + c[3], c[4] + c[5], c[6] + c[7]
    elif M == 16:
        s0 = c[0] + c[1] + c[2] + c[3]
        s1 = c[4] + c[5] + c[6] + c[7]
        s2 = c[8] + c[9] + c[10] + c[11]
        s3 = c[12] + c[13] + c[14] + c[15]
    else:
        zero = np.zeros(codes.shape[0], np.float32)
        s = [zero.copy(), zero.copy(), zero.copy(), zero]
        M4 = M - M % 4
        for m in range(0, M4, 4):
            for j in range(4):
                s[j] += c[m + j]
        for m in range(M4, M):
            s[0] += c[m]
        s0, s1, s2, s3 = s
    return (s0 + s1) + (s2 + s3)


def ivf_scan_one(k, probes, coarse, term3, term2, x, centroids, codebooks, codes, ids, offsets):
    """The ``k`` best rows (positions into ``codes``) of one query over its probed lists, as ``ivf_scan`` keeps
    them: probes (nprobe,) int64 (-1 = none), coarse (nprobe,) float32, term3 (M, ksub) float32 or None,
    term2 (nlist, M, ksub) float32 or None (tables from the residual), ids (n,) or empty (rows with a negative id
    are removed). Returns (distances (k,) float32, rows (k,) int64), ascending, (inf, -1) padded."""
    dists, rows = [], []
    for p in range(probes.shape[0]):
        lst = int(probes[p])
        if lst < 0:
            continue
        a, b = int(offsets[lst]), int(offsets[lst + 1])
        if a == b:
            continue
        if term2 is not None:
            table = term2[lst] + term3
            bias = np.float64(coarse[p])
        else:
            table = tables_one(x - centroids[lst], codebooks, True)
            bias = np.float64(0.0)
        s = _code_sums(table, np.ascontiguousarray(codes[a:b]))
        dists.append((bias + s.astype(np.float64)).astype(np.float32))
        rows.append(np.arange(a, b, dtype=np.int64))
    if not dists:
        return np.full(k, np.inf, np.float32), np.full(k, -1, np.int64)
    d = np.concatenate(dists)
    r = np.concatenate(rows)
    if ids.shape[0]:
        live = ids[r] >= 0
        d, r = d[live], r[live]
    return smallest_lex(d, r, k)
