"""VLAD, the vector of locally aggregated descriptors (Jegou et al. 2012, sec. III-C, eq. 18 and Algorithm 1): for each
k-means word mu_i, the sum of the residuals x_t - mu_i of the descriptors whose nearest word is mu_i;
power normalisation (eq. 7), optional intra-normalisation (Arandjelovic & Zisserman, CVPR 2013: each word's
block divided by its L2 norm), then global L2 -- the order of VLFeat's ``vl_vlad``.

Layout: the K blocks of d residual sums v_1..v_K (the same as VLFeat's ``vl_vlad``).
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.aggregation._common import DenseAggregator
from retrieval.aggregation.kmeans import KMeansVocabulary
from retrieval.core.checks import check_choice, check_is_fitted, check_scalar
from retrieval.core.nearest import nearest_centers, sq_norms

__all__ = ["VLAD", "vlad_vector"]

_OWNER = "VLAD"


def _intra_normalize(V, K):
    """L2-normalise each of the K blocks of every row of V (n, K d) in place; zero blocks stay zero."""
    B = V.reshape(V.shape[0], K, -1)
    norms = np.linalg.norm(B, axis=2, keepdims=True)
    np.divide(B, norms, out=B, where=norms > 0)
    return V


def _vlad_raw(X, C, c_sq, intra):
    K, d = C.shape
    labels, _ = nearest_centers(X, C, c_sq)
    counts = np.bincount(labels, minlength=K).astype(np.float64)
    order = np.argsort(labels, kind="stable")
    Xs = X[order].astype(np.float64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    S = np.zeros((K, d))
    nz = counts > 0
    S[nz] = np.add.reduceat(Xs, starts[nz], axis=0)
    V = (S - counts[:, None] * C.astype(np.float64)).reshape(1, -1)  # eq. 18
    if intra:
        _intra_normalize(V, K)
    return V.ravel()


def vlad_vector(X, cluster_centers, *, intra_normalize=False):
    """Raw VLAD of one image, eq. 18 (Algorithm 1 before its normalisation steps).

    Parameters
    ----------
    X : ndarray of shape (T, d), real, T >= 1
    cluster_centers : ndarray of shape (K, d)
    intra_normalize : bool
        L2-normalise each block v_i (Arandjelovic & Zisserman 2013).

    Returns
    -------
    ndarray of shape (K d,), float64
    """
    C = np.ascontiguousarray(cluster_centers, dtype=np.float32)
    return _vlad_raw(np.asarray(X, dtype=np.float32), C, sq_norms(C), intra_normalize)


class VLAD(DenseAggregator):
    """VLAD aggregation (Jegou et al. 2012, eq. 18, Algorithm 1).

    Parameters
    ----------
    n_clusters : int >= 1
        K, the number of k-means words (16 to 256 in the paper).
    alpha : float in (0, 1]
        Power normalisation exponent (eq. 7); Algorithm 1's power step; 1 disables it.
    intra_normalize : bool
        L2-normalise each word's block after the power step and before the global L2 step (VLFeat's
        ``NormalizeComponents``).
    normalize : {"l2", None}
        Final L2 normalisation.
    kmeans_params : dict or None
        Extra keyword arguments of the ``KMeansVocabulary`` trained by :meth:`fit`.
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (K, d), float32
    n_features_in_ : int
    """

    _owner = _OWNER

    def __init__(self, n_clusters, alpha=0.5, *, intra_normalize=False, normalize="l2",
                 kmeans_params=None, random_state=None):
        self.n_clusters = n_clusters
        self.alpha = alpha
        self.intra_normalize = intra_normalize
        self.normalize = normalize
        self.kmeans_params = kmeans_params
        self.random_state = random_state

    def _check_params(self):
        check_scalar(self.n_clusters, "n_clusters", _OWNER, low=1)
        check_scalar(self.alpha, "alpha", _OWNER, kind=numbers.Real, low=0, high=1, closed="right")
        check_choice(self.intra_normalize, "intra_normalize", _OWNER, (True, False))
        check_choice(self.normalize, "normalize", _OWNER, ("l2", None))

    def _train_vocabulary(self, X):
        return KMeansVocabulary(self.n_clusters, random_state=self.random_state, **(self.kmeans_params or {})).fit(X)

    @classmethod
    def from_vocabulary(cls, vocabulary, **params):
        """A fitted VLAD using an already trained ``KMeansVocabulary`` (shared, e.g., with a BoW)."""
        check_is_fitted(vocabulary, "cluster_centers_")
        obj = cls(int(vocabulary.cluster_centers_.shape[0]), **params)
        obj._check_params()
        return obj._set_vocabulary(vocabulary)

    def _set_vocabulary(self, voc):
        self.cluster_centers_ = np.ascontiguousarray(voc.cluster_centers_, dtype=np.float32).copy()
        self.n_features_in_ = int(self.cluster_centers_.shape[1])
        return self

    @property
    def dim_(self) -> int:
        """Output dimension D = K d."""
        check_is_fitted(self, "cluster_centers_")
        return int(self.cluster_centers_.size)

    def _encoder(self):
        C = self.cluster_centers_
        c_sq = sq_norms(C)
        return lambda X: _vlad_raw(X, C, c_sq, False)

    def _block_normalize(self, V):
        return _intra_normalize(V, self.cluster_centers_.shape[0]) if self.intra_normalize else V
