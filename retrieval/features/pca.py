"""PCA of local descriptors (Jegou et al. 2012, section III-D): 128-d SIFT/RootSIFT -> d = 64 before aggregation."""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.core.checks import check_array, check_is_fitted, check_random_state, check_scalar
from retrieval.core.pca import fit_pca, whitening_scale
from retrieval.core.persistence import PersistableMixin


class LocalPCA(PersistableMixin):
    """PCA of local descriptors, ``x' = M (x - mu)`` with ``M`` the top eigenvectors of the covariance.

    Jegou et al. 2012, III-D: "the eigenvectors associated with the most energetic eigenvalues of the empirical vector
    covariance matrix are used to define a matrix M mapping a vector x in R^128 to x' = M x" (the mean is removed
    first, as every PCA does); d = 64 is the paper's choice. Optional whitening divides component ``i`` by
    ``sqrt(lambda_i + eps * lambda_1)`` (the whitening rule of :mod:`retrieval.core.pca`, shared by every PCA of the
    library).

    Parameters
    ----------
    n_components : int, default 64
    whiten : bool, default False
    max_samples : int or None, default 1_000_000
        ``fit`` uses a uniform random sample of at most this many rows (None = all).
    eps : float, default 1e-9
        Regulariser of the whitening, relative to the largest eigenvalue ``lambda_1``.
    random_state : None, int or Generator
        Draws the sample.

    Attributes
    ----------
    mean_ : ndarray of shape (d,), float32
    components_ : ndarray of shape (n_components, d), float32
        Rows are unit eigenvectors by decreasing eigenvalue, sign fixed so that the largest-|.| entry is positive.
    explained_variance_ : ndarray of shape (n_components,), float32
        The eigenvalues ``lambda_i``.
    explained_variance_ratio_ : ndarray of shape (n_components,), float32
    n_features_in_ : int
    n_samples_seen_ : int
    """

    def __init__(self, n_components: int = 64, *, whiten: bool = False, max_samples: int | None = 1_000_000,
                 eps: float = 1e-9, random_state=None):
        self.n_components = n_components
        self.whiten = whiten
        self.max_samples = max_samples
        self.eps = eps
        self.random_state = random_state

    def fit(self, X, y=None) -> LocalPCA:
        """Fit on descriptors ``X`` of shape (n, d) (any real dtype; converted to float64 for the covariance)."""
        owner = type(self).__name__
        check_scalar(self.n_components, "n_components", owner, low=1)
        check_scalar(self.eps, "eps", owner, kind=numbers.Real, low=0.0)
        if self.max_samples is not None:
            check_scalar(self.max_samples, "max_samples", owner, low=2)
        X = check_array(X, "X", dtype=None, min_rows=2)
        n, d = X.shape
        if self.n_components > d:
            raise ValueError(f"The 'n_components' parameter of {owner} must be <= the dimension d = {d}. "
                             f"Got {self.n_components} instead.")
        if self.max_samples is not None and n > self.max_samples:
            rng = check_random_state(self.random_state)
            X = X[np.sort(rng.choice(n, self.max_samples, replace=False))]
        basis = fit_pca(X, self.n_components, solver="full")
        self.mean_ = basis.mean.astype(np.float32)
        self.components_ = basis.components.astype(np.float32)
        self.explained_variance_ = basis.variances.astype(np.float32)
        total = basis.total_variance
        self.explained_variance_ratio_ = (basis.variances / (total if total > 0 else 1.0)).astype(np.float32)
        self.n_features_in_ = int(d)
        self.n_samples_seen_ = int(len(X))
        return self

    def transform(self, X) -> np.ndarray:
        """Project: ``(X - mean_) @ components_.T`` (whitened if ``whiten``).

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n, n_components), dtype float32
        """
        check_is_fitted(self, "components_")
        X = check_array(X, "X", dtype=np.float32, n_features=self.n_features_in_)
        Y = (X - self.mean_) @ self.components_.T
        if self.whiten:
            Y = Y * whitening_scale(self.explained_variance_, self.eps).astype(np.float32)
        return Y.astype(np.float32, copy=False)

    def fit_transform(self, X, y=None) -> np.ndarray:
        return self.fit(X).transform(X)

    def inverse_transform(self, Y) -> np.ndarray:
        """Back to the descriptor space: ``Y @ components_ + mean_`` (undoing whitening), (n, d) float32."""
        check_is_fitted(self, "components_")
        Y = check_array(Y, "Y", dtype=np.float32, n_features=len(self.components_))
        if self.whiten:
            scale = whitening_scale(self.explained_variance_, self.eps)
            Y = Y / np.where(scale > 0, scale, np.inf).astype(np.float32)
        return (Y @ self.components_ + self.mean_).astype(np.float32)
