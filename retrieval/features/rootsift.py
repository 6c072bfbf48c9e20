"""RootSIFT (Arandjelovic & Zisserman, "Three things everyone should know to improve object retrieval", 2012)."""

from __future__ import annotations

import numpy as np


def root_sift(desc, eps: float = 1e-12) -> np.ndarray:
    """RootSIFT: L1-normalise each descriptor, then take the element-wise square root.

    ``r = sqrt(x / ||x||_1)``; the Euclidean distance between RootSIFT vectors is the Hellinger distance between
    the SIFT histograms, and ``||r||_2 = 1`` (all-zero rows stay zero).

    Parameters
    ----------
    desc : array-like of shape (n, d), non-negative (uint8 SIFT or float)
    eps : float
        Added to the L1 norm to avoid division by zero.

    Returns
    -------
    ndarray of shape (n, d), dtype float32 (a new array)
    """
    x = np.asarray(desc)
    if x.ndim != 2:
        raise ValueError(f"desc must be a 2-d array (n, d); got shape {x.shape}.")
    signed = x.dtype.kind not in "ub"   # unsigned (uint8 SIFT) cannot be negative
    x = x.astype(np.float32)
    if signed and x.size and x.min() < 0:
        raise ValueError(f"desc must be non-negative for RootSIFT; found minimum {float(x.min())}.")
    norm = x.sum(axis=1, keepdims=True)
    np.divide(x, norm + np.float32(eps), out=x)   # in place: x is this call's own copy
    return np.sqrt(x, out=x)
