"""Product quantisation with asymmetric (ADC) and symmetric (SDC) distance computation (Jegou et al. 2012, section V-A).

A vector ``x`` of dimension ``d`` is split into ``M`` sub-vectors of ``dsub = d / M`` components; each is
quantised by its own k-means codebook of ``ksub = 2**nbits`` centroids (eq. 22), so that the code of ``x`` is
``M`` indices (``B = M * nbits`` bits). The squared distance between a query ``x`` and an encoded database vector
``q(y)`` is the sum of ``M`` sub-distances read from look-up tables computed once per query (eq. 21 and 23, ADC);
SDC quantises the query too and reads centroid-to-centroid tables.

Layouts (faiss vocabulary): ``codebooks_`` (M, ksub, dsub) float32; codes (n, M) uint8 when ``nbits <= 8``,
uint16 otherwise (one sub-code per column, not bit-packed: see docs/differences.md); distance tables
(nq, M, ksub) float32.
"""

from __future__ import annotations

import numpy as np

from retrieval.core.checks import check_array, check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.nearest import nearest_centers
from retrieval.core.persistence import PersistableMixin

__all__ = ["ProductQuantizer"]


class ProductQuantizer(PersistableMixin):
    """Product quantiser ``ADC M x nbits`` (Jegou et al. 2012, eq. 21-23) with an exhaustive ADC/SDC search.

    Parameters
    ----------
    M : int
        Number of sub-quantisers (sub-vectors); ``d`` must be a multiple of ``M``.
    nbits : int
        Bits per sub-code, 1 to 16 (``ksub = 2**nbits`` centroids per sub-space; the paper's "ADC 256x10" uses 10).
    n_iter : int
        Lloyd iterations of each sub-space k-means (faiss: 25).
    max_points_per_centroid : int
        Training vectors sub-sampled to ``ksub * max_points_per_centroid`` (faiss: 256).
    random_state : None, int or numpy.random.Generator
        Seeds the k-means initialisation and sub-sampling.

    Attributes
    ----------
    d_ : int
        Input dimension.
    dsub_ : int
        ``d_ / M``.
    ksub_ : int
        ``2**nbits``.
    codebooks_ : ndarray of shape (M, ksub, dsub), dtype float32
        Sub-space centroids.
    codes_ : ndarray of shape (ntotal, M), dtype uint8 or uint16
        Codes of the vectors added with :meth:`add` (row ``i`` has id ``i``).
    """

    def __init__(self, M: int = 8, nbits: int = 8, *, n_iter: int = 25, max_points_per_centroid: int = 256,
                 random_state=None):
        self.M = M
        self.nbits = nbits
        self.n_iter = n_iter
        self.max_points_per_centroid = max_points_per_centroid
        self.random_state = random_state

    # ------------------------------------------------------------------ training and coding
    def _check_params(self):
        name = type(self).__name__
        check_scalar(self.M, "M", name, low=1)
        check_scalar(self.nbits, "nbits", name, low=1, high=16)
        check_scalar(self.n_iter, "n_iter", name, low=1)
        check_scalar(self.max_points_per_centroid, "max_points_per_centroid", name, low=1)

    @property
    def code_dtype(self):
        """numpy dtype of the codes: uint8 for ``nbits <= 8``, uint16 otherwise."""
        return np.dtype(np.uint8) if self.nbits <= 8 else np.dtype(np.uint16)

    @property
    def code_size(self) -> int:
        """Bytes per code as stored in memory (``M`` or ``2 M``)."""
        return self.M * self.code_dtype.itemsize

    @property
    def ntotal(self) -> int:
        """Number of vectors added with :meth:`add`."""
        codes = getattr(self, "codes_", None)
        return 0 if codes is None else int(codes.shape[0])

    def fit(self, X, y=None):
        """Learn the ``M`` sub-space codebooks by k-means (eq. 22).

        Parameters
        ----------
        X : array-like of shape (n, d), float
            Training vectors, ``n >= 2**nbits`` and ``d`` a multiple of ``M``.

        Returns
        -------
        self
        """
        self._check_params()
        X = check_array(X, "X", min_rows=1)
        n, d = X.shape
        if d % self.M:
            raise ValueError(f"The dimension of X ({d}) must be a multiple of M={self.M}.")
        ksub = 1 << self.nbits
        if n < ksub:
            raise ValueError(f"ProductQuantizer with nbits={self.nbits} needs at least {ksub} training vectors; got {n}.")
        from retrieval.core.kmeans import kmeans  # training only (numba)

        rng = check_random_state(self.random_state)
        dsub = d // self.M
        books = np.empty((self.M, ksub, dsub), dtype=np.float32)
        for m in range(self.M):
            books[m] = kmeans(np.ascontiguousarray(X[:, m * dsub:(m + 1) * dsub]), ksub, n_iter=self.n_iter,
                              max_points_per_centroid=self.max_points_per_centroid, rng=rng)
        self.d_ = int(d)
        self.dsub_ = int(dsub)
        self.ksub_ = int(ksub)
        self.codebooks_ = books
        self.codes_ = np.empty((0, self.M), dtype=self.code_dtype)
        self._sdc = None
        return self

    def _check_X(self, X, name="X"):
        check_is_fitted(self, "codebooks_")
        return check_array(X, name, n_features=self.d_)

    def encode(self, X) -> np.ndarray:
        """Code of each vector: the index of the nearest centroid in every sub-space (eq. 22).

        Parameters
        ----------
        X : array-like of shape (n, d), float

        Returns
        -------
        codes : ndarray of shape (n, M), dtype uint8 (nbits <= 8) or uint16
        """
        X = self._check_X(X)
        codes = np.empty((X.shape[0], self.M), dtype=self.code_dtype)
        s = self.dsub_
        for m in range(self.M):
            codes[:, m], _ = nearest_centers(np.ascontiguousarray(X[:, m * s:(m + 1) * s]), self.codebooks_[m])
        return codes

    def forget_tables(self) -> None:
        """Drop the tables derived from the codebooks (the symmetric-distance table): call after changing
        ``codebooks_``."""
        self._sdc = None

    def check_codes(self, codes, name="codes"):
        check_is_fitted(self, "codebooks_")
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.M or codes.dtype.kind not in "ui":
            raise ValueError(f"{name} must be an integer array of shape (n, {self.M}); got {codes.dtype} {codes.shape}.")
        if codes.size and (codes.min() < 0 or codes.max() >= self.ksub_):
            raise ValueError(f"{name} values must be in [0, {self.ksub_}); got range [{codes.min()}, {codes.max()}].")
        return codes

    def decode(self, codes) -> np.ndarray:
        """Reconstruction ``q(y)``: the concatenation of the selected sub-centroids.

        Parameters
        ----------
        codes : ndarray of shape (n, M), dtype uint8 or uint16

        Returns
        -------
        X : ndarray of shape (n, d), dtype float32
        """
        codes = self.check_codes(codes)
        out = self.codebooks_[np.arange(self.M)[None, :], codes.astype(np.intp)]  # (n, M, dsub)
        return out.reshape(codes.shape[0], self.d_).astype(np.float32, copy=False)

    def compute_distance_tables(self, x) -> np.ndarray:
        """ADC look-up tables: ``T[q, m, j] = ||x_q^m - c_{m,j}||^2`` (Jegou et al. 2012, eq. 23).

        Parameters
        ----------
        x : array-like of shape (nq, d), float

        Returns
        -------
        tables : ndarray of shape (nq, M, ksub), dtype float32
        """
        x = self._check_X(x, "x")
        return _l2_tables(x, self.codebooks_)

    def compute_inner_product_tables(self, x) -> np.ndarray:
        """Tables of ``<x_q^m, c_{m,j}>`` (for similarity search), shape (nq, M, ksub), float32."""
        x = self._check_X(x, "x")
        from retrieval.codes._pq_kernels import tables_kernel

        out = np.empty((x.shape[0], self.M, self.ksub_), dtype=np.float32)
        tables_kernel(np.ascontiguousarray(x), self.codebooks_, out, False)
        return out

    @property
    def sdc_table_(self) -> np.ndarray:
        """Centroid-to-centroid squared distances, shape (M, ksub, ksub), float32 (SDC; nbits <= 12)."""
        check_is_fitted(self, "codebooks_")
        if getattr(self, "_sdc", None) is None:
            if self.nbits > 12:
                raise ValueError(f"SDC tables need nbits <= 12 (ksub^2 entries per sub-space); nbits={self.nbits}.")
            b = self.codebooks_.astype(np.float64)
            nrm = (b ** 2).sum(-1)
            t = nrm[:, :, None] + nrm[:, None, :] - 2 * np.einsum("mid,mjd->mij", b, b)
            self._sdc = np.maximum(t, 0).astype(np.float32)
        return self._sdc

    # ------------------------------------------------------------------ exhaustive search
    def add(self, X) -> None:
        """Encode and append vectors; the ``i``-th vector ever added gets id ``i``.

        Parameters
        ----------
        X : array-like of shape (n, d), float
        """
        codes = self.encode(X)
        self.add_codes(codes)

    def add_codes(self, codes) -> None:
        """Append already computed codes (n, M) (uint8 / uint16 as :attr:`code_dtype`)."""
        codes = self.check_codes(codes).astype(self.code_dtype, copy=False)
        self.codes_ = np.concatenate([self.codes_, codes]) if self.ntotal else np.ascontiguousarray(codes)

    def reset(self) -> None:
        """Remove every added code (keeps the codebooks)."""
        check_is_fitted(self, "codebooks_")
        self.codes_ = np.empty((0, self.M), dtype=self.code_dtype)

    def search(self, x, k: int = 10, *, method: str = "adc", threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Exhaustive search of the added codes (eq. 21).

        Parameters
        ----------
        x : array-like of shape (nq, d), float
        k : int
        method : {"adc", "sdc"}
            ADC reads ``||x^m - c_{m,j}||^2`` (query not quantised); SDC quantises the query too.
        threads : int
            Threads over queries.

        Returns
        -------
        distances : ndarray of shape (nq, k), dtype float32
            Squared distances, ascending, padded with +inf.
        ids : ndarray of shape (nq, k), dtype int64
            Padded with -1.
        """
        check_choice(method, "method", type(self).__name__, ("adc", "sdc"))
        check_scalar(k, "k", type(self).__name__ + ".search", low=1)
        if method == "adc":
            tables = self.compute_distance_tables(x)
        else:
            qc = self.encode(x).astype(np.intp)
            sdc = self.sdc_table_
            tables = sdc[np.arange(self.M)[None, :], qc]  # (nq, M, ksub)
        from retrieval.codes.scan import lut_scan_topk

        return lut_scan_topk(tables, self.codes_, k, threads=threads)

    def _set_extra_state(self, attributes, arrays):
        self._sdc = None


def _l2_tables(x: np.ndarray, codebooks: np.ndarray) -> np.ndarray:
    """``||x^m - c_{m,j}||^2`` by explicit differences (exact; no norm-expansion cancellation).

    x (nq, d) float32, codebooks (M, ksub, dsub) float32 -> (nq, M, ksub) float32.
    """
    from retrieval.codes._pq_kernels import tables_kernel

    M, ksub, dsub = codebooks.shape
    out = np.empty((x.shape[0], M, ksub), dtype=np.float32)
    tables_kernel(np.ascontiguousarray(x), np.ascontiguousarray(codebooks), out, True)
    return out
