"""Normalisations of aggregated vectors: power normalisation (Jegou et al. 2012, eq. 7) and L1/L2 normalisation.

Both accept a dense 2-d array (one vector per row) or a SciPy sparse matrix (CSR) and never modify their input.
"""

from __future__ import annotations

import numbers
import sys

import numpy as np

from retrieval.core.checks import check_scalar


def issparse(X) -> bool:
    """``scipy.sparse.issparse(X)`` without importing scipy.sparse: an object cannot be a sparse matrix while
    scipy.sparse was never imported (its import costs a cold query about 0.4 s)."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(X)

__all__ = ["power_normalize", "l2_normalize", "l1_normalize"]


def _as_float(X, name: str):
    """Return a float array/CSR (float32 unless already float64) without touching the caller's data."""
    if issparse(X):
        X = sys.modules["scipy.sparse"].csr_matrix(X)
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float32
        return X.astype(dtype, copy=True)
    arr = np.asarray(X)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers; got dtype {arr.dtype}.")
    dtype = arr.dtype if arr.dtype in (np.float32, np.float64) else np.float32
    return np.array(arr, dtype=dtype, copy=True)


def power_normalize(X, alpha: float = 0.5):
    """Power normalisation of Jegou et al. 2012, eq. 7: ``f(z) = sign(z) |z|^alpha``, component-wise, signs kept.

    Parameters
    ----------
    X : ndarray of shape (n, D) or (D,), or sparse matrix of shape (n, D); any real dtype
        Vectors to normalise (not modified).
    alpha : float in (0, 1]
        Exponent; 0.5 (the "signed square root") is the paper's default, 1 leaves the values unchanged.

    Returns
    -------
    ndarray of the same shape (float32, or float64 for float64 input), or CSR matrix for sparse input.
    """
    check_scalar(alpha, "alpha", "power_normalize", kind=numbers.Real, low=0, high=1, closed="right")
    Y = _as_float(X, "X")
    data = Y.data if issparse(Y) else Y
    if alpha == 0.5:
        # sqrt is faster and exact for the common case
        np.copysign(np.sqrt(np.abs(data)), data, out=data)
    elif alpha != 1:
        np.copysign(np.power(np.abs(data), alpha), data, out=data)
    return Y


def _row_normalize(X, ord_: int, name: str):
    Y = _as_float(X, "X")
    if issparse(Y):
        if ord_ == 2:
            norms = np.sqrt(np.asarray(Y.multiply(Y).sum(axis=1), dtype=np.float64).ravel())
        else:
            norms = np.asarray(abs(Y).sum(axis=1), dtype=np.float64).ravel()
        scale = np.zeros_like(norms)
        nz = norms > 0
        scale[nz] = 1.0 / norms[nz]
        counts = np.diff(Y.indptr)
        Y.data *= np.repeat(scale, counts).astype(Y.dtype)
        return Y
    one_d = Y.ndim == 1
    Z = Y[None, :] if one_d else Y
    if Z.ndim != 2:
        raise ValueError(f"{name}: X must be a 1-d or 2-d array; got shape {Z.shape}.")
    norms = np.linalg.norm(Z.astype(np.float64, copy=False), ord=ord_, axis=1)
    nz = norms > 0
    Z[nz] /= norms[nz, None].astype(Z.dtype)
    return Z[0] if one_d else Z


def l2_normalize(X):
    """Divide each row by its Euclidean norm (the L2 step after eq. 7 in Jegou et al. 2012); zero rows stay zero.

    Parameters
    ----------
    X : ndarray of shape (n, D) or (D,), or sparse matrix of shape (n, D); any real dtype (not modified)

    Returns
    -------
    ndarray of the same shape (float32, or float64 for float64 input), or CSR matrix for sparse input.
    """
    return _row_normalize(X, 2, "l2_normalize")


def l1_normalize(X):
    """Divide each row by the sum of its absolute values (BoW seen as an empirical distribution, Jegou et al. 2012
    III-A); zero rows stay zero. Input and output as in :func:`l2_normalize`."""
    return _row_normalize(X, 1, "l1_normalize")
