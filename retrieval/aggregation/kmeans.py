"""k-means visual vocabulary (Jegou et al. 2012, sec. III-A: "a codebook of K centroids ... obtained by k-means"),
with hard assignment (nearest word) and the soft assignment of Philbin et al. (CVPR 2008).

Training uses VLFeat's k-means through the library's one k-means entry point, :func:`retrieval.core.kmeans.kmeans`
(Elkan's accelerated exact algorithm for small K, the kd-forest approximate-nearest-neighbour variant for large K),
k-means++ initialisation seeded from ``random_state``; assignments use :mod:`retrieval.core.nearest`.
"""

from __future__ import annotations

import logging
import numbers

import numpy as np

from retrieval.aggregation._common import Vocabulary, check_counts, stack_training_descriptors, subsample
from retrieval.core.checks import check_choice, check_random_state, check_scalar
from retrieval.core.kmeans import kmeans
from retrieval.core.nearest import k_nearest_centers, nearest_centers, squared_distances

__all__ = ["KMeansVocabulary"]

logger = logging.getLogger(__name__)

_OWNER = "KMeansVocabulary"


class KMeansVocabulary(Vocabulary):
    """A visual vocabulary of ``n_clusters`` words learnt by k-means (Jegou et al. 2012, sec. III-A and III-C).

    Parameters
    ----------
    n_clusters : int in [1, 65536]
        K, the number of visual words (vocabularies of 100k+ words: ``retrieval.aggregation.large_vocabulary``).
    algorithm : {"auto", "elkan", "ann", "lloyd"}
        VLFeat's k-means variant; "auto" is "elkan" for K <= 256 and "ann" (kd-forest with ``num_trees``
        trees and ``max_comparisons`` comparisons per query) above (Elkan keeps K^2 centre distances and
        becomes slower than ANN beyond a few hundred words).
    init : {"plusplus", "randsel"}
        k-means++ seeding or a random selection of training points.
    max_iter : int >= 1
    n_init : int >= 1
        Number of runs; the one of lowest energy is kept (VLFeat's ``num_repetitions``).
    max_samples : int or None
        Train on at most this many descriptors (a random subset).
    num_trees, max_comparisons : int
        kd-forest parameters of the "ann" algorithm.
    random_state : None, int or numpy.random.Generator
        Seeds the subsampling and VLFeat's generator (initialisation).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (K, d), float32
    sigma_ : float
        Root-mean-square distance of the training descriptors to their nearest word: the default bandwidth
        of :meth:`soft_assign`.
    inertia_ : float
        Sum of squared distances of the training descriptors to their nearest word.
    n_features_in_ : int
    """

    def __init__(self, n_clusters, *, algorithm="auto", init="plusplus", max_iter=100, n_init=1,
                 max_samples=None, num_trees=3, max_comparisons=100, random_state=None):
        self.n_clusters = n_clusters
        self.algorithm = algorithm
        self.init = init
        self.max_iter = max_iter
        self.n_init = n_init
        self.max_samples = max_samples
        self.num_trees = num_trees
        self.max_comparisons = max_comparisons
        self.random_state = random_state

    def _check_params(self):
        check_scalar(self.n_clusters, "n_clusters", _OWNER, low=1, high=65536)
        check_choice(self.algorithm, "algorithm", _OWNER, ("auto", "elkan", "ann", "lloyd"))
        check_choice(self.init, "init", _OWNER, ("plusplus", "randsel"))
        check_counts(self, _OWNER, ("max_iter", "n_init", "max_samples", "num_trees", "max_comparisons"),
                     optional=("max_samples",))

    def fit(self, X, y=None):
        """Learn the vocabulary.

        Parameters
        ----------
        X : ndarray of shape (n, d) or list of per-image arrays of shape (n_i, d); real, finite
            Training descriptors (e.g. RootSIFT reduced to 64-d by PCA). n must be >= K.
        y : ignored

        Returns
        -------
        self
        """
        self._check_params()
        X = stack_training_descriptors(X, _OWNER)
        rng = check_random_state(self.random_state)
        X = np.ascontiguousarray(subsample(X, self.max_samples, rng))
        K = self.n_clusters
        if X.shape[0] < K:
            raise ValueError(
                f"The 'n_clusters' parameter of {_OWNER} must be at most the number of training descriptors "
                f"({X.shape[0]}). Got {K} instead."
            )
        algo = self.algorithm
        if algo == "auto":
            algo = "elkan" if K <= 256 else "ann"
        C = kmeans(X, K, rng=rng, n_iter=self.max_iter, algorithm=f"vlfeat-{algo}", init=self.init,
                   n_init=self.n_init, num_trees=self.num_trees, max_comparisons=self.max_comparisons)
        _, dist = nearest_centers(X, C)
        self.cluster_centers_ = C
        self.inertia_ = float(dist.astype(np.float64).sum())
        self.sigma_ = float(np.sqrt(self.inertia_ / X.shape[0])) or 1.0
        self.n_features_in_ = int(X.shape[1])
        logger.info("KMeansVocabulary: K=%d on %d x %d descriptors (%s), inertia %.4g",
                    K, X.shape[0], X.shape[1], algo, self.inertia_)
        return self

    def predict(self, X):
        """Nearest visual word of each descriptor (exact, by blocked matrix products).

        Parameters
        ----------
        X : ndarray of shape (n, d), real

        Returns
        -------
        labels : ndarray of shape (n,), dtype int64, in [0, K)
        """
        X = self._check_X(X)
        return nearest_centers(X, self.cluster_centers_)[0]

    def transform(self, X):
        """Squared Euclidean distances to every word: ndarray of shape (n, K), float32 (for small K)."""
        return squared_distances(self._check_X(X), self.cluster_centers_)

    def soft_assign(self, X, r=3, sigma=None, *, normalize=True):
        """Soft assignment of Philbin et al. 2008: the ``r`` nearest words of each descriptor with weights
        ``exp(-d^2 / (2 sigma^2))``, d the Euclidean distance to the word.

        Parameters
        ----------
        X : ndarray of shape (n, d), real
        r : int >= 1
            Number of words per descriptor (3 in Philbin et al.).
        sigma : float > 0 or None
            Bandwidth; None uses ``sigma_`` (RMS quantisation distance of the training set).
        normalize : bool
            Scale the r weights of each descriptor to sum to 1 (as Philbin et al.).

        Returns
        -------
        labels : ndarray of shape (n, r), int64 — words by increasing distance
        weights : ndarray of shape (n, r), float32
        """
        X = self._check_X(X)
        check_scalar(r, "r", "soft_assign", low=1)
        if sigma is None:
            sigma = self.sigma_
        check_scalar(sigma, "sigma", "soft_assign", kind=numbers.Real, low=0, closed="neither")
        labels, d2 = k_nearest_centers(X, self.cluster_centers_, r)
        # subtract the nearest distance before exp: same normalised weights, no underflow
        shift = d2[:, :1] if normalize else 0.0
        w = np.exp(-(d2 - shift) / (2.0 * float(sigma) ** 2)).astype(np.float32)
        if normalize:
            w /= w.sum(axis=1, keepdims=True)
        return labels, w
