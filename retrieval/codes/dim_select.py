"""Indexation-aware dimensionality reduction: choose D' for PCA + random rotation + ADC (Jegou et al. 2012, section V-B).

For a code budget of ``B = M * nbits`` bits, a vector ``x`` (centred) is projected on its first ``D'`` principal
components (the projection error ``e_p(x)`` lies in the null space of the PCA matrix, eq. 25), the projection is
rotated by a random orthogonal matrix (observation 1 of V-B: balances the components' variance across the ``M``
sub-vectors) and quantised by ADC ``M x nbits`` (quantisation error ``e_q(x_p)``, eq. 26). The two errors are
orthogonal, so the squared reconstruction error is their sum, and D' is chosen to minimise its mean over a learning
set (eq. 27-28):

    e(D') = e_p(D') + e_q(D') = 1/|L| sum_x ||e_p(x)||^2 + 1/|L| sum_x ||e_q(x_p)||^2.

D' must be a multiple of ``M``. A large D' gives a small projection error but a coarse quantisation; a small D'
the opposite: the curve has an interior minimum (Fig. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from retrieval.aggregation.pca import PCAProjection
from retrieval.codes.pq import ProductQuantizer
from retrieval.core.checks import check_array, check_random_state, check_scalar
from retrieval.core.pca import random_rotation

__all__ = ["DimSelection", "select_dim"]


@dataclass
class DimSelection:
    """Result of :func:`select_dim`.

    Attributes
    ----------
    best_dim : int
        The chosen D' (argmin of ``total_error``).
    dims : ndarray of shape (n_candidates,), int64
        Candidate D' values (multiples of M).
    projection_error, quantization_error, total_error : ndarrays of shape (n_candidates,), float64
        Mean squared errors e_p(D'), e_q(D') and their sum (eq. 27-28), measured on the evaluation vectors.
    M, nbits : int
        The ADC configuration (``M * nbits`` bits per vector).
    """

    best_dim: int
    dims: np.ndarray
    projection_error: np.ndarray
    quantization_error: np.ndarray
    total_error: np.ndarray
    M: int
    nbits: int
    extra: dict = field(default_factory=dict)

    def make_projection(self, random_state=None):
        """The PCA to ``best_dim`` followed by a random rotation (Jegou et al. 2012, sec. V-B), unfitted:
        ``retrieval.aggregation.PCAProjection(best_dim, rotation=True, random_state=random_state)``."""
        return PCAProjection(int(self.best_dim), rotation=True, random_state=random_state)

    def as_dict(self) -> dict:
        """JSON-able summary."""
        return {"best_dim": int(self.best_dim), "M": self.M, "nbits": self.nbits,
                "dims": [int(v) for v in self.dims],
                "projection_error": [float(v) for v in self.projection_error],
                "quantization_error": [float(v) for v in self.quantization_error],
                "total_error": [float(v) for v in self.total_error]}


def select_dim(X, code_size: int, *, nbits: int = 8, M: int | None = None, candidates=None, X_eval=None,
               eval_fraction: float = 0.3, n_iter: int = 25, random_state=None) -> DimSelection:
    """Choose D' minimising projection + quantisation error for ``code_size`` bytes per vector (eq. 27-28).

    Parameters
    ----------
    X : array-like of shape (n, D), float
        Learning set L (e.g. Fisher vectors). PCA and the product quantisers are trained on it.
    code_size : int
        Bytes per code; ``B = 8 * code_size`` bits (16 bytes = the paper's 128-bit codes).
    nbits : int
        Bits per sub-quantiser (8 gives "ADC 16x8" for 16 bytes).
    M : int, optional
        Sub-quantisers; default ``8 * code_size // nbits``.
    candidates : sequence of int, optional
        D' values to try; each must be a multiple of M, at most ``min(n_learn - 1, D)``. Default: M times powers
        of two and their 1.5 multiples up to that bound.
    X_eval : array-like of shape (n_eval, D), optional
        Vectors on which the errors are measured; default: a held-out ``eval_fraction`` of ``X`` (errors measured
        on the training vectors themselves under-estimate e_q for large D').
    eval_fraction : float
    n_iter : int
        k-means iterations of the product quantisers.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    DimSelection
        With ``best_dim`` the chosen D'; the PCA + rotation to apply is then
        ``retrieval.aggregation.PCAProjection(best_dim, rotation=True)``.
    """
    X = check_array(X, "X", min_rows=2)
    check_scalar(code_size, "code_size", "select_dim", low=1)
    check_scalar(nbits, "nbits", "select_dim", low=1, high=16)
    if M is None:
        M = 8 * code_size // nbits
        if M < 1 or M * nbits != 8 * code_size:
            raise ValueError(f"code_size={code_size} bytes is not a whole number of {nbits}-bit sub-codes.")
    check_scalar(M, "M", "select_dim", low=1)
    rng = check_random_state(random_state)
    if X_eval is None:
        check_scalar(eval_fraction, "eval_fraction", "select_dim", kind=float, low=0, high=1, closed="neither")
        perm = rng.permutation(X.shape[0])
        n_eval = max(1, int(round(eval_fraction * X.shape[0])))
        X_eval, X = X[perm[:n_eval]], X[perm[n_eval:]]
    else:
        X_eval = check_array(X_eval, "X_eval", n_features=X.shape[1])
    n, D = X.shape
    ksub = 1 << nbits
    if n < ksub:
        raise ValueError(f"select_dim with nbits={nbits} needs at least {ksub} learning vectors; got {n}.")
    limit = min(n - 1, D)
    if candidates is None:
        cand = set()
        p = M
        while p <= limit:
            cand.add(p)
            if (3 * p) // 2 % M == 0 and (3 * p) // 2 <= limit:
                cand.add((3 * p) // 2)
            p *= 2
        candidates = sorted(cand)
    candidates = [int(c) for c in candidates]
    if not candidates:
        raise ValueError(f"no D' candidate: M={M} exceeds min(n_learn - 1, D) = {limit}.")
    for c in candidates:
        if c % M or c < M or c > limit:
            raise ValueError(f"D'={c} must be a multiple of M={M} in [{M}, {limit}].")
    pca = PCAProjection(max(candidates), random_state=rng).fit(X)
    mean, comps = pca.mean_.astype(np.float32), pca.components_.astype(np.float32)
    Xc, Ec = X - mean, X_eval - mean
    Pl, Pe = Xc @ comps.T, Ec @ comps.T
    total_e = (Ec.astype(np.float64) ** 2).sum(1)
    ep, eq = [], []
    for c in candidates:
        # e_p: orthonormal rows, so ||e_p(x)||^2 = ||x - mean||^2 - ||M x||^2 (eq. 25)
        ep.append(float(np.mean(total_e - (Pe[:, :c].astype(np.float64) ** 2).sum(1))))
        R = random_rotation(c, rng).astype(np.float32)
        zl, ze = Pl[:, :c] @ R, Pe[:, :c] @ R
        pq = ProductQuantizer(M, nbits, n_iter=n_iter, random_state=rng).fit(zl)
        rec = pq.decode(pq.encode(ze))
        eq.append(float(np.mean(((ze - rec).astype(np.float64) ** 2).sum(1))))
    ep, eq = np.array(ep), np.array(eq)
    tot = ep + eq
    return DimSelection(best_dim=int(candidates[int(np.argmin(tot))]), dims=np.array(candidates, dtype=np.int64),
                        projection_error=ep, quantization_error=eq, total_error=tot, M=int(M), nbits=int(nbits))
