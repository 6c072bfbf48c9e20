"""Helpers shared by the vocabularies and aggregators: input checks for descriptor sets, nearest-centre
assignment by chunked matrix products, VLFeat RNG seeding, and the per-image encoding loop."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

import numpy as np

from retrieval.core.checks import check_array

logger = logging.getLogger(__name__)

_CHUNK = 4096


def image_name(names, i: int) -> str:
    """How image ``i`` is named in error messages."""
    if names is not None and i < len(names):
        return f"image {i} ({names[i]})"
    return f"image {i}"


def stack_training_descriptors(X, owner: str) -> np.ndarray:
    """Training descriptors given as one (n, d) array or a list of per-image arrays -> one (n, d) float32
    array (finite values checked)."""
    if isinstance(X, np.ndarray) and X.ndim == 2:
        return check_array(X, "X", dtype=np.float32, min_rows=1)
    if isinstance(X, (list, tuple)):
        parts = [np.asarray(a, dtype=np.float32) for a in X if np.asarray(a).size]
        if not parts:
            raise ValueError(f"{owner}.fit: no training descriptors (every image is empty).")
        return check_array(np.concatenate(parts, axis=0), "X", dtype=np.float32, min_rows=1)
    return check_array(X, "X", dtype=np.float32, min_rows=1)


def subsample(X: np.ndarray, max_samples: int | None, rng: np.random.Generator) -> np.ndarray:
    """At most ``max_samples`` rows of ``X`` drawn without replacement (order kept)."""
    if max_samples is None or X.shape[0] <= max_samples:
        return X
    idx = np.sort(rng.choice(X.shape[0], size=max_samples, replace=False))
    return X[idx]


def squared_distances(X: np.ndarray, C: np.ndarray, c_sq: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances between rows, ||x||^2 - 2 x.c + ||c||^2, clipped at 0.

    X : (n, d) float32; C : (K, d) float32 -> (n, K) float32.
    """
    if c_sq is None:
        c_sq = np.einsum("ij,ij->i", C, C)
    D = X @ C.T
    D *= -2.0
    D += c_sq[None, :]
    D += np.einsum("ij,ij->i", X, X)[:, None]
    np.maximum(D, 0.0, out=D)
    return D


def nearest_centers(X: np.ndarray, C: np.ndarray, c_sq: np.ndarray | None = None):
    """Index and squared distance of the nearest row of ``C`` for each row of ``X`` (exact, chunked).

    Returns (labels (n,) int64, sqdist (n,) float32).
    """
    if c_sq is None:
        c_sq = np.einsum("ij,ij->i", C, C)
    n = X.shape[0]
    labels = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=np.float32)
    step = max(1, min(_CHUNK, (64 << 20) // max(1, 4 * C.shape[0])))
    for s in range(0, n, step):
        Dm = squared_distances(X[s:s + step], C, c_sq)
        lab = np.argmin(Dm, axis=1)
        labels[s:s + step] = lab
        dist[s:s + step] = Dm[np.arange(Dm.shape[0]), lab]
    return labels, dist


def k_nearest_centers(X: np.ndarray, C: np.ndarray, r: int, c_sq: np.ndarray | None = None):
    """The ``r`` nearest rows of ``C`` for each row of ``X``, by increasing distance (exact, chunked).

    Returns (labels (n, r) int64, sqdist (n, r) float32).
    """
    if c_sq is None:
        c_sq = np.einsum("ij,ij->i", C, C)
    n, K = X.shape[0], C.shape[0]
    r = min(r, K)
    labels = np.empty((n, r), dtype=np.int64)
    dist = np.empty((n, r), dtype=np.float32)
    step = max(1, min(_CHUNK, (64 << 20) // max(1, 4 * K)))
    for s in range(0, n, step):
        Dm = squared_distances(X[s:s + step], C, c_sq)
        part = np.argpartition(Dm, r - 1, axis=1)[:, :r] if r < K else np.tile(np.arange(K), (Dm.shape[0], 1))
        pd = np.take_along_axis(Dm, part, axis=1)
        order = np.argsort(pd, axis=1, kind="stable")
        labels[s:s + step] = np.take_along_axis(part, order, axis=1)
        dist[s:s + step] = np.take_along_axis(pd, order, axis=1)
    return labels, dist


_VL = None


def seed_vlfeat(seed: int) -> bool:
    """Seed VLFeat's random generator of the calling thread (used by cyvlfeat's k-means initialisation).

    cyvlfeat does not expose a seed; VLFeat keeps one generator per thread, reachable through
    ``vl_get_rand`` / ``vl_rand_seed`` in ``libvl``. Returns False (and logs) when libvl cannot be loaded,
    in which case k-means initialisation is not reproducible.
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


def as_image_list(descriptor_sets, owner: str) -> list:
    """The per-image descriptor arrays as a list (a single 2-d array is refused: it is ambiguous)."""
    if isinstance(descriptor_sets, np.ndarray) and descriptor_sets.ndim == 2 and descriptor_sets.dtype != object:
        raise ValueError(
            f"{owner}.transform expects a list of per-image descriptor arrays, got one 2-d array of shape "
            f"{descriptor_sets.shape}; pass [X] for a single image."
        )
    return list(descriptor_sets)


def checked_image(X, i: int, d: int, names) -> np.ndarray | None:
    """Descriptors of image ``i`` as float32 (T, d), or None when it has none; NaN/inf raise ValueError naming
    the image."""
    arr = np.asarray(X)
    if arr.size == 0:
        return None
    return check_array(arr, "descriptors", dtype=np.float32, n_features=d, where=image_name(names, i))


def encode_all(descriptor_sets, encode_one: Callable[[np.ndarray], np.ndarray], dim: int, *, names=None,
               progress=None, owner: str, d: int, batch_size: int = 64, dtype=np.float32):
    """Run ``encode_one`` over every image; returns (V (n, dim), empty (n,) bool).

    Empty images give a zero row and ``empty[i] = True``. ``progress(done, total)`` is called every
    ``batch_size`` images and at the end. BLAS runs single-threaded inside the loop (the per-image matrix
    products are small; multi-threading them is slower), restored afterwards.
    """
    from threadpoolctl import threadpool_limits

    sets = as_image_list(descriptor_sets, owner)
    n = len(sets)
    V = np.zeros((n, dim), dtype=dtype)
    empty = np.zeros(n, dtype=bool)
    with threadpool_limits(limits=1, user_api="blas"):
        for i, X in enumerate(sets):
            arr = checked_image(X, i, d, names)
            if arr is None:
                empty[i] = True
            else:
                V[i] = encode_one(arr)
            if progress is not None and ((i + 1) % batch_size == 0 or i + 1 == n):
                progress(i + 1, n)
    return V, empty
