"""Seeded Lloyd k-means and nearest-centroid assignment, the training step of PQ and of the IVF coarse quantiser.

Follows faiss's ``Clustering`` defaults (the reference we compare against): sub-sampling to at most
``max_points_per_centroid * k`` training points, initialisation by ``k`` distinct random training points,
``n_iter`` Lloyd iterations, and empty clusters repaired by splitting a large cluster (its centroid copied with a
tiny symmetric perturbation, cluster chosen with probability proportional to its size).
"""

from __future__ import annotations

import logging

import numpy as np
from numba import njit

logger = logging.getLogger(__name__)

_CHUNK_BYTES = 4 << 20
_SMALL_D = 32  # below: fused numba kernel (PQ sub-spaces); above: BLAS


@njit(cache=True, nogil=True)
def _assign_small(X, Ct, cn, labels, sqd):
    """Fused nearest-centroid search for small d: X (n, d) float32, Ct (d, k) float32, cn (k,) float32."""
    n, d = X.shape
    k = Ct.shape[1]
    buf = np.empty(k, dtype=np.float32)
    for i in range(n):
        for j in range(k):
            buf[j] = cn[j]
        xn = np.float32(0.0)
        for t in range(d):
            v = X[i, t]
            xn += v * v
            v2 = np.float32(-2.0) * v
            for j in range(k):
                buf[j] += v2 * Ct[t, j]
        best = 0
        bv = buf[0]
        for j in range(1, k):
            if buf[j] < bv:
                bv = buf[j]
                best = j
        labels[i] = best
        sqd[i] = max(bv + xn, np.float32(0.0))


def assign(X: np.ndarray, centroids: np.ndarray, *, centroid_norms: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid of each row.

    Parameters
    ----------
    X : ndarray of shape (n, d), dtype float32
    centroids : ndarray of shape (k, d), dtype float32
    centroid_norms : ndarray of shape (k,), dtype float32, optional
        Precomputed squared norms of the centroids.

    Returns
    -------
    labels : ndarray of shape (n,), dtype int64
    sqdist : ndarray of shape (n,), dtype float32
        Squared Euclidean distance to the assigned centroid (clipped at 0).
    """
    n = X.shape[0]
    k = centroids.shape[0]
    cn = (centroids.astype(np.float32) ** 2).sum(1) if centroid_norms is None else centroid_norms
    labels = np.empty(n, dtype=np.int64)
    sqd = np.empty(n, dtype=np.float32)
    if X.shape[1] <= _SMALL_D:
        _assign_small(np.ascontiguousarray(X, dtype=np.float32), np.ascontiguousarray(centroids.T, dtype=np.float32),
                      np.ascontiguousarray(cn, dtype=np.float32), labels, sqd)
        return labels, sqd
    step = max(1, min(n, _CHUNK_BYTES // (4 * max(k, 1))))
    ct = np.ascontiguousarray(centroids.T, dtype=np.float32)
    for a in range(0, n, step):
        xb = X[a:a + step]
        dots = xb @ ct
        dots *= -2.0
        dots += cn[None, :]
        lab = dots.argmin(axis=1)
        labels[a:a + step] = lab
        best = dots[np.arange(len(lab)), lab] + (xb.astype(np.float32) ** 2).sum(1)
        sqd[a:a + step] = np.maximum(best, 0.0)
    return labels, sqd


def kmeans(X: np.ndarray, k: int, *, n_iter: int = 25, max_points_per_centroid: int = 256,
           rng: np.random.Generator) -> np.ndarray:
    """Lloyd k-means (faiss-like, see module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, d), dtype float32
        Training points, ``n >= k``.
    k : int
        Number of centroids.
    n_iter : int
        Lloyd iterations.
    max_points_per_centroid : int
        Training set sub-sampled to at most ``k * max_points_per_centroid`` rows.
    rng : numpy.random.Generator

    Returns
    -------
    centroids : ndarray of shape (k, d), dtype float32
    """
    X = np.asarray(X, dtype=np.float32)
    n, d = X.shape
    if n < k:
        raise ValueError(f"k-means needs at least k={k} training points; got {n}.")
    if n > k * max_points_per_centroid:
        sel = np.sort(rng.choice(n, k * max_points_per_centroid, replace=False))
        X = X[sel]
        n = X.shape[0]
    C = X[rng.choice(n, k, replace=False)].copy()
    if n == k:
        return C
    for it in range(n_iter):
        labels, sqd = assign(X, C)
        counts = np.bincount(labels, minlength=k).astype(np.int64)
        sums = np.zeros((k, d), dtype=np.float64)
        _accumulate(sums, labels, X)
        nz = counts > 0
        C[nz] = (sums[nz] / counts[nz, None]).astype(np.float32)
        empty = np.flatnonzero(~nz)
        for j in empty:
            # split a cluster chosen with probability proportional to its size (faiss's repair)
            p = counts / counts.sum()
            big = int(rng.choice(k, p=p))
            eps = np.float32(1.0 / 1024.0)
            C[j] = C[big] * (1 + eps)
            C[big] = C[big] * (1 - eps)
            counts[j] = counts[big] // 2
            counts[big] -= counts[j]
        if it == n_iter - 1:
            logger.debug("k-means k=%d d=%d n=%d: objective %.6g", k, d, n, float(sqd.sum()))
    return C


def _accumulate(sums: np.ndarray, labels: np.ndarray, X: np.ndarray) -> None:
    """sums[labels[i]] += X[i], column by column with bincount (float64 accumulation)."""
    k = sums.shape[0]
    for j in range(X.shape[1]):
        sums[:, j] = np.bincount(labels, weights=X[:, j], minlength=k)
