"""Diagonal Gaussian mixture vocabulary (Jegou et al. 2012, sec. III-B, the "probabilistic visual vocabulary" u_lambda of
the Fisher vector), learnt by maximum likelihood with EM, initialised by k-means, with a variance floor.

EM is written with blocked matrix products (float32 products, float64 accumulators) so that K=256 on
1M x 64 descriptors trains in minutes on two cores; the soft assignments gamma_t(i) are those of eq. 5.
"""

from __future__ import annotations

import logging
import numbers

import numpy as np

from retrieval.aggregation._common import Vocabulary, stack_training_descriptors, subsample
from retrieval.core.checks import check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.nearest import nearest_centers

__all__ = ["GMMVocabulary", "gmm_log_posteriors"]

logger = logging.getLogger(__name__)

_OWNER = "GMMVocabulary"
_CHUNK = 32768


def _log_gauss_terms(means, covariances, weights, dtype):
    """Per-component constants for log w_i + log N(x; mu_i, diag(sigma_i^2)) = A x^2 + B x + c."""
    inv = 1.0 / covariances.astype(np.float64)
    m = means.astype(np.float64)
    A = (-0.5 * inv).astype(dtype)  # (K, d) multiplies x^2
    B = (m * inv).astype(dtype)  # (K, d) multiplies x
    d = means.shape[1]
    c = (np.log(weights.astype(np.float64)) - 0.5 * np.log(covariances.astype(np.float64)).sum(1)
         - 0.5 * (m * m * inv).sum(1) - 0.5 * d * np.log(2 * np.pi))
    return A, B, c


def gmm_log_posteriors(X, means, covariances, weights, *, dtype=np.float64):
    """log w_i u_i(x_t) for every descriptor and component, and the log-likelihood log u_lambda(x_t).

    Parameters
    ----------
    X : ndarray of shape (T, d), float32
    means, covariances : ndarray of shape (K, d) (diagonal variances)
    weights : ndarray of shape (K,)
    dtype : numpy dtype
        Precision of the matrix products (float32 is used inside EM for speed; float64 is exact to ~1e-12).

    Returns
    -------
    log_gamma : ndarray of shape (T, K), float64 — log gamma_t(i) of eq. 5 (log soft assignments)
    log_lik : ndarray of shape (T,), float64
    """
    A, B, c = _log_gauss_terms(means, covariances, weights, dtype)
    X = np.asarray(X, dtype=dtype)
    L = (X * X) @ A.T
    L += X @ B.T
    L = L.astype(np.float64) + c[None, :]
    mx = L.max(axis=1, keepdims=True)
    L -= mx
    s = np.log(np.exp(L).sum(axis=1, keepdims=True))
    L -= s
    return L, (mx + s).ravel()


