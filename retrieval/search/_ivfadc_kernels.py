"""Compiled search loops of :class:`retrieval.search.ivfadc.IVFADC`: the scan of the probed inverted lists with the
ADC tables (Jegou et al. 2012, eq. 21/23 on residuals) and the coarse top-``nprobe`` selection."""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval.codes.scan import heap_sort_inplace, scan_block_into_heap, sift_down

__all__ = ["coarse_topk", "ivf_scan"]


@njit(cache=True, nogil=True)
def ivf_scan(q0, q1, k, probes, coarse, term3, term2, x, centroids, codebooks, codes, ids, offsets,
              outD, outI):
    """Visit the probed lists of queries q0:q1 and keep the k best rows (positions into ``codes``).

    probes (nq, nprobe) int64 (-1 = none), coarse (nq, nprobe) float32 = ||x - c_l||^2,
    term3 (nq, M, ksub) float32 = -2 <x^m, r_{m,j}>, term2 (nlist, M, ksub) float32 or shape (0, M, ksub) when the
    tables are built from the residual directly (x (nq, d), centroids (nlist, d), codebooks (M, ksub, dsub)).
    """
    M = codebooks.shape[0]
    ksub = codebooks.shape[1]
    dsub = codebooks.shape[2]
    precomputed = term2.shape[0] > 0
    nprobe = probes.shape[1]
    flat = np.empty(M * ksub, dtype=np.float32)
    table = flat.reshape((M, ksub))
    res = np.empty(M * dsub, dtype=np.float32)
    hd = np.empty(k, dtype=np.float32)
    hi = np.empty(k, dtype=np.int64)
    for q in range(q0, q1):
        hd[:] = np.inf
        hi[:] = -1
        for p in range(nprobe):
            lst = probes[q, p]
            if lst < 0:
                continue
            a = offsets[lst]
            b = offsets[lst + 1]
            if a == b:
                continue
            if precomputed:
                t2 = term2[lst].reshape(-1)
                t3 = term3[q].reshape(-1)
                for t in range(M * ksub):
                    flat[t] = t2[t] + t3[t]
                bias = coarse[q, p]
            else:
                for t in range(M * dsub):
                    res[t] = x[q, t] - centroids[lst, t]
                for m in range(M):
                    for j in range(ksub):
                        s = np.float32(0.0)
                        for t in range(dsub):
                            u = res[m * dsub + t] - codebooks[m, j, t]
                            s += u * u
                        table[m, j] = s
                bias = 0.0
            scan_block_into_heap(table, codes, a, b, bias, ids, hd, hi)
        heap_sort_inplace(hd, hi)
        outD[q, :] = hd
        outI[q, :] = hi


@njit(cache=True, nogil=True)
def coarse_topk(dots, cnorms, xnorms, outD, outI):
    """nprobe smallest ``||x||^2 + ||c||^2 - 2 <x, c>`` per row of dots (nq, nlist); ascending, -1/inf padded.

    The lists are ranked by ``float32(||c||^2 - 2 <x, c>)`` (computed in float64, then rounded) and the list
    number, the order :func:`retrieval.search._ivfadc_numpy.coarse_topk_one` also uses."""
    nq, nlist = dots.shape
    p = outD.shape[1]
    for q in range(nq):
        hd = outD[q]
        hi = outI[q]
        hd[:] = np.inf
        hi[:] = -1
        thr = hd[0]
        for c in range(nlist):
            v = np.float32(np.float64(cnorms[c]) - 2.0 * np.float64(dots[q, c]))
            if v < thr:
                sift_down(hd, hi, p, 0, v, c)
                thr = hd[0]
        heap_sort_inplace(hd, hi)
        for j in range(p):
            if hi[j] >= 0:
                hd[j] = max(hd[j] + xnorms[q], 0.0)
