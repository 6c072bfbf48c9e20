"""Large visual vocabularies (100k-1M words): approximate k-means with an IVF assignment structure.

Approximate k-means (AKM, Philbin et al. CVPR 2007, used by Zhu et al. 2013, section 2.2 for its 1M-word vocabulary)
replaces the exact nearest-centre search of Lloyd's assignment step by an approximate nearest-neighbour search.
Philbin et al. use a forest of randomised kd-trees; we use our own two-stage inverted-file quantiser, compiled
with numba, which keeps the per-descriptor work bounded and is saved with the vocabulary:

1. coarse cells: the words are clustered into ``n_coarse`` cells (k-means on the words); the words of a cell are
   stored contiguously (word ids are renumbered in cell order after training, so the structure adds no copy);
2. candidates: a descriptor visits its ``nprobe`` nearest cells (ranked in the first 32 PCA dimensions) and
   ranks their words by the distance in a PCA subspace of ``n_components`` dimensions (PCA of the words);
3. exact re-ranking: the ``n_candidates`` best candidates are re-ranked with the full-dimensional distance.

The descriptors of a call (one image: thousands of rows) are grouped by probed cell, so each cell's words are
read once and scored against all its rows with one small sgemm (kernels in :mod:`._akm_kernels`).

Hard assignment returns the nearest word found; soft assignment (Philbin et al. CVPR 2008) the ``r = 3`` nearest
with weights ``exp(-d^2 / (2 sigma^2))`` normalised to sum to one per descriptor.
"""

from __future__ import annotations

import logging
import math
import numbers

import numpy as np

from retrieval.aggregation._akm_kernels import ivf_knn as _ivf_knn
from retrieval.aggregation._common import check_counts
from retrieval.core.checks import check_array, check_is_fitted, check_random_state, check_scalar
from retrieval.core.kmeans import kmeans, update_centers
from retrieval.core.nearest import nearest_centers, sq_norms
from retrieval.core.pca import fit_pca
from retrieval.core.persistence import PersistableMixin
from retrieval.core.threads import single_threaded_blas

logger = logging.getLogger(__name__)

_PROBE_DIMS = 32

__all__ = ["ApproximateKMeans", "exact_nearest"]


def exact_nearest(X, centers, *, centers_sqnorm=None):
    """Exact nearest centre by brute force, the reference for the approximate assignment: the library's one exact
    search, :func:`retrieval.core.nearest.nearest_centers` (blocked BLAS, bounded memory).

    Returns (labels (n,) int64, sqdist (n,) float32).
    """
    return nearest_centers(X, centers, centers_sqnorm)


class _Structure:
    """The IVF assignment structure over a set of words (already in cell order)."""

    def __init__(self, words, coarse, cell_indptr, components, mean):
        self.words = np.ascontiguousarray(words, dtype=np.float32)
        self.coarse = np.ascontiguousarray(coarse, dtype=np.float32)
        self.cell_indptr = np.asarray(cell_indptr, dtype=np.int64)
        self.components = np.ascontiguousarray(components, dtype=np.float32)   # (d, d')
        self.mean = np.asarray(mean, dtype=np.float32)
        # derived (not saved): projected words and cells, transposed (d', K) for the vectorised scan
        words_r = (self.words - self.mean) @ self.components
        coarse_r = (self.coarse - self.mean) @ self.components
        blk = np.empty(words_r.size, dtype=np.float32)
        for c in range(self.cell_indptr.shape[0] - 1):
            lo, hi = self.cell_indptr[c], self.cell_indptr[c + 1]
            blk[lo * words_r.shape[1]: hi * words_r.shape[1]] = words_r[lo:hi].T.ravel()
        self.words_blk = blk
        self.words_nrm = sq_norms(words_r)
        # cells are ranked in the first (at most 32) PCA dimensions: as good as the full distance for the cell
        # ranking on RootSIFT, at half the probe cost of 64
        self.probe_dims = min(_PROBE_DIMS, coarse_r.shape[1])
        coarse_p = coarse_r[:, :self.probe_dims]
        self.coarse_rT = np.ascontiguousarray(coarse_p.T)
        self.coarse_nrm = sq_norms(coarse_p)

    def knn(self, X, nprobe, n_cand, m, batch_size=32768):
        n = X.shape[0]
        out_w = np.empty((n, m), dtype=np.int64)
        out_d = np.empty((n, m), dtype=np.float32)
        nprobe = min(nprobe, self.coarse.shape[0])
        # one BLAS thread throughout: the kernels call sgemm from their own numba threads, and idle OpenBLAS
        # threads left spinning by a multi-threaded projection would compete with them
        with single_threaded_blas():
            for a in range(0, n, batch_size):
                xb = np.ascontiguousarray(X[a:a + batch_size])
                xr = np.ascontiguousarray((xb - self.mean) @ self.components)
                xp = np.ascontiguousarray(xr[:, :self.probe_dims])
                _ivf_knn(xb, xr, xp, self.coarse_rT, self.coarse_nrm, self.cell_indptr, self.words_blk,
                         self.words_nrm, self.words, nprobe, max(n_cand, m), m, out_w[a:a + batch_size],
                         out_d[a:a + batch_size])
        return out_w, out_d


