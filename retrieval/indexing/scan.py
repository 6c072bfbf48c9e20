"""Table look-up scan kernels: the one interface shared by PQ's ADC and the binary codes' asymmetric distances.

A code is ``M`` sub-codes (one per column); a query is turned into ``M`` look-up tables of ``ksub`` entries;
the distance of a database code ``c`` is ``sum_m tables[m, c[m]]`` (seed 002 eq. 23 for PQ; seed 000 eq. 26/33
for binary codes, where each byte is a sub-code with a 256-entry table).

This module holds the reference (NumPy) implementation; the compiled kernels replace the bodies while keeping
the signatures.
"""

from __future__ import annotations

import numpy as np


def lut_scan_topk(tables: np.ndarray, codes: np.ndarray, k: int, *, threads: int = 1,
                  largest: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """k smallest (or largest) table-look-up sums for a batch of queries.

    Parameters
    ----------
    tables : ndarray of shape (nq, M, ksub), dtype float32
        One table per sub-code per query.
    codes : ndarray of shape (n, M), dtype uint8 or uint16
        Database codes, row-major.
    k : int
        Number of results per query.
    threads : int
        Threads over queries (compiled kernel only).
    largest : bool
        Keep the k largest sums instead of the smallest (similarities).

    Returns
    -------
    distances : ndarray of shape (nq, k), dtype float32
        Sorted best first; padded with +inf (-inf if ``largest``) when ``n < k``.
    ids : ndarray of shape (nq, k), dtype int64
        Row indices into ``codes``; padded with -1.
    """
    tables = np.asarray(tables, dtype=np.float32)
    if tables.ndim == 2:
        tables = tables[None]
    nq, M, ksub = tables.shape
    n = codes.shape[0]
    if codes.ndim != 2 or codes.shape[1] != M:
        raise ValueError(f"codes must have shape (n, {M}) to match tables of shape {tables.shape}; got {codes.shape}.")
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
        order = part[np.lexsort((part, key[part]))]
        D[q, :kk] = dist[order]
        ids[q, :kk] = order
    return D, ids
