"""Helpers shared by the vocabularies and aggregators: input and parameter checks, sub-sampling, the per-image
encoding loop and the ``fit`` / ``transform`` contract of the aggregators (:class:`Aggregator`,
:class:`DenseAggregator`). The nearest-centre search is :mod:`retrieval.core.nearest`, k-means
:mod:`retrieval.core.kmeans`."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from retrieval.aggregation.normalize import l2_normalize, power_normalize
from retrieval.core.checks import check_array, check_is_fitted, check_scalar
from retrieval.core.persistence import PersistableMixin
from retrieval.core.threads import single_threaded_blas

logger = logging.getLogger(__name__)


def image_name(names, i: int) -> str:
    """How image ``i`` is named in error messages."""
    if names is not None and i < len(names):
        return f"image {i} ({names[i]})"
    return f"image {i}"


def stack_training_descriptors(X, owner: str) -> np.ndarray:
    """Training descriptors given as one (n, d) array or a list of per-image arrays -> one (n, d) float32
    array (finite values checked)."""
    if isinstance(X, np.ndarray) and X.ndim == 2:
        return check_array(X, "X", dtype=np.float32, min_rows=1)
    if isinstance(X, (list, tuple)):
        parts = [np.asarray(a, dtype=np.float32) for a in X if np.asarray(a).size]
        if not parts:
            raise ValueError(f"{owner}.fit: no training descriptors (every image is empty).")
        return check_array(np.concatenate(parts, axis=0), "X", dtype=np.float32, min_rows=1)
    return check_array(X, "X", dtype=np.float32, min_rows=1)


def check_counts(est, owner: str, names, *, optional=()) -> None:
    """Check that each hyper-parameter of ``est`` named in ``names`` is an int >= 1 (those in ``optional`` may
    also be None); the message names ``owner``."""
    for name in names:
        value = getattr(est, name)
        if not (name in optional and value is None):
            check_scalar(value, name, owner, low=1)


def subsample(X: np.ndarray, max_samples: int | None, rng: np.random.Generator) -> np.ndarray:
    """At most ``max_samples`` rows of ``X`` drawn without replacement (order kept)."""
    if max_samples is None or X.shape[0] <= max_samples:
        return X
    idx = np.sort(rng.choice(X.shape[0], size=max_samples, replace=False))
    return X[idx]


def as_image_list(descriptor_sets, owner: str) -> list:
    """The per-image descriptor arrays as a list (a single 2-d array is refused: it is ambiguous)."""
    if isinstance(descriptor_sets, np.ndarray) and descriptor_sets.ndim == 2 and descriptor_sets.dtype != object:
        raise ValueError(
            f"{owner}.transform expects a list of per-image descriptor arrays, got one 2-d array of shape "
            f"{descriptor_sets.shape}; pass [X] for a single image."
        )
    return list(descriptor_sets)


def checked_image(X, i: int, d: int, names) -> np.ndarray | None:
    """Descriptors of image ``i`` as float32 (T, d), or None when it has none; NaN/inf raise ValueError naming
    the image."""
    arr = np.asarray(X)
    if arr.size == 0:
        return None
    return check_array(arr, "descriptors", dtype=np.float32, n_features=d, where=image_name(names, i))


def encode_all(descriptor_sets, encode_one: Callable[[np.ndarray], np.ndarray], dim: int, *, names=None,
               progress=None, owner: str, d: int, batch_size: int = 64, dtype=np.float32):
    """Run ``encode_one`` over every image; returns (V (n, dim), empty (n,) bool).

    Empty images give a zero row and ``empty[i] = True``. ``progress(done, total)`` is called every
    ``batch_size`` images and at the end. BLAS runs single-threaded inside the loop (the per-image matrix
    products are small; multi-threading them is slower), restored afterwards.
    """
    sets = as_image_list(descriptor_sets, owner)
    n = len(sets)
    V = np.zeros((n, dim), dtype=dtype)
    empty = np.zeros(n, dtype=bool)
    with single_threaded_blas():
        for i, X in enumerate(sets):
            arr = checked_image(X, i, d, names)
            if arr is None:
                empty[i] = True
            else:
                V[i] = encode_one(arr)
            if progress is not None and ((i + 1) % batch_size == 0 or i + 1 == n):
                progress(i + 1, n)
    return V, empty


class Vocabulary(PersistableMixin):
    """Base of the k-means and GMM vocabularies: ``_check_X`` turns descriptors into float32 (n, d) once the
    learnt ``_fitted_attr`` (K, d) exists (NotFittedError before ``fit``)."""

    _fitted_attr = "cluster_centers_"

    def _check_X(self, X):
        check_is_fitted(self, self._fitted_attr)
        return check_array(X, "X", dtype=np.float32, n_features=getattr(self, self._fitted_attr).shape[1])


class Aggregator(PersistableMixin):
    """The ``transform`` contract shared by :class:`~retrieval.aggregation.bow.BoW`,
    :class:`~retrieval.aggregation.vlad.VLAD` and :class:`~retrieval.aggregation.fisher.FisherVector`: encode each
    image (:meth:`_encode_images`), then normalise the vectors (:meth:`_finish`)."""

    def _encode_images(self, descriptor_sets, names, progress):  # pragma: no cover - abstract
        raise NotImplementedError

    def _finish(self, V):  # pragma: no cover - abstract
        raise NotImplementedError

    def transform(self, descriptor_sets, *, names=None, progress=None, return_empty=False):
        """Aggregated vectors of a list of images.

        Parameters
        ----------
        descriptor_sets : list of ndarray of shape (T_i, d), real (T_i may be 0)
        names : list of str or None
            Image names for error messages (NaN/inf descriptors raise ValueError naming the image).
        progress : callable(done, total) or None
        return_empty : bool
            Also return the mask of images without descriptors (their vector is all zeros, never NaN).

        Returns
        -------
        V : ndarray of shape (n_images, D), float32 (D = K for BoW, K d for VLAD, K d or 2 K d for Fisher), or
            a CSR matrix for a sparse BoW; rows of unit norm when normalised (zero rows for empty images)
        empty : ndarray of shape (n_images,), bool — only when ``return_empty``
        """
        V, empty = self._encode_images(descriptor_sets, names, progress)
        V = self._finish(V)
        return (V, empty) if return_empty else V


class DenseAggregator(Aggregator):
    """VLAD and Fisher: a vocabulary trained by :meth:`fit`, one dense vector per image by ``_encoder()``, then
    power normalisation (``alpha``, Jegou et al. 2012, eq. 7), ``_block_normalize`` and L2 (``normalize``).

    Subclasses set ``_owner`` (the name in messages) and ``_fitted_attr`` and implement ``_check_params``,
    ``_train_vocabulary(X)``, ``_set_vocabulary(voc)``, ``_encoder()`` and ``dim_``.
    """

    _owner = "DenseAggregator"
    _fitted_attr = "cluster_centers_"

    def fit(self, X, y=None):
        """Learn the vocabulary.

        Parameters
        ----------
        X : ndarray of shape (n, d) or list of per-image arrays (n_i, d), real
        y : ignored

        Returns
        -------
        self
        """
        self._check_params()
        return self._set_vocabulary(self._train_vocabulary(X))

    def _block_normalize(self, V):
        return V

    def _encode_images(self, descriptor_sets, names, progress):
        check_is_fitted(self, self._fitted_attr)
        self._check_params()
        return encode_all(descriptor_sets, self._encoder(), self.dim_, names=names, progress=progress,
                          owner=self._owner, d=self.n_features_in_)

    def _finish(self, V):
        if self.alpha != 1:
            V = power_normalize(V, self.alpha)
        V = self._block_normalize(V)
        if self.normalize == "l2":
            V = l2_normalize(V)
        return V
