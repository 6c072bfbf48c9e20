"""PCA of aggregated image vectors to D' components (Jegou et al. 2012, sections IV and V-B), with optional whitening,
power + L2 re-normalisation, and a random rotation.

The transform applied to a row ``x`` (shape (D,)) is, in this order::

    y = P (x - mean)                       # PCA projection to D' components (Jegou et al. 2012, sec. IV "D' components")
    y = y / sqrt(lambda + eps * lambda_1)  # whitening (whiten=True; the rule of retrieval.core.pca)
    y = l2(sign(y) |y|^renorm_alpha)       # re-normalisation (renormalize=True; eq. 7 then L2)
    y = Q y                                # random orthogonal rotation (rotation=True; Jegou et al. 2012, sec. V-B,
                                           #   which balances the variance across PQ sub-vectors)

The rotation comes last so that the re-normalised vector keeps its unit norm after it. The PCA itself (solver,
sign convention, whitening rule, rotation) is :mod:`retrieval.core.pca`, shared by every PCA of the library.
"""

from __future__ import annotations

import logging
import numbers
import sys

import numpy as np

from retrieval.aggregation.normalize import issparse, l2_normalize, power_normalize
from retrieval.core.checks import check_array, check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.pca import fit_pca, random_rotation, whitening_scale
from retrieval.core.persistence import PersistableMixin

__all__ = ["PCAProjection", "random_rotation"]

logger = logging.getLogger(__name__)

_OWNER = "PCAProjection"


