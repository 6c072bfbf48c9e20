"""Table look-up scan kernels: the one interface shared by PQ's ADC and the binary codes' asymmetric distances.

A code is ``M`` sub-codes (one per column); a query is turned into ``M`` look-up tables of ``ksub`` entries;
the distance of a database code ``c`` is ``sum_m tables[m, c[m]]`` (Jegou et al. 2012, eq. 23 for PQ; Gordo et al. 2014, eq. 26/33
for binary codes, where each byte is a sub-code with a 256-entry table).

:func:`lut_scan_topk` is the compiled kernel (numba, cached compilation): one pass over the codes per query,
a bounded max-heap of the ``k`` best (distance, row) pairs, ties broken by the smaller row index, inner loops
specialised for the common code lengths. :func:`lut_scan_topk_reference` is the NumPy oracle used by the tests.
The lower-level :func:`scan_block_into_heap` is shared with the inverted-file search (``ivfadc.py``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from retrieval.core.checks import check_scalar

__all__ = ["lut_scan_topk", "lut_scan_topk_reference", "scan_block_into_heap", "heap_sort_inplace"]


# ----------------------------------------------------------------------------------------------------------------
# heap primitives (max-heap on (distance, id): the root is the worst of the k kept candidates)


@njit(cache=True, nogil=True, inline="always")
def _greater(d1, i1, d2, i2):
    return d1 > d2 or (d1 == d2 and i1 > i2)


@njit(cache=True, nogil=True)
def sift_down(hd, hi, size, pos, d, i):
    """Place (d, i) at ``pos`` of the heap of ``size`` items and sift it down."""
    while True:
        c = 2 * pos + 1
        if c >= size:
            break
        c2 = c + 1
        if c2 < size and _greater(hd[c2], hi[c2], hd[c], hi[c]):
            c = c2
        if _greater(hd[c], hi[c], d, i):
            hd[pos] = hd[c]
            hi[pos] = hi[c]
            pos = c
        else:
            break
    hd[pos] = d
    hi[pos] = i


@njit(cache=True, nogil=True)
def heap_sort_inplace(hd, hi):
    """Turn a max-heap (hd float32 (k,), hi int64 (k,)) into ascending (distance, id) order, in place."""
    k = hd.shape[0]
    for end in range(k - 1, 0, -1):
        d = hd[end]
        i = hi[end]
        hd[end] = hd[0]
        hi[end] = hi[0]
        sift_down(hd, hi, end, 0, d, i)


@njit(cache=True, nogil=True)
def _offer(hd, hi, thr, thr_i, d, r, ids, use_ids):
    """Offer (d, r), with ``d <= thr``, to the full heap whose root is (thr, thr_i): kept when it beats the root
    and row ``r`` is not removed (``use_ids`` and ``ids[r] < 0``). Returns the (new) root. Called by the scan
    loops only on that rare path, so the common path (``d > thr``) stays a compare-and-continue."""
    if (d < thr or r < thr_i) and not (use_ids and ids[r] < 0):
        sift_down(hd, hi, hd.shape[0], 0, d, r)
        return hd[0], hi[0]
    return thr, thr_i


@njit(cache=True, nogil=True)
def scan_block_into_heap(table, codes, start, stop, bias, ids, hd, hi):
    """Scan rows ``start:stop`` of ``codes`` with one query's tables and keep the best in the heap.

    Parameters
    ----------
    table : ndarray of shape (M, ksub), dtype float32
    codes : ndarray of shape (n, M), dtype uint8 or uint16 (C order)
    start, stop : int
        Row range scanned.
    bias : float
        Added to every distance (the coarse term of IVFADC's distance decomposition).
    ids : ndarray of shape (n,) or (0,), dtype int64
        Labels of the rows, only used to skip rows whose label is negative (removed entries); empty: no row
        is skipped.
    hd, hi : ndarrays of shape (k,), float32 / int64
        Max-heap of (distance, row index) updated in place; ties broken by the smaller row index.
    """
    M = codes.shape[1]
    use_ids = ids.shape[0] > 0
    thr = hd[0]
    thr_i = hi[0]
    if M == 8:
        for r in range(start, stop):
            c = codes[r]
            s0 = table[0, c[0]] + table[1, c[1]]
            s1 = table[2, c[2]] + table[3, c[3]]
            s2 = table[4, c[4]] + table[5, c[5]]
            s3 = table[6, c[6]] + table[7, c[7]]
            d = np.float32(bias + ((s0 + s1) + (s2 + s3)))
            if d <= thr:
                thr, thr_i = _offer(hd, hi, thr, thr_i, d, r, ids, use_ids)
    elif M == 16:
        for r in range(start, stop):
            c = codes[r]
            s0 = table[0, c[0]] + table[1, c[1]] + table[2, c[2]] + table[3, c[3]]
            s1 = table[4, c[4]] + table[5, c[5]] + table[6, c[6]] + table[7, c[7]]
            s2 = table[8, c[8]] + table[9, c[9]] + table[10, c[10]] + table[11, c[11]]
            s3 = table[12, c[12]] + table[13, c[13]] + table[14, c[14]] + table[15, c[15]]
            d = np.float32(bias + ((s0 + s1) + (s2 + s3)))
            if d <= thr:
                thr, thr_i = _offer(hd, hi, thr, thr_i, d, r, ids, use_ids)
    else:
        M4 = M - M % 4
        for r in range(start, stop):
            c = codes[r]
            s0 = np.float32(0.0)
            s1 = np.float32(0.0)
            s2 = np.float32(0.0)
            s3 = np.float32(0.0)
            for m in range(0, M4, 4):
                s0 += table[m, c[m]]
                s1 += table[m + 1, c[m + 1]]
                s2 += table[m + 2, c[m + 2]]
                s3 += table[m + 3, c[m + 3]]
            for m in range(M4, M):
                s0 += table[m, c[m]]
            d = np.float32(bias + ((s0 + s1) + (s2 + s3)))
            if d <= thr:
                thr, thr_i = _offer(hd, hi, thr, thr_i, d, r, ids, use_ids)


@njit(cache=True, nogil=True)
def _scan_queries(tables, codes, k, q0, q1, outD, outI):
    """Exhaustive scan for queries q0:q1; results written into outD / outI rows (ascending)."""
    n = codes.shape[0]
    no_ids = np.empty(0, dtype=np.int64)
    hd = np.empty(k, dtype=np.float32)
    hi = np.empty(k, dtype=np.int64)
    for q in range(q0, q1):
        hd[:] = np.inf
        hi[:] = -1
        scan_block_into_heap(tables[q], codes, 0, n, 0.0, no_ids, hd, hi)
        heap_sort_inplace(hd, hi)
        outD[q, :] = hd
        outI[q, :] = hi


def _check_inputs(tables, codes, k, threads):
    tables = np.asarray(tables, dtype=np.float32)
    if tables.ndim == 2:
        tables = tables[None]
    if tables.ndim != 3:
        raise ValueError(f"tables must have shape (nq, M, ksub) or (M, ksub); got shape {tables.shape}.")
    codes = np.asarray(codes)
    if codes.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"codes must be uint8 or uint16; got dtype {codes.dtype}.")
    nq, M, ksub = tables.shape
    if codes.ndim != 2 or codes.shape[1] != M:
        raise ValueError(f"codes must have shape (n, {M}) to match tables of shape {tables.shape}; got {codes.shape}.")
    if ksub < 1:
        raise ValueError(f"tables must have at least one entry per sub-code; got shape {tables.shape}.")
    check_scalar(k, "k", "lut_scan_topk", low=1)
    check_scalar(threads, "threads", "lut_scan_topk", low=1)
    # the compiled kernel does not bounds-check: refuse codes beyond the tables (free when ksub covers the dtype)
    if ksub < np.iinfo(codes.dtype).max + 1 and codes.size and int(codes.max()) >= ksub:
        raise ValueError(f"codes must be smaller than ksub={ksub} (the tables' last axis); got {int(codes.max())}.")
    return tables, codes


def lut_scan_topk(tables: np.ndarray, codes: np.ndarray, k: int, *, threads: int = 1,
                  largest: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """k smallest (or largest) table-look-up sums for a batch of queries (Jegou et al. 2012, eq. 21 and 23).

    Compiled kernel. Code values must be below ``ksub`` (checked, at no cost when ``ksub`` covers the code dtype,
    e.g. 256 entries for uint8). Ties are broken by the smaller row index, like :func:`lut_scan_topk_reference`.

    Parameters
    ----------
    tables : ndarray of shape (nq, M, ksub) or (M, ksub), dtype float32
        One table per sub-code per query.
    codes : ndarray of shape (n, M), dtype uint8 or uint16
        Database codes, row-major.
    k : int
        Number of results per query.
    threads : int
        Threads over queries (the kernel releases the GIL).
    largest : bool
        Keep the k largest sums instead of the smallest (similarities).

    Returns
    -------
    distances : ndarray of shape (nq, k), dtype float32
        Sorted best first; padded with +inf (-inf if ``largest``) when ``n < k``.
    ids : ndarray of shape (nq, k), dtype int64
        Row indices into ``codes``; padded with -1.
    """
    tables, codes = _check_inputs(tables, codes, k, threads)
    if largest:
        tables = -tables
    tables = np.ascontiguousarray(tables)
    codes = np.ascontiguousarray(codes)
    nq = tables.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    ids = np.empty((nq, k), dtype=np.int64)
    if threads == 1 or nq < 2:
        _scan_queries(tables, codes, k, 0, nq, D, ids)
    else:
        bounds = np.linspace(0, nq, min(threads, nq) + 1).astype(np.int64)
        with ThreadPoolExecutor(max_workers=len(bounds) - 1) as pool:
            futures = [pool.submit(_scan_queries, tables, codes, k, int(a), int(b), D, ids)
                       for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            for f in futures:
                f.result()
    if largest:
        np.negative(D, out=D)
    return D, ids


def lut_scan_topk_reference(tables: np.ndarray, codes: np.ndarray, k: int, *, threads: int = 1,
                            largest: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """NumPy reference of :func:`lut_scan_topk` (same contract; ``threads`` ignored). Used as the test oracle."""
    tables, codes = _check_inputs(tables, codes, k, threads)
    nq, M, ksub = tables.shape
    n = codes.shape[0]
    D = np.full((nq, k), -np.inf if largest else np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    cols = np.arange(M)
    for q in range(nq):
        dist = tables[q][cols[None, :], codes.astype(np.intp)].sum(axis=1) if n else np.empty(0, np.float32)
        kk = min(k, n)
        if kk == 0:
            continue
        key = -dist if largest else dist
        part = np.argpartition(key, kk - 1)[:kk]
        # ties at the k-th distance: keep the smallest row indices, as the compiled kernel does
        kth = np.sort(key[part])[-1]
        cand = np.flatnonzero(key <= kth)
        order = cand[np.lexsort((cand, key[cand]))][:kk]
        D[q, :kk] = dist[order]
        ids[q, :kk] = order
    return D, ids
