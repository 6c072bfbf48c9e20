"""Helpers shared by the vocabularies and aggregators: input checks for descriptor sets, sub-sampling and the
per-image encoding loop (the nearest-centre search is :mod:`retrieval.core.nearest`, k-means
:mod:`retrieval.core.kmeans`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from retrieval.core.checks import check_array

logger = logging.getLogger(__name__)


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
