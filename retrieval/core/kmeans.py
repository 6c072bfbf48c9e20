"""The one k-means of the library for small and medium K (up to ~65k centres), and its update step.

:func:`kmeans` trains the product quantisers and the IVF coarse quantiser (:mod:`retrieval.codes.pq`,
:mod:`retrieval.search.ivfadc`), the coarse cells of approximate k-means
(:mod:`retrieval.aggregation.large_vocabulary`) and, through VLFeat, the visual vocabularies
(:class:`retrieval.aggregation.KMeansVocabulary`, hence the k-means initialisation of
:class:`retrieval.aggregation.GMMVocabulary`). Large vocabularies (100k-1M words) use approximate k-means,
whose Lloyd iterations share :func:`update_centers` and :func:`retrieval.core.nearest.nearest_centers`.

``algorithm="lloyd"`` is our Lloyd iteration, with faiss's ``Clustering`` defaults (the reference it is compared
against): sub-sampling to at most ``max_points_per_centroid * k`` training points, initialisation by ``k``
distinct random training points, exact assignment by :func:`retrieval.core.nearest.nearest_centers`, and (with
``split_empty``) empty clusters repaired by splitting a cluster chosen with probability proportional to its size
(its centroid copied with a symmetric relative perturbation of 1/1024).

``algorithm="vlfeat-elkan" | "vlfeat-ann" | "vlfeat-lloyd"`` hands the data to VLFeat's k-means (cyvlfeat):
Elkan's accelerated exact algorithm, the kd-forest approximate variant (``num_trees`` trees,
``max_comparisons`` comparisons per query) or VLFeat's own Lloyd, with k-means++ (``init="plusplus"``) or
random-selection seeding and ``n_init`` repetitions (the lowest energy kept). VLFeat's generator is seeded from
``rng`` through libvl (:func:`seed_vlfeat`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

import numpy as np
from numba import njit

from retrieval.core.checks import check_choice, check_scalar
from retrieval.core.nearest import nearest_centers

__all__ = ["ALGORITHMS", "kmeans", "seed_vlfeat", "update_centers"]

logger = logging.getLogger(__name__)

ALGORITHMS = ("lloyd", "vlfeat-elkan", "vlfeat-ann", "vlfeat-lloyd")


@njit(cache=True, nogil=True)
def _accumulate(X, labels, sums, counts):
    """sums[labels[i]] += X[i]; counts[labels[i]] += 1, in row order (float64 sums): one pass over X."""
    for i in range(X.shape[0]):
        w = labels[i]
        counts[w] += 1
        for t in range(X.shape[1]):
            sums[w, t] += X[i, t]


def update_centers(X, labels, C) -> np.ndarray:
    """The k-means update step, in place: each non-empty centre becomes the mean of its rows.

    Parameters
    ----------
    X : ndarray of shape (n, d), float32
    labels : ndarray of shape (n,), int64, in [0, K)
    C : ndarray of shape (K, d), float32 -- overwritten where the cluster is non-empty

    Returns
    -------
    counts : ndarray of shape (K,), int64 -- rows per centre (sums accumulated in float64, row order)
    """
    K = C.shape[0]
    counts = np.zeros(K, dtype=np.int64)
    sums = np.zeros((K, X.shape[1]), dtype=np.float64)
    _accumulate(np.ascontiguousarray(X, dtype=np.float32), np.ascontiguousarray(labels, dtype=np.int64), sums, counts)
    nz = counts > 0
    C[nz] = (sums[nz] / counts[nz, None]).astype(np.float32)
    return counts


def _split_empty(C, counts, rng) -> None:
    """faiss's repair: each empty centre takes half of a cluster drawn with probability proportional to its size."""
    eps = np.float32(1.0 / 1024.0)
    for j in np.flatnonzero(counts == 0):
        big = int(rng.choice(C.shape[0], p=counts / counts.sum()))
        C[j] = C[big] * (1 + eps)
        C[big] = C[big] * (1 - eps)
        counts[j] = counts[big] // 2
        counts[big] -= counts[j]