def _build_structure(words, n_coarse, n_components, rng, coarse_iter=8, max_train=None):
    """Cluster the words into cells, order them by cell, fit the PCA subspace.

    Returns (perm, structure): ``perm[new] = old`` word index.
    """
    K, d = words.shape
    if max_train is None:
        max_train = max(65536, 32 * n_coarse)             # at least 32 words per cell to place the cells
    sample = words if K <= max_train else words[rng.choice(K, size=max_train, replace=False)]
    coarse = kmeans(sample, n_coarse, n_iter=coarse_iter, rng=rng, max_points_per_centroid=None, split_empty=False)
    cell, _ = nearest_centers(words, coarse)
    perm = np.argsort(cell, kind="stable")
    counts = np.bincount(cell, minlength=n_coarse)
    indptr = np.zeros(n_coarse + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    basis = fit_pca(sample, n_components, solver="full")
    comps, mean = basis.components.T, basis.mean
    return perm, _Structure(words[perm], coarse, indptr, comps, mean)


# ----------------------------------------------------------------------------------------------------------------


class ApproximateKMeans(PersistableMixin):
    """Approximate k-means vocabulary (AKM, Philbin et al. 2007) with a saved IVF assignment structure.

    Parameters
    ----------
    n_clusters : int
        Number of visual words K (100k-1M in Zhu et al. 2013).
    n_iter : int
        Lloyd iterations, each with the assignment through the approximate structure.
    n_coarse : int or None
        Cells of the assignment structure; None = ``round(max(sqrt(K), K / 250))`` (cells of about 250 words
        for K >= 62,500).
    nprobe : int
        Cells visited per descriptor.
    n_components : int
        Dimensions of the PCA subspace in which candidates are ranked.
    n_candidates : int
        Candidates re-ranked with the full-dimensional distance.
    random_state : None, int or numpy Generator

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (K, d), dtype float32 -- the words, numbered in cell order
    coarse_centers_ : ndarray of shape (n_coarse, d), dtype float32
    cell_indptr_ : ndarray of shape (n_coarse + 1,), dtype int64 -- words of cell c: ``cell_indptr_[c]:[c+1]``
    components_ : ndarray of shape (d, n_components), dtype float32 ; mean_ : (d,) float32
    sigma_ : float -- soft-assignment bandwidth, ``sqrt(median squared distance to the nearest word)`` on the
        training descriptors (Philbin 2008 fixes sigma^2 = 6250 for raw SIFT; we learn it for any scaling)
    inertia_ : float -- mean squared distance to the assigned word at the last iteration
    """

    def __init__(self, n_clusters: int = 100_000, *, n_iter: int = 10, n_coarse: int | None = None,
                 nprobe: int = 8, n_components: int = 64, n_candidates: int = 16, random_state=None):
        self.n_clusters = n_clusters
        self.n_iter = n_iter
        self.n_coarse = n_coarse
        self.nprobe = nprobe
        self.n_components = n_components
        self.n_candidates = n_candidates
        self.random_state = random_state

    def _check_params(self):
        own = type(self).__name__
        check_scalar(self.n_clusters, "n_clusters", own, low=1)
        check_scalar(self.n_iter, "n_iter", own, low=0)
        check_counts(self, own, ("n_coarse", "nprobe", "n_components", "n_candidates"), optional=("n_coarse",))

    def _ncoarse(self, K):
        nc = self.n_coarse if self.n_coarse is not None else max(1, int(round(max(math.sqrt(K), K / 250))))
        return min(nc, K)

    def fit(self, X, y=None) -> ApproximateKMeans:
        """Learn K words from descriptors X of shape (n, d) (float32; n >= K)."""
        self._check_params()
        X = check_array(X, "X", min_rows=self.n_clusters)
        X = np.ascontiguousarray(X)
        rng = check_random_state(self.random_state)
        K, d = self.n_clusters, X.shape[1]
        ncomp = min(self.n_components, d)
        nc = self._ncoarse(K)
        centers = X[rng.choice(X.shape[0], size=K, replace=False)].copy()
        inertia = float("nan")
        for it in range(self.n_iter):
            perm, st = _build_structure(centers, nc, ncomp, rng)
            w, dist = st.knn(X, self.nprobe, self.n_candidates, 1)
            labels = perm[w[:, 0]]
            inertia = float(dist[:, 0].mean())
            counts = update_centers(X, labels, centers)
            logger.info("AKM iteration %d/%d: inertia %.5f, %d empty words", it + 1, self.n_iter, inertia,
                        int((counts == 0).sum()))
        self._set_structure(*_build_structure(centers, nc, ncomp, rng))
        w, dist = self._structure.knn(X[: min(X.shape[0], 200_000)], self.nprobe, self.n_candidates, 1)
        self.sigma_ = float(np.sqrt(max(np.median(dist[:, 0]), 1e-12)))
        self.inertia_ = inertia if self.n_iter else float(dist[:, 0].mean())
        return self

    def _set_structure(self, perm, st):
        self.cluster_centers_ = st.words
        self.coarse_centers_ = st.coarse
        self.cell_indptr_ = st.cell_indptr
        self.components_ = st.components
        self.mean_ = st.mean
        self._structure = st

    def _set_extra_state(self, attributes, arrays):
        self._rebuild()

    def _rebuild(self):
        self._structure = _Structure(self.cluster_centers_, self.coarse_centers_, self.cell_indptr_,
                                     self.components_, self.mean_)

    @classmethod
    def from_centers(cls, centers, *, n_coarse=None, nprobe=8, n_components=64, n_candidates=16,
                     random_state=None) -> ApproximateKMeans:
        """Build only the assignment structure over given words (e.g. a vocabulary trained elsewhere).

        The words are renumbered in cell order: ``cluster_centers_`` is a permutation of ``centers`` and
        ``perm_`` (K,) int64 gives ``cluster_centers_[i] = centers[perm_[i]]``.
        """
        centers = check_array(centers, "centers")
        obj = cls(centers.shape[0], n_iter=0, n_coarse=n_coarse, nprobe=nprobe, n_components=n_components,
                  n_candidates=n_candidates, random_state=random_state)
        obj._check_params()
        rng = check_random_state(random_state)
        perm, st = _build_structure(np.ascontiguousarray(centers), obj._ncoarse(centers.shape[0]),
                                    min(n_components, centers.shape[1]), rng)
        obj._set_structure(perm, st)
        obj.perm_ = perm.astype(np.int64)
        obj.sigma_ = float("nan")
        obj.inertia_ = float("nan")
        return obj

    def _check_X(self, X):
        check_is_fitted(self, ["cluster_centers_"])
        if not hasattr(self, "_structure"):
            self._rebuild()
        return np.ascontiguousarray(check_array(X, "X", n_features=self.cluster_centers_.shape[1]))

    def kneighbors(self, X, n_neighbors: int = 1):
        """Approximate ``n_neighbors`` nearest words of each descriptor.

        Returns
        -------
        sqdist : ndarray of shape (n, n_neighbors), dtype float32, ascending (inf when fewer were found)
        words : ndarray of shape (n, n_neighbors), dtype int64 (-1 when fewer were found)
        """
        check_scalar(n_neighbors, "n_neighbors", type(self).__name__, low=1)
        X = self._check_X(X)
        w, d = self._structure.knn(X, self.nprobe, self.n_candidates, n_neighbors)
        return d, w

    def predict(self, X) -> np.ndarray:
        """Hard assignment: nearest word of each descriptor, ndarray of shape (n,), dtype int64."""
        return self.kneighbors(X, 1)[1][:, 0]

    def soft_assign(self, X, r: int = 3, sigma: float | None = None):
        """Soft assignment to the r nearest words (Philbin et al. 2008).

        Parameters
        ----------
        X : ndarray of shape (n, d), dtype float32
        r : int -- number of words per descriptor (3 in the paper)
        sigma : float or None -- bandwidth; None uses ``sigma_`` learnt at fit

        Returns
        -------
        words : ndarray of shape (n, r), dtype int64
        weights : ndarray of shape (n, r), dtype float32 -- ``exp(-d^2 / (2 sigma^2))`` normalised per row
        """
        check_scalar(r, "r", "soft_assign", low=1)
        if sigma is None:
            sigma = getattr(self, "sigma_", float("nan"))
            if not np.isfinite(sigma):
                raise ValueError("soft_assign needs sigma: this vocabulary has no learnt sigma_ (pass sigma=...).")
        check_scalar(float(sigma), "sigma", "soft_assign", kind=numbers.Real, low=0, closed="neither")
        d, w = self.kneighbors(X, r)
        logits = -(d - d[:, :1]) / (2.0 * float(sigma) ** 2)
        weights = np.where(w >= 0, np.exp(logits), 0.0)
        s = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(s > 0, s, 1.0)
        return np.where(w >= 0, w, 0), weights.astype(np.float32)

    @property
    def n_features_in_(self) -> int:
        check_is_fitted(self, ["cluster_centers_"])
        return int(self.cluster_centers_.shape[1])