class PCAProjection(PersistableMixin):
    """PCA to ``n_components`` dimensions of aggregated vectors (Jegou et al. 2012, sec. IV: "the final VLAD, Fisher
    and BOW vectors are reduced from D = Kd to D' components using PCA"), optionally followed by whitening,
    power + L2 re-normalisation and a random orthogonal rotation (sec. V-B).

    Parameters
    ----------
    n_components : int >= 1
        D', the output dimension. Must not exceed ``min(n_samples, n_features)`` of the training set.
    whiten : bool
        Divide each component by ``sqrt(lambda_i + whiten_eps * lambda_1)`` (``lambda_1`` the largest variance).
    renormalize : bool
        After projection (and whitening), apply power normalisation with ``renorm_alpha`` (eq. 7) then L2.
    rotation : bool
        Multiply the output by a random orthogonal D' x D' matrix (:func:`retrieval.core.pca.random_rotation`), drawn at ``fit``.
    random_state : None, int or numpy.random.Generator
        Seeds the rotation and the randomised SVD.
    renorm_alpha : float in (0, 1]
        Exponent of the re-normalisation's power step (1 gives a plain L2 re-normalisation).
    whiten_eps : float >= 0
        Relative regulariser of the whitening (added to every variance), avoiding division by (near) zero.
    svd_solver : {"auto", "full", "randomized"}
        "full": exact (eigen-decomposition of the D x D covariance when n_samples >= D, else thin SVD of the
        centred data); "randomized": Halko et al. randomised SVD (scikit-learn), for D' << min(n, D);
        "auto": "randomized" when min(n, D) > 4096 and D' < 0.5 min(n, D), else "full".

    Attributes
    ----------
    mean_ : ndarray of shape (D,), float32
    components_ : ndarray of shape (D', D), float32 — orthonormal rows, by decreasing variance; each row's
        largest-magnitude entry is positive (deterministic signs).
    explained_variance_ : ndarray of shape (D',), float32 — variance of the training data along each component
        (unbiased, n - 1 denominator).
    rotation_ : ndarray of shape (D', D'), float32, or None
    n_features_in_ : int
    """

    def __init__(self, n_components, whiten=False, renormalize=False, rotation=False, random_state=None, *,
                 renorm_alpha=0.5, whiten_eps=1e-6, svd_solver="auto"):
        self.n_components = n_components
        self.whiten = whiten
        self.renormalize = renormalize
        self.rotation = rotation
        self.random_state = random_state
        self.renorm_alpha = renorm_alpha
        self.whiten_eps = whiten_eps
        self.svd_solver = svd_solver

    def _check_params(self):
        check_scalar(self.n_components, "n_components", _OWNER, low=1)
        for name in ("whiten", "renormalize", "rotation"):
            check_choice(getattr(self, name), name, _OWNER, (True, False))
        check_scalar(self.renorm_alpha, "renorm_alpha", _OWNER, kind=numbers.Real, low=0, high=1, closed="right")
        check_scalar(self.whiten_eps, "whiten_eps", _OWNER, kind=numbers.Real, low=0)
        check_choice(self.svd_solver, "svd_solver", _OWNER, ("auto", "full", "randomized"))

    def fit(self, X, y=None):
        """Learn the mean, principal axes, variances and (optionally) the rotation.

        Parameters
        ----------
        X : ndarray or sparse matrix of shape (n_samples, D); real values (converted to float64 internally)
        y : ignored

        Returns
        -------
        self
        """
        self._check_params()
        if issparse(X):
            X = X.toarray()
        X = check_array(X, "X", dtype=None, min_rows=1)
        n, D = X.shape
        k = self.n_components
        if k > min(n, D):
            raise ValueError(
                f"The 'n_components' parameter of {_OWNER} must be at most min(n_samples, n_features) = "
                f"min({n}, {D}) = {min(n, D)} for this training set. Got {k} instead."
            )
        rng = check_random_state(self.random_state)
        basis = fit_pca(X, k, solver=self.svd_solver, random_state=rng)
        self.mean_ = basis.mean.astype(np.float32)
        self.components_ = np.ascontiguousarray(basis.components, dtype=np.float32)
        self.explained_variance_ = basis.variances.astype(np.float32)
        self.rotation_ = random_rotation(k, rng).astype(np.float32) if self.rotation else None
        self.n_features_in_ = int(D)
        logger.debug("PCAProjection: %d x %d -> %d components (%s solver)", n, D, k, basis.solver)
        return self

    def _scale(self) -> np.ndarray:
        return whitening_scale(self.explained_variance_, self.whiten_eps)

    def transform(self, X):
        """Project rows to D' dimensions (then whiten / re-normalise / rotate as configured).

        Parameters
        ----------
        X : ndarray of shape (n, D) (any real dtype) or sparse matrix of shape (n, D) (e.g. BoW CSR)

        Returns
        -------
        Y : ndarray of shape (n, D'), dtype float32
        """
        check_is_fitted(self, ["components_", "mean_"])
        D = self.n_features_in_
        C = self.components_
        if issparse(X):
            X = sys.modules["scipy.sparse"].csr_matrix(X)
            if X.ndim != 2 or X.shape[1] != D:
                raise ValueError(f"X must have {D} columns (last axis); got shape {X.shape}.")
            Y = np.asarray(X.astype(np.float32) @ C.T, dtype=np.float32) - (self.mean_ @ C.T)[None, :]
        else:
            X = check_array(X, "X", dtype=np.float32, n_features=D)
            Y = (X - self.mean_) @ C.T
        Y = np.ascontiguousarray(Y, dtype=np.float32)
        if self.whiten:
            Y *= self._scale().astype(np.float32)[None, :]
        if self.renormalize:
            Y = l2_normalize(power_normalize(Y, self.renorm_alpha))
        if self.rotation_ is not None:
            Y = Y @ self.rotation_.T
        return np.ascontiguousarray(Y, dtype=np.float32)

    def fit_transform(self, X, y=None):
        """``fit(X)`` then ``transform(X)``; returns ndarray of shape (n, D'), float32."""
        return self.fit(X).transform(X)

    def inverse_transform(self, Y):
        """Map D'-dimensional rows back to the input space (undo rotation and whitening, then
        ``Y @ components_ + mean_``); this is the reconstruction whose error is Jegou et al. 2012's projection error
        (eq. 27). Not available with ``renormalize=True`` (not invertible).

        Parameters
        ----------
        Y : ndarray of shape (n, D'), real

        Returns
        -------
        X : ndarray of shape (n, D), dtype float32
        """
        check_is_fitted(self, ["components_", "mean_"])
        if self.renormalize:
            raise ValueError("inverse_transform is undefined for a PCAProjection with renormalize=True.")
        Y = check_array(Y, "Y", dtype=np.float32, n_features=self.components_.shape[0])
        if self.rotation_ is not None:
            Y = Y @ self.rotation_
        if self.whiten:
            scale = self._scale()
            Y = Y / np.where(scale > 0, scale, np.inf).astype(np.float32)[None, :]
        return np.ascontiguousarray(Y @ self.components_ + self.mean_, dtype=np.float32)
