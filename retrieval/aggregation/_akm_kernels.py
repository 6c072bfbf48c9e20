"""Compiled kernels of the approximate k-means assignment structure (see :mod:`large_vocabulary`).

The search is organised for one image's descriptors at a time (thousands of rows): rows are grouped by the
coarse cells they probe, so the words of a cell are read once per batch and scored against all the rows that
probe it with one small matrix product (BLAS ``sgemm`` through numba's ``np.dot``), instead of one
vector-matrix product per (row, cell) pair. Parallel loops run over row blocks (probe) and over cells (scan).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_ROW_BLOCK = 64     # rows per probe block: a (64, n_coarse) float32 score block stays in L2
_GEMM_MIN_ROWS = 4        # fewer rows in a cell: a vectorised loop instead of the BLAS call
_FM = {"nnan", "nsz", "arcp", "contract", "afn", "reassoc"}   # fast math without "ninf": top-k lists start at +inf


@njit(inline="always")
def _insert(dist, idx, d, i):
    """Insert (d, i) into the ascending arrays (dist, idx); the caller checked that it beats the last entry."""
    j = dist.shape[0] - 1
    while j > 0 and dist[j - 1] > d:
        dist[j] = dist[j - 1]
        idx[j] = idx[j - 1]
        j -= 1
    dist[j] = d
    idx[j] = i


@njit(parallel=True, fastmath=_FM, cache=True)
def probe_cells(Xr, coarse_rT, coarse_nrm, nprobe, probes):
    """probes[i] = the nprobe nearest cells of row i, ranked by ``||c||^2 - 2 <x, c>`` in the PCA space.

    Xr (n, dr) float32 C-contiguous; coarse_rT (dr, C) float32 C-contiguous; coarse_nrm (C,) float32;
    probes (n, nprobe) int64, written.
    """
    n = Xr.shape[0]
    C = coarse_rT.shape[1]
    nb = (n + _ROW_BLOCK - 1) // _ROW_BLOCK
    for b in prange(nb):
        lo = b * _ROW_BLOCK
        hi = min(n, lo + _ROW_BLOCK)
        G = np.dot(Xr[lo:hi], coarse_rT)
        pd = np.empty(nprobe, dtype=np.float32)
        pc = np.empty(nprobe, dtype=np.int64)
        buf = np.empty(C, dtype=np.float32)
        for r in range(hi - lo):
            g = G[r]
            for c in range(C):                       # vectorised
                buf[c] = coarse_nrm[c] - np.float32(2.0) * g[c]
            pd[:] = np.inf
            pc[:] = -1
            thr = np.float32(np.inf)                 # scalar copy of pd[-1]: kept in a register
            for c in range(C):
                if buf[c] < thr:
                    _insert(pd, pc, buf[c], c)
                    thr = pd[nprobe - 1]
            for a in range(nprobe):
                probes[lo + r, a] = pc[a]


@njit(cache=True)
def group_by_cell(probes, n_cells):
    """Counting sort of the (row, slot) pairs by probed cell.

    Returns (q_indptr (C + 1,) int64, q_rows (n * nprobe,) int64, q_slots (n * nprobe,) int64): the pairs
    probing cell c are ``q_indptr[c]:q_indptr[c + 1]``.
    """
    n, nprobe = probes.shape
    q_indptr = np.zeros(n_cells + 1, dtype=np.int64)
    for i in range(n):
        for a in range(nprobe):
            q_indptr[probes[i, a] + 1] += 1
    for c in range(n_cells):
        q_indptr[c + 1] += q_indptr[c]
    fill = q_indptr[:-1].copy()
    q_rows = np.empty(n * nprobe, dtype=np.int64)
    q_slots = np.empty(n * nprobe, dtype=np.int64)
    for i in range(n):
        for a in range(nprobe):
            c = probes[i, a]
            p = fill[c]
            q_rows[p] = i
            q_slots[p] = a
            fill[c] = p + 1
    return q_indptr, q_rows, q_slots


@njit(parallel=True, fastmath=_FM, cache=True)
def scan_cells(Xr, cell_indptr, words_blk, words_nrm, q_indptr, q_rows, q_slots, first, bound, cand_d, cand_w):
    """Stage 2, cell by cell: the rows probing cell c are gathered into Q (m, dr) and scored against the cell's
    words with one product ``Q @ W_c^T`` (W_c stored transposed, (dr, n_c), in ``words_blk``); row i's
    ``n_cand`` best words of its a-th probed cell (by ``||w||^2 - 2 <x, w>``) go to ``cand_*[i, a, :]``.

    ``first`` selects the pairs scanned in this pass: True = only slot 0 (each row's nearest cell), after
    which ``bound[i]`` (n,) float32 is set to the n_cand-th best score of that cell; False = the other slots,
    where only words scoring below ``bound[i]`` can enter (a word beyond it cannot be among the row's n_cand
    best overall, so the output of the final merge is unchanged while the insertions become rare).
    """
    C = cell_indptr.shape[0] - 1
    dr = Xr.shape[1]
    n_cand = cand_d.shape[2]
    for c in prange(C):
        lo = cell_indptr[c]
        hi = cell_indptr[c + 1]
        p0 = q_indptr[c]
        p1 = q_indptr[c + 1]
        m = 0
        for p in range(p0, p1):
            if (q_slots[p] == 0) == first:
                m += 1
        if hi == lo or m == 0:
            continue
        Q = np.empty((m, dr), dtype=np.float32)
        sel = np.empty(m, dtype=np.int64)
        r = 0
        for p in range(p0, p1):
            if (q_slots[p] == 0) == first:
                Q[r, :] = Xr[q_rows[p]]
                sel[r] = p
                r += 1
        Wt = words_blk[lo * dr: hi * dr].reshape((dr, hi - lo))
        if m >= _GEMM_MIN_ROWS:
            G = np.dot(Q, Wt)
        else:                                        # a few rows: a vectorised loop beats the BLAS call
            G = np.zeros((m, hi - lo), dtype=np.float32)
            for r in range(m):
                g = G[r]
                for t in range(dr):
                    x = Q[r, t]
                    row = Wt[t]
                    for j in range(hi - lo):
                        g[j] += x * row[j]
        nrm = words_nrm[lo:hi]
        cd = np.empty(n_cand, dtype=np.float32)
        cw = np.empty(n_cand, dtype=np.int64)
        for r in range(m):
            i = q_rows[sel[r]]
            a = q_slots[sel[r]]
            g = G[r]
            low = np.float32(np.inf)
            for j in range(hi - lo):                 # vectorised min reduction (needs "nnan")
                low = min(low, nrm[j] - np.float32(2.0) * g[j])
            thr = np.float32(np.inf) if first else bound[i]
            if not low < thr:                        # most far cells stop here: no word beats the bound
                cand_w[i, a, 0] = -1
                continue
            cd[:] = np.inf
            cw[:] = -1
            for j in range(hi - lo):
                v = nrm[j] - np.float32(2.0) * g[j]
                if v < thr:
                    _insert(cd, cw, v, lo + j)
                    thr = min(thr, cd[n_cand - 1])
            if first:
                bound[i] = cd[n_cand - 1]
            for b in range(n_cand):                  # the list ends at the first -1 (read by rerank)
                cand_d[i, a, b] = cd[b]
                cand_w[i, a, b] = cw[b]
                if cw[b] < 0:
                    break


@njit(parallel=True, fastmath=_FM, cache=True)
def rerank(X, words, cand_d, cand_w, m, out_w, out_d):
    """Stage 3: merge the candidates of all probed cells, keep the n_cand best (PCA-space score), re-rank them
    with the exact full-dimensional squared distance and keep the m best (out_w (n, m) int64, out_d float32)."""
    n, nprobe, n_cand = cand_d.shape
    d = X.shape[1]
    for i in prange(n):
        cd = np.full(n_cand, np.inf, dtype=np.float32)
        cw = np.full(n_cand, -1, dtype=np.int64)
        for a in range(nprobe):
            for b in range(n_cand):
                w = cand_w[i, a, b]
                if w < 0 or cand_d[i, a, b] >= cd[n_cand - 1]:
                    break                                   # each slot's list is ascending
                _insert(cd, cw, cand_d[i, a, b], w)
        ed = np.full(m, np.inf, dtype=np.float32)
        ew = np.full(m, -1, dtype=np.int64)
        for b in range(n_cand):
            w = cw[b]
            if w < 0:
                continue
            s = np.float32(0.0)
            for t in range(d):
                diff = X[i, t] - words[w, t]
                s += diff * diff
            if s < ed[m - 1]:
                _insert(ed, ew, s, w)
        for b in range(m):
            out_w[i, b] = ew[b]
            out_d[i, b] = ed[b]


def ivf_knn(X, Xr, Xp, coarse_rT, coarse_nrm, cell_indptr, words_blk, words_nrm, words, nprobe, n_cand, m,
            out_w, out_d):
    """For each row of X (n, d): nprobe nearest cells (ranked with Xp (n, dp), the first PCA coordinates), the
    n_cand best words there (ranked with Xr (n, dr)), the m best of those by the exact distance."""
    n = X.shape[0]
    C = cell_indptr.shape[0] - 1
    probes = np.empty((n, nprobe), dtype=np.int64)
    probe_cells(Xp, coarse_rT, coarse_nrm, nprobe, probes)
    q_indptr, q_rows, q_slots = group_by_cell(probes, C)
    cand_d = np.empty((n, nprobe, n_cand), dtype=np.float32)     # each (row, slot) list ends at w = -1
    cand_w = np.empty((n, nprobe, n_cand), dtype=np.int64)
    cand_w[:, :, 0] = -1                                          # slots of empty cells are never written
    bound = np.full(n, np.inf, dtype=np.float32)
    scan_cells(Xr, cell_indptr, words_blk, words_nrm, q_indptr, q_rows, q_slots, True, bound, cand_d, cand_w)
    if nprobe > 1:
        scan_cells(Xr, cell_indptr, words_blk, words_nrm, q_indptr, q_rows, q_slots, False, bound, cand_d, cand_w)
    rerank(X, words, cand_d, cand_w, m, out_w, out_d)