def _lloyd(X, k, n_iter, max_points_per_centroid, split_empty, rng):
    n, d = X.shape
    if max_points_per_centroid is not None and n > k * max_points_per_centroid:
        X = X[np.sort(rng.choice(n, k * max_points_per_centroid, replace=False))]
        n = X.shape[0]
    C = X[rng.choice(n, k, replace=False)].copy()
    if n == k:
        return C
    for it in range(n_iter):
        labels, sqd = nearest_centers(X, C)
        counts = update_centers(X, labels, C)
        if split_empty:
            _split_empty(C, counts, rng)
        if it == n_iter - 1:
            logger.debug("k-means k=%d d=%d n=%d: objective %.6g", k, d, n, float(sqd.sum()))
    return C


_VL = None


def seed_vlfeat(seed: int) -> bool:
    """Seed VLFeat's random generator of the calling thread (used by its k-means initialisation).

    cyvlfeat does not expose a seed; VLFeat keeps one generator per thread, reachable through ``vl_get_rand`` /
    ``vl_rand_seed`` in ``libvl``. Returns False (and logs) when libvl cannot be loaded, in which case the
    initialisation is not reproducible.
    """
    global _VL
    if _VL is None:
        lib = None
        for name in ("libvl.so.1", "libvl.so", ctypes.util.find_library("vl")):
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            _VL = False
        else:
            lib.vl_get_rand.restype = ctypes.c_void_p
            lib.vl_rand_seed.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
            lib.vl_rand_seed.restype = None
            _VL = lib
    if _VL is False:
        logger.warning("libvl not found: VLFeat k-means initialisation is not seeded (results not reproducible)")
        return False
    _VL.vl_rand_seed(_VL.vl_get_rand(), ctypes.c_uint64(int(seed)))
    return True


def kmeans(X, k: int, *, rng: np.random.Generator, n_iter: int = 25, algorithm: str = "lloyd",
           max_points_per_centroid: int | None = 256, split_empty: bool = True, init: str = "plusplus",
           n_init: int = 1, num_trees: int = 3, max_comparisons: int = 100) -> np.ndarray:
    """k centres of the rows of ``X`` (see the module docstring for the algorithms).

    Parameters
    ----------
    X : ndarray of shape (n, d), float32, ``n >= k``
    k : int >= 1
    rng : numpy.random.Generator -- sub-sampling, initialisation and repairs ("lloyd"); one seed draw (VLFeat)
    n_iter : int >= 0 -- Lloyd iterations (VLFeat: the maximum number)
    algorithm : {"lloyd", "vlfeat-elkan", "vlfeat-ann", "vlfeat-lloyd"}
    max_points_per_centroid : int or None -- "lloyd": sub-sample to at most ``k`` times this many rows
    split_empty : bool -- "lloyd": repair empty clusters (else an empty centre stays where it was)
    init : {"plusplus", "randsel"} -- VLFeat seeding ("lloyd" always draws k distinct training rows)
    n_init, num_trees, max_comparisons : int -- VLFeat repetitions and kd-forest parameters

    Returns
    -------
    centres : ndarray of shape (k, d), dtype float32
    """
    check_choice(algorithm, "algorithm", "kmeans", ALGORITHMS)
    check_scalar(k, "k", "kmeans", low=1)
    check_scalar(n_iter, "n_iter", "kmeans", low=0)
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"kmeans expects a 2-d array of shape (n, d); got shape {X.shape}.")
    if X.shape[0] < k:
        raise ValueError(f"k-means needs at least k={k} training points; got {X.shape[0]}.")
    if algorithm == "lloyd":
        if max_points_per_centroid is not None:
            check_scalar(max_points_per_centroid, "max_points_per_centroid", "kmeans", low=1)
        return _lloyd(X, k, n_iter, max_points_per_centroid, split_empty, rng)
    from cyvlfeat.kmeans import kmeans as vl_kmeans

    check_choice(init, "init", "kmeans", ("plusplus", "randsel"))
    seed_vlfeat(int(rng.integers(2**63 - 1)))
    C = vl_kmeans(X, k, distance="l2", initialization=init.upper(), algorithm=algorithm[len("vlfeat-"):].upper(),
                  num_repetitions=n_init, num_trees=num_trees, max_num_comparisons=max_comparisons,
                  max_num_iterations=n_iter)
    return np.ascontiguousarray(C, dtype=np.float32)
