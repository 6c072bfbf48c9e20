"""Bag of visual words (Jegou et al. 2012, sec. III-A): the histogram of the visual words of an image's descriptors,
hard (nearest word) or soft (Philbin et al. 2008) assignment, optional power normalisation of the term
frequencies, idf weighting idf_i = log(N / n_i) (N images, n_i of them containing word i), then L1 or L2
normalisation.

Per image: ``h = tf`` (counts, or summed soft weights) -> ``h = h^alpha`` -> ``h = h * idf`` -> ``h / ||h||``.

Vocabularies of up to 65,536 words are assigned exactly; larger ones (Jegou et al. 2012, Table II's 200k words) through an
approximate nearest-word structure (:class:`retrieval.aggregation.large_vocabulary.ApproximateKMeans`, Philbin et
al. 2007), built deterministically from ``cluster_centers_`` on first use (docs/differences.md).
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from retrieval.aggregation._common import Aggregator, as_image_list, checked_image
from retrieval.aggregation.kmeans import KMeansVocabulary
from retrieval.aggregation.large_vocabulary import ApproximateKMeans
from retrieval.aggregation.normalize import l1_normalize, l2_normalize
from retrieval.core.checks import NotFittedError, check_choice, check_is_fitted, check_scalar
from retrieval.core.nearest import nearest_centers, sq_norms
from retrieval.core.threads import single_threaded_blas

__all__ = ["BoW"]

_OWNER = "BoW"
EXACT_MAX_WORDS = 65536  # above: approximate assignment (ApproximateKMeans over the words)
MAX_WORDS = 1 << 24


class BoW(Aggregator):
    """Bag-of-words histograms with tf-idf weighting (Jegou et al. 2012, sec. III-A).

    Parameters
    ----------
    n_clusters : int in [1, 2**24]
        K, the vocabulary size (above 65,536: approximate assignment, see the module docstring).
    assignment : {"hard", "soft"}
        Nearest word, or the ``soft_r`` nearest words weighted by exp(-d^2 / 2 sigma^2) (Philbin et al. 2008).
    soft_r : int >= 1
    soft_sigma : float or None
        Bandwidth of the soft assignment; None uses the vocabulary's ``sigma_`` (RMS quantisation distance).
    alpha : float in (0, 1]
        Power applied to the term frequencies (0.5: square root; 1: none).
    idf : bool
        Weight words by idf_i = log(N / n_i), learnt by :meth:`fit` from per-image descriptors or set later
        by :meth:`fit_idf` / :meth:`set_document_frequencies` from the indexed collection. Words that occur
        in no image get idf 0.
    norm : {"l2", "l1", None}
    sparse : {"auto", True, False}
        Return a CSR matrix ("auto": when K > 4096).
    kmeans_params : dict or None
        Extra keyword arguments of the ``KMeansVocabulary`` trained by :meth:`fit`.
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (K, d), float32
    sigma_ : float — default soft-assignment bandwidth
    idf_ : ndarray of shape (K,), float32, or None (not learnt yet)
    n_documents_ : int or None — N used for ``idf_``
    n_features_in_ : int
    """

    def __init__(self, n_clusters, *, assignment="hard", soft_r=3, soft_sigma=None, alpha=1.0, idf=True,
                 norm="l2", sparse="auto", kmeans_params=None, random_state=None):
        self.n_clusters = n_clusters
        self.assignment = assignment
        self.soft_r = soft_r
        self.soft_sigma = soft_sigma
        self.alpha = alpha
        self.idf = idf
        self.norm = norm
        self.sparse = sparse
        self.kmeans_params = kmeans_params
        self.random_state = random_state

    def _check_params(self):
        check_scalar(self.n_clusters, "n_clusters", _OWNER, low=1, high=MAX_WORDS)
        check_choice(self.assignment, "assignment", _OWNER, ("hard", "soft"))
        check_scalar(self.soft_r, "soft_r", _OWNER, low=1)
        if self.soft_sigma is not None:
            check_scalar(self.soft_sigma, "soft_sigma", _OWNER, kind=numbers.Real, low=0, closed="neither")
        check_scalar(self.alpha, "alpha", _OWNER, kind=numbers.Real, low=0, high=1, closed="right")
        check_choice(self.idf, "idf", _OWNER, (True, False))
        check_choice(self.norm, "norm", _OWNER, ("l2", "l1", None))
        check_choice(self.sparse, "sparse", _OWNER, ("auto", True, False))

    def fit(self, X, y=None):
        """Learn the vocabulary and, from a list of per-image arrays, the idf.

        Parameters
        ----------
        X : list of per-image ndarray (n_i, d) — vocabulary and idf; or ndarray of shape (n, d) — vocabulary
            only (call :meth:`fit_idf` later)
        y : ignored

        Returns
        -------
        self
        """
        self._check_params()
        voc = KMeansVocabulary(self.n_clusters, random_state=self.random_state,
                               **(self.kmeans_params or {})).fit(X)
        self._set_vocabulary(voc)
        if self.idf and not (isinstance(X, np.ndarray) and X.ndim == 2):
            self.fit_idf(X)
        return self

    @classmethod
    def from_vocabulary(cls, vocabulary, descriptor_sets=None, **params):
        """A BoW using an already trained ``KMeansVocabulary``; idf learnt from ``descriptor_sets`` when given
        (else call :meth:`fit_idf` / :meth:`set_document_frequencies` before :meth:`transform`)."""
        check_is_fitted(vocabulary, "cluster_centers_")
        obj = cls(int(vocabulary.cluster_centers_.shape[0]), **params)
        obj._check_params()
        obj._set_vocabulary(vocabulary)
        if hasattr(vocabulary, "kneighbors"):  # an ApproximateKMeans: reuse its assignment structure
            obj._akm = vocabulary
        if obj.idf and descriptor_sets is not None:
            obj.fit_idf(descriptor_sets)
        return obj

    def _set_vocabulary(self, voc):
        self.cluster_centers_ = np.ascontiguousarray(voc.cluster_centers_, dtype=np.float32).copy()
        self.sigma_ = float(getattr(voc, "sigma_", 1.0))
        self.n_features_in_ = int(self.cluster_centers_.shape[1])
        self.idf_ = None
        self.n_documents_ = None
        self._akm = None
        return self

    # -- term frequencies ---------------------------------------------------------------------------------
    def _words(self, X, c_sq):
        """(word ids (m,), weights (m,)) of one image's descriptors."""
        C = self.cluster_centers_
        if C.shape[0] > EXACT_MAX_WORDS:
            return self._approximate_words(X)
        if self.assignment == "hard":
            labels, _ = nearest_centers(X, C, c_sq)
            return labels, np.ones(labels.shape[0], dtype=np.float64)
        voc = KMeansVocabulary(C.shape[0])
        voc.cluster_centers_ = C
        voc.sigma_ = self.sigma_
        labels, w = voc.soft_assign(X, r=self.soft_r, sigma=self.soft_sigma)
        return labels.ravel(), w.ravel().astype(np.float64)

    def _approximate_words(self, X):
        """Hard or soft words of one image through an ApproximateKMeans structure over ``cluster_centers_``: the
        vocabulary's own when :meth:`from_vocabulary` was given an ApproximateKMeans, else built once from the
        words (``random_state=0``; not persisted: rebuilt after loading)."""
        akm = getattr(self, "_akm", None)
        if akm is None:
            akm = ApproximateKMeans.from_centers(self.cluster_centers_, random_state=0)
            self._akm = akm
        # words in our order: a structure built by from_centers renumbers them (perm_), a fitted one does not
        perm = getattr(akm, "perm_", None)
        if self.assignment == "hard":
            labels = akm.predict(X)
            labels = labels if perm is None else perm[labels]
            return labels, np.ones(labels.shape[0], dtype=np.float64)
        sigma = self.soft_sigma if self.soft_sigma is not None else self.sigma_
        labels, w = akm.soft_assign(X, r=self.soft_r, sigma=sigma)
        labels = labels if perm is None else perm[labels]
        return labels.ravel(), w.ravel().astype(np.float64)

    def term_frequencies(self, descriptor_sets, *, names=None, progress=None):
        """Raw histograms (counts, or summed soft weights) as CSR of shape (n_images, K), float32."""
        check_is_fitted(self, "cluster_centers_")
        self._check_params()
        sets = as_image_list(descriptor_sets, _OWNER)
        n, K = len(sets), self.cluster_centers_.shape[0]
        C = self.cluster_centers_
        c_sq = sq_norms(C)
        indptr, indices, data = [0], [], []
        with single_threaded_blas():
            for i, X in enumerate(sets):
                arr = checked_image(X, i, self.n_features_in_, names)
                if arr is not None:
                    labels, w = self._words(arr, c_sq)
                    h = np.bincount(labels, weights=w, minlength=K)
                    nz = np.flatnonzero(h)
                    indices.append(nz)
                    data.append(h[nz])
                    indptr.append(indptr[-1] + nz.size)
                else:
                    indptr.append(indptr[-1])
                if progress is not None and ((i + 1) % 64 == 0 or i + 1 == n):
                    progress(i + 1, n)
        ind = np.concatenate(indices) if indices else np.zeros(0, np.int64)
        dat = np.concatenate(data) if data else np.zeros(0)
        return sp.csr_matrix((dat.astype(np.float32), ind, np.asarray(indptr)), shape=(n, K))

    # -- idf ----------------------------------------------------------------------------------------------
    def set_document_frequencies(self, document_frequencies, n_documents):
        """Set idf_i = log(N / n_i) from the number n_i of images containing each word (0 where n_i = 0).

        Parameters
        ----------
        document_frequencies : array-like of shape (K,), non-negative integers
        n_documents : int >= 1 — N

        Returns
        -------
        self
        """
        check_is_fitted(self, "cluster_centers_")
        check_scalar(n_documents, "n_documents", "set_document_frequencies", low=1)
        df = np.asarray(document_frequencies, dtype=np.float64)
        K = self.cluster_centers_.shape[0]
        if df.shape != (K,) or (df < 0).any() or (df > n_documents).any():
            raise ValueError(f"document_frequencies must have shape ({K},) with values in [0, {n_documents}]; "
                             f"got shape {df.shape}.")
        idf = np.zeros(K)
        nz = df > 0
        idf[nz] = np.log(n_documents / df[nz])
        self.idf_ = idf.astype(np.float32)
        self.n_documents_ = int(n_documents)
        return self

    def fit_idf(self, descriptor_sets, *, names=None, progress=None):
        """Learn idf from a collection of images (e.g. the indexed collection).

        Parameters
        ----------
        descriptor_sets : list of ndarray of shape (n_i, d)

        Returns
        -------
        self
        """
        tf = self.term_frequencies(descriptor_sets, names=names, progress=progress)
        df = np.diff(sp.csc_matrix(tf).indptr)
        return self.set_document_frequencies(df, max(tf.shape[0], 1))

    # -- transform ----------------------------------------------------------------------------------------
    def _encode_images(self, descriptor_sets, names, progress):
        tf = self.term_frequencies(descriptor_sets, names=names, progress=progress)
        return tf, np.diff(tf.indptr) == 0

    def _finish(self, tf):
        if self.alpha != 1:
            tf.data = np.power(tf.data, self.alpha, dtype=np.float32)
        if self.idf:
            if self.idf_ is None:
                raise NotFittedError("This BoW has idf=True but no idf_ yet: fit it on a list of per-image "
                                     "descriptor arrays, or call fit_idf / set_document_frequencies.")
            tf = sp.csr_matrix(tf.multiply(self.idf_[None, :]), dtype=np.float32)
            tf.eliminate_zeros()
        if self.norm == "l2":
            tf = l2_normalize(tf)
        elif self.norm == "l1":
            tf = l1_normalize(tf)
        sparse = self.sparse if self.sparse != "auto" else self.cluster_centers_.shape[0] > 4096
        return sp.csr_matrix(tf, dtype=np.float32) if sparse else np.asarray(tf.toarray(), dtype=np.float32)
