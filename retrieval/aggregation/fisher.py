"""Fisher vector (Jegou et al. 2012, sec. III-B): the gradient of the descriptors' log-likelihood under a diagonal GMM
with respect to the means (eq. 6), whitened by the closed-form diagonal Fisher information, soft assignments
gamma_t(i) of eq. 5, optionally the gradient with respect to the variances (footnote 3, giving 2Kd), then
power normalisation (eq. 7) and L2 normalisation.

Layout of the vector (the same as VLFeat's ``vl_fisher``): the K blocks of d mean gradients G_mu_1..G_mu_K,
then (``variances=True``) the K blocks of d variance gradients.
"""

from __future__ import annotations

import logging
import numbers

import numpy as np

from retrieval.aggregation._common import DenseAggregator
from retrieval.aggregation.gmm import GMMVocabulary
from retrieval.core.checks import check_choice, check_is_fitted, check_scalar

__all__ = ["FisherVector", "fisher_vector"]

logger = logging.getLogger(__name__)

_OWNER = "FisherVector"


class _GMMTerms:
    """Precomputed per-component quantities of a diagonal GMM for fast encoding (float64 unless noted)."""

    def __init__(self, weights, means, covariances):
        w = np.asarray(weights, dtype=np.float64)
        mu = np.asarray(means, dtype=np.float64)
        var = np.asarray(covariances, dtype=np.float64)
        inv = 1.0 / var
        self.K, self.d = mu.shape
        self.mu = mu
        self.inv_sigma = np.sqrt(inv)
        # log w_i + log N(x; mu_i, sigma_i^2) = x^2 . A_i + x . B_i + c_i   (the 2 pi term cancels in eq. 5)
        self.AB = np.concatenate([-0.5 * inv, mu * inv], axis=1).T.copy()  # (2d, K)
        self.c = np.log(w) - 0.5 * np.log(var).sum(1) - 0.5 * (mu * mu * inv).sum(1)
        self.u_scale = 1.0 / np.sqrt(w)
        self.v_scale = 1.0 / np.sqrt(2.0 * w)


def _fisher_raw(X, t: _GMMTerms, variances: bool) -> np.ndarray:
    """Un-normalised Fisher vector of one descriptor set X (T, d) float32 -> (K d) or (2 K d) float64."""
    T = X.shape[0]
    X64 = X.astype(np.float64)
    Z = np.concatenate([X64 * X64, X64], axis=1)  # (T, 2d)
    L = Z @ t.AB
    L += t.c
    L -= L.max(axis=1, keepdims=True)
    np.exp(L, out=L)
    L /= L.sum(axis=1, keepdims=True)  # gamma_t(i), eq. 5
    s0 = L.sum(axis=0)  # (K,)
    S = L.T @ Z  # (K, 2d): [sum gamma x^2 | sum gamma x]
    s1, s2 = S[:, t.d:], S[:, :t.d]
    mu = t.mu
    # eq. 6: G_mu_i = 1/(T sqrt(w_i)) sum_t gamma_t(i) (x_t - mu_i) / sigma_i
    u = (s1 - s0[:, None] * mu) * t.inv_sigma * (t.u_scale / T)[:, None]
    if not variances:
        return u.ravel()
    # G_sigma_i = 1/(T sqrt(2 w_i)) sum_t gamma_t(i) [((x_t - mu_i)/sigma_i)^2 - 1]
    sq = (s2 - 2.0 * mu * s1 + (mu * mu) * s0[:, None]) * (t.inv_sigma**2) - s0[:, None]
    v = sq * (t.v_scale / T)[:, None]
    return np.concatenate([u.ravel(), v.ravel()])


def fisher_vector(X, weights, means, covariances, *, variances=False):
    """Raw (un-normalised) Fisher vector of one image, eq. 6 (and the variance gradient when asked).

    Parameters
    ----------
    X : ndarray of shape (T, d), real, T >= 1
    weights : ndarray of shape (K,); means, covariances : ndarray of shape (K, d) (diagonal variances)
    variances : bool

    Returns
    -------
    ndarray of shape (K d,) or (2 K d,), float64 — means part first, then variances part (VLFeat layout).
    """
    X = np.asarray(X, dtype=np.float32)
    return _fisher_raw(X, _GMMTerms(weights, means, covariances), variances)


class FisherVector(DenseAggregator):
    """Fisher vector aggregation (Jegou et al. 2012, sec. III-B, eq. 5-7).

    Parameters
    ----------
    n_components : int >= 1
        K, the number of Gaussians of the GMM vocabulary.
    alpha : float in (0, 1]
        Power normalisation exponent (eq. 7); 0.5 is the paper's choice; 1 disables it.
    variances : bool
        Append the gradient with respect to the variances (dimension 2Kd instead of Kd).
    normalize : {"l2", None}
        Final L2 normalisation (after the power normalisation).
    gmm_params : dict or None
        Extra keyword arguments of the ``GMMVocabulary`` trained by :meth:`fit` (e.g. max_samples).
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    weights_ : ndarray of shape (K,), float32
    means_ : ndarray of shape (K, d), float32
    covariances_ : ndarray of shape (K, d), float32 (diagonal variances)
    n_features_in_ : int — d
    """

    _owner = _OWNER
    _fitted_attr = "means_"

    def __init__(self, n_components, alpha=0.5, *, variances=False, normalize="l2", gmm_params=None,
                 random_state=None):
        self.n_components = n_components
        self.alpha = alpha
        self.variances = variances
        self.normalize = normalize
        self.gmm_params = gmm_params
        self.random_state = random_state

    def _check_params(self):
        check_scalar(self.n_components, "n_components", _OWNER, low=1)
        check_scalar(self.alpha, "alpha", _OWNER, kind=numbers.Real, low=0, high=1, closed="right")
        check_choice(self.variances, "variances", _OWNER, (True, False))
        check_choice(self.normalize, "normalize", _OWNER, ("l2", None))

    def _train_vocabulary(self, X):
        return GMMVocabulary(self.n_components, random_state=self.random_state, **(self.gmm_params or {})).fit(X)

    @classmethod
    def from_gmm(cls, gmm, **params):
        """A fitted FisherVector using an already trained ``GMMVocabulary`` (or any object with ``weights_``,
        ``means_``, ``covariances_`` of shapes (K,), (K, d), (K, d))."""
        check_is_fitted(gmm, ["weights_", "means_", "covariances_"])
        obj = cls(int(np.asarray(gmm.means_).shape[0]), **params)
        obj._check_params()
        return obj._set_vocabulary(gmm)

    def _set_vocabulary(self, g):
        self.weights_ = np.asarray(g.weights_, dtype=np.float32).copy()
        self.means_ = np.asarray(g.means_, dtype=np.float32).copy()
        self.covariances_ = np.asarray(g.covariances_, dtype=np.float32).copy()
        self.n_features_in_ = int(self.means_.shape[1])
        return self

    @property
    def dim_(self) -> int:
        """Output dimension D = K d (or 2 K d with variances)."""
        check_is_fitted(self, "means_")
        return int(self.means_.size * (2 if self.variances else 1))

    def _encoder(self):
        terms = _GMMTerms(self.weights_, self.means_, self.covariances_)
        variances = self.variances
        return lambda X: _fisher_raw(X, terms, variances)