class GMMVocabulary(Vocabulary):
    """Diagonal-covariance GMM u_lambda(x) = sum_i w_i u_i(x) learnt by EM (Jegou et al. 2012, sec. III-B).

    Parameters
    ----------
    n_components : int >= 1
        K, the number of Gaussians (16 to 256 in the paper).
    max_iter : int >= 1
        Maximum number of EM iterations.
    tol : float >= 0
        Stop when the mean log-likelihood per descriptor improves by less than ``tol`` (absolute, in nats; the
        criterion and default of scikit-learn's GaussianMixture).
    variance_floor : float >= 0
        Each variance is kept >= ``variance_floor`` times the variance of the training data in that dimension
        (VLFeat's default bound is 1e-4 times the largest data variance, for all dimensions).
    max_samples : int or None
        Train on at most this many descriptors (a random subset).
    init : {"kmeans", "random"}
        Means from k-means (``KMeansVocabulary``, Elkan) or a random choice of training points; variances and
        weights then from the resulting hard partition.
    init_samples : int or None
        Number of descriptors used by the k-means initialisation (a random subset).
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    weights_ : ndarray of shape (K,), float32 — mixture weights w_i, summing to 1
    means_ : ndarray of shape (K, d), float32 — mu_i
    covariances_ : ndarray of shape (K, d), float32 — diagonal variances sigma_i^2 (as scikit-learn's
        ``covariance_type="diag"``)
    lower_bound_ : float — mean log-likelihood per training descriptor at the last iteration
    n_iter_ : int
    converged_ : bool
    n_features_in_ : int
    """

    _fitted_attr = "means_"

    def __init__(self, n_components, *, max_iter=100, tol=1e-3, variance_floor=1e-3, max_samples=None,
                 init="kmeans", init_samples=100_000, random_state=None):
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.variance_floor = variance_floor
        self.max_samples = max_samples
        self.init = init
        self.init_samples = init_samples
        self.random_state = random_state

    def _check_params(self):
        check_scalar(self.n_components, "n_components", _OWNER, low=1)
        check_scalar(self.max_iter, "max_iter", _OWNER, low=1)
        check_scalar(self.tol, "tol", _OWNER, kind=numbers.Real, low=0)
        check_scalar(self.variance_floor, "variance_floor", _OWNER, kind=numbers.Real, low=0)
        if self.max_samples is not None:
            check_scalar(self.max_samples, "max_samples", _OWNER, low=1)
        if self.init_samples is not None:
            check_scalar(self.init_samples, "init_samples", _OWNER, low=1)
        check_choice(self.init, "init", _OWNER, ("kmeans", "random"))

    def _initial_means(self, X, rng):
        K = self.n_components
        Xi = subsample(X, max(self.init_samples or X.shape[0], K), rng)
        if self.init == "random":
            return Xi[rng.choice(Xi.shape[0], size=K, replace=False)].copy()
        from retrieval.aggregation.kmeans import KMeansVocabulary  # training only (numba k-means)

        km = KMeansVocabulary(K, algorithm="elkan", max_iter=50, random_state=rng).fit(Xi)
        return km.cluster_centers_

    def fit(self, X, y=None, *, progress=None):
        """Learn weights, means and diagonal variances by EM.

        Parameters
        ----------
        X : ndarray of shape (n, d) or list of per-image arrays of shape (n_i, d); real, finite; n >= K
        y : ignored
        progress : callable(done, total) or None
            Called after each EM iteration with (iteration, max_iter).

        Returns
        -------
        self
        """
        self._check_params()
        X = stack_training_descriptors(X, _OWNER)
        rng = check_random_state(self.random_state)
        X = np.ascontiguousarray(subsample(X, self.max_samples, rng))
        n, d = X.shape
        K = self.n_components
        if n < K:
            raise ValueError(
                f"The 'n_components' parameter of {_OWNER} must be at most the number of training descriptors "
                f"({n}). Got {K} instead."
            )
        floor = np.maximum(self.variance_floor * X.var(axis=0, dtype=np.float64), 1e-12)
        means = self._initial_means(X, rng).astype(np.float64)
        labels, _ = nearest_centers(X, means.astype(np.float32))
        counts = np.bincount(labels, minlength=K).astype(np.float64)
        import scipy.sparse as sp

        H = sp.csr_matrix((np.ones(n, np.float32), (labels, np.arange(n))), shape=(K, n))
        S1 = np.asarray(H @ X, dtype=np.float64)
        S2 = np.asarray(H @ (X * X), dtype=np.float64)
        safe = np.maximum(counts, 1.0)[:, None]
        covs = np.where(counts[:, None] > 1, S2 / safe - (S1 / safe) ** 2, X.var(axis=0)[None, :])
        covs = np.maximum(covs, floor[None, :])
        weights = np.maximum(counts, 1.0) / np.maximum(counts, 1.0).sum()
        prev = -np.inf
        self.converged_ = False
        it = 0
        mean_ll = -np.inf
        for it in range(1, self.max_iter + 1):
            N, S, total_ll = self._e_step_sums(X, means, covs, weights)
            mean_ll = total_ll / n
            # M-step; a component with (almost) no mass keeps its parameters
            alive = N > 1e-8 * n
            Na = N[alive][:, None]
            means[alive] = S[alive, d:] / Na
            covs[alive] = np.maximum(S[alive, :d] / Na - means[alive] ** 2, floor[None, :])
            weights = np.maximum(N, 1e-12) / max(N.sum(), 1e-12)
            if progress is not None:
                progress(it, self.max_iter)
            logger.debug("GMM EM iteration %d: mean log-likelihood %.6f", it, mean_ll)
            if mean_ll - prev < self.tol:
                self.converged_ = True
                break
            prev = mean_ll
        self.weights_ = (weights / weights.sum()).astype(np.float32)
        self.means_ = means.astype(np.float32)
        self.covariances_ = covs.astype(np.float32)
        self.lower_bound_ = float(mean_ll)
        self.n_iter_ = int(it)
        self.n_features_in_ = int(d)
        logger.info("GMMVocabulary: K=%d on %d x %d, %d iterations, mean log-likelihood %.4f",
                    K, n, d, it, mean_ll)
        return self

    @staticmethod
    def _e_step_sums(X, means, covs, weights):
        """Posteriors gamma_t(i) (eq. 5) by blocks, in float32; returns the sufficient statistics
        N (K,), S (K, 2d) = [sum gamma x^2 | sum gamma x] (float64) and the total log-likelihood."""
        n, d = X.shape
        K = means.shape[0]
        A, B, c = _log_gauss_terms(means, covs, weights, np.float32)
        AB = np.ascontiguousarray(np.concatenate([A, B], axis=1).T)  # (2d, K)
        c32 = c.astype(np.float32)
        N = np.zeros(K)
        S = np.zeros((K, 2 * d))
        total = 0.0
        Z = np.empty((min(_CHUNK, n), 2 * d), dtype=np.float32)
        for s in range(0, n, _CHUNK):
            Xc = X[s:s + _CHUNK]
            m = Xc.shape[0]
            Zc = Z[:m]
            np.multiply(Xc, Xc, out=Zc[:, :d])
            Zc[:, d:] = Xc
            L = Zc @ AB
            L += c32
            mx = L.max(axis=1, keepdims=True)
            L -= mx
            np.exp(L, out=L)
            tot = L.sum(axis=1, keepdims=True)
            L /= tot
            total += float(np.log(tot.astype(np.float64)).sum() + mx.astype(np.float64).sum())
            N += L.sum(axis=0, dtype=np.float64)
            S += (L.T @ Zc).astype(np.float64)
        return N, S, total

    def predict_proba(self, X):
        """Soft assignments gamma_t(i) of eq. 5.

        Parameters
        ----------
        X : ndarray of shape (T, d), real

        Returns
        -------
        gamma : ndarray of shape (T, K), float64, rows summing to 1
        """
        X = self._check_X(X)
        return np.exp(gmm_log_posteriors(X, self.means_, self.covariances_, self.weights_)[0])

    def predict(self, X):
        """Most likely component of each descriptor: ndarray of shape (T,), int64."""
        return np.argmax(self.predict_proba(X), axis=1)

    def score_samples(self, X):
        """log u_lambda(x_t) of each descriptor: ndarray of shape (T,), float64."""
        X = self._check_X(X)
        return gmm_log_posteriors(X, self.means_, self.covariances_, self.weights_)[1]

    def score(self, X, y=None):
        """Mean log-likelihood per descriptor (float)."""
        return float(self.score_samples(X).mean())

    def sample(self, n_samples, random_state=None):
        """Draw descriptors from the mixture: ndarray of shape (n_samples, d), float64 (used to check eq. 13)."""
        check_is_fitted(self, "means_")
        rng = check_random_state(random_state)
        comp = rng.choice(self.means_.shape[0], size=n_samples, p=self.weights_.astype(np.float64)
                          / self.weights_.sum(dtype=np.float64))
        eps = rng.standard_normal((n_samples, self.means_.shape[1]))
        return self.means_[comp].astype(np.float64) + eps * np.sqrt(self.covariances_[comp].astype(np.float64))
