"""The one exact nearest-centre search: squared Euclidean distances ``||x||^2 - 2 <x, c> + ||c||^2`` by blocked
matrix products (BLAS ``sgemm`` in float32), used by every exact assignment of the library (vocabularies, VLAD,
BoW, GMM initialisation, k-means, PQ and IVFADC encoding, the coarse cells of approximate k-means).

Ranking uses ``||c||^2 - 2 <x, c>`` (the row's own ``||x||^2`` cannot change the winner); the returned distance adds
``||x||^2`` back and is clipped at 0. Squared norms are summed in float64 and stored in float32. Memory is bounded:
distances are computed for blocks of at most ``block_elements`` (rows x centres) floats, centres blocked too when K
is large. Rows of at most 32 dimensions (PQ sub-spaces) take one fused compiled pass instead (same ranking
rule, accumulated in float32); a few such rows in a process that has not loaded numba (encoding one added photo)
take the same float32 operations in NumPy, with the same results bit for bit.
"""

from __future__ import annotations

import numpy as np

from retrieval.core.compiled import numba_loaded

__all__ = ["k_nearest_centers", "nearest_centers", "sq_norms", "squared_distances"]

_BLOCK_ELEMENTS = 1 << 22       # 16 MiB of float32 distances per block
_SMALL_D = 32                   # d <= 32 (PQ sub-spaces): the fused compiled pass of _nearest_small
_FEW_ROWS = 64                  # ... or, for at most this many rows without numba loaded, nearest_small_numpy


def sq_norms(A) -> np.ndarray:
    """Squared L2 norm of each row: ndarray of shape (n,), float32 (summed in float64)."""
    A = np.asarray(A)
    return np.einsum("ij,ij->i", A, A, dtype=np.float64).astype(np.float32)


def _prepare(X, C, c_sq):
    X = np.asarray(X, dtype=np.float32)
    C = np.asarray(C, dtype=np.float32)
    if X.ndim != 2 or C.ndim != 2 or X.shape[1] != C.shape[1]:
        raise ValueError(f"X (n, d) and the centres (K, d) must be 2-d with the same d; got shapes {X.shape} and "
                         f"{C.shape}.")
    if C.shape[0] < 1:
        raise ValueError("the centres must hold at least one row; got 0.")
    c_sq = sq_norms(C) if c_sq is None else np.asarray(c_sq, dtype=np.float32)
    return X, C, c_sq


def squared_distances(X, C, c_sq=None) -> np.ndarray:
    """All squared Euclidean distances, clipped at 0.

    Parameters
    ----------
    X : ndarray of shape (n, d), float32
    C : ndarray of shape (K, d), float32
    c_sq : ndarray of shape (K,), float32, optional -- precomputed ``sq_norms(C)``

    Returns
    -------
    ndarray of shape (n, K), dtype float32
    """
    X, C, c_sq = _prepare(X, C, c_sq)
    D = X @ C.T
    D *= -2.0
    D += c_sq[None, :]
    D += sq_norms(X)[:, None]
    np.maximum(D, 0.0, out=D)
    return D


def nearest_centers(X, C, c_sq=None, *, block_elements: int = _BLOCK_ELEMENTS):
    """Exact nearest centre of each row (ties: the lowest index).

    Parameters
    ----------
    X : ndarray of shape (n, d), float32
    C : ndarray of shape (K, d), float32
    c_sq : ndarray of shape (K,), float32, optional -- precomputed ``sq_norms(C)``
    block_elements : int -- bound on the floats of one distance block

    Returns
    -------
    labels : ndarray of shape (n,), dtype int64
    sqdist : ndarray of shape (n,), dtype float32 -- squared distance to that centre, clipped at 0
    """
    X, C, c_sq = _prepare(X, C, c_sq)
    n, K = X.shape[0], C.shape[0]
    if X.shape[1] <= _SMALL_D and n <= _FEW_ROWS and not numba_loaded():
        return nearest_small_numpy(X, np.ascontiguousarray(C.T), c_sq)
    if X.shape[1] <= _SMALL_D:
        from retrieval.core._nearest_small import nearest_small  # numba: compiled on first use

        labels = np.empty(n, dtype=np.int64)
        dist = np.empty(n, dtype=np.float32)
        nearest_small(np.ascontiguousarray(X), np.ascontiguousarray(C.T), np.ascontiguousarray(c_sq), labels, dist)
        return labels, dist
    cb = min(K, max(1, block_elements // 256))               # centres per block
    rb = max(1, min(n, block_elements // cb))                # rows per block
    Ct = np.ascontiguousarray(C.T)
    labels = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=np.float32)
    for a in range(0, n, rb):
        xb = X[a:a + rb]
        best = np.full(xb.shape[0], np.inf, dtype=np.float32)
        arg = np.zeros(xb.shape[0], dtype=np.int64)
        rows = np.arange(xb.shape[0])
        for c in range(0, K, cb):
            D = xb @ Ct[:, c:c + cb]
            D *= -2.0
            D += c_sq[None, c:c + cb]
            j = np.argmin(D, axis=1)
            v = D[rows, j]
            better = v < best
            best[better] = v[better]
            arg[better] = j[better] + c
        labels[a:a + rb] = arg
        dist[a:a + rb] = np.maximum(best + sq_norms(xb), 0.0)
    return labels, dist


def nearest_small_numpy(X, Ct, c_sq):
    """:func:`retrieval.core._nearest_small.nearest_small` in NumPy for a few rows: the same float32 operations in
    the same order (``||c||^2`` then ``-2 x_t c_t`` added coordinate by coordinate), ties to the lowest index."""
    n, d = X.shape
    buf = np.repeat(c_sq[None, :], n, axis=0)
    xn = np.zeros(n, np.float32)
    for t in range(d):
        v = X[:, t]
        xn += v * v
        buf += (np.float32(-2.0) * v)[:, None] * Ct[t][None, :]
    labels = np.argmin(buf, axis=1).astype(np.int64)
    best = buf[np.arange(n), labels]
    return labels, np.maximum(best + xn, np.float32(0.0))


def k_nearest_centers(X, C, r: int, c_sq=None, *, block_elements: int = _BLOCK_ELEMENTS):
    """The ``r`` nearest centres of each row, by increasing distance (exact).

    Parameters
    ----------
    X : ndarray of shape (n, d), float32
    C : ndarray of shape (K, d), float32
    r : int >= 1 (clipped to K)
    c_sq : ndarray of shape (K,), float32, optional

    Returns
    -------
    labels : ndarray of shape (n, min(r, K)), dtype int64
    sqdist : ndarray of shape (n, min(r, K)), dtype float32 -- clipped at 0
    """
    X, C, c_sq = _prepare(X, C, c_sq)
    n, K = X.shape[0], C.shape[0]
    r = min(int(r), K)
    labels = np.empty((n, r), dtype=np.int64)
    dist = np.empty((n, r), dtype=np.float32)
    step = max(1, min(n, block_elements // K))
    for s in range(0, n, step):
        Dm = squared_distances(X[s:s + step], C, c_sq)
        part = np.argpartition(Dm, r - 1, axis=1)[:, :r] if r < K else np.tile(np.arange(K), (Dm.shape[0], 1))
        pd = np.take_along_axis(Dm, part, axis=1)
        order = np.argsort(pd, axis=1, kind="stable")
        labels[s:s + step] = np.take_along_axis(part, order, axis=1)
        dist[s:s + step] = np.take_along_axis(pd, order, axis=1)
    return labels, dist
