"""IVFADC: inverted file over a coarse quantiser + product quantisation of the residuals (Jegou et al. 2012, section VI-C;
Jegou et al. PAMI 2011, the "[24]" of Jegou et al. 2012).

A vector ``y`` is assigned to its nearest coarse centroid ``c_l`` (one of ``nlist``), and its residual
``y - c_l`` is encoded by a product quantiser (eq. 22). The ``nlist`` inverted lists are stored contiguously:
``codes_`` (ntotal, M) with the codes of list ``l`` in rows ``offsets_[l]:offsets_[l + 1]``, ``ids_`` (ntotal,)
int64 beside them. A query visits its ``nprobe`` nearest lists and ranks their codes by the ADC distance
``||x - c_l - q(y - c_l)||^2`` (eq. 21 and 23 applied to the residual ``x - c_l``).

Distance decomposition (faiss's "precomputed tables"): ``||x - c - r||^2 = ||x - c||^2 + (||r||^2 + 2 <c, r>)
- 2 <x, r>``; the middle term depends on the list and the code only and is tabulated at training time
(nlist, M, ksub), the last one once per query (M, ksub), so that a list's table costs ``M * ksub`` additions
instead of ``d * ksub`` multiply-adds. Used when the table fits in ``precompute_max_bytes``.

Optional re-ranking of the ``R`` best ADC candidates: exactly with stored vectors (float16 or float32,
memory-mapped when the index is opened from disk) or with a second product quantiser of the residual error
(``refine_M``), as in Jegou et al. ICASSP 2011.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from retrieval.codes.pq import ProductQuantizer
from retrieval.core.checks import check_array, check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.compiled import numba_loaded
from retrieval.core.nearest import nearest_centers, sq_norms
from retrieval.search import _ivfadc_numpy
from retrieval.search.index_io import load_ivfadc_parts, save_ivfadc
from retrieval.search.ivf_lists import InvertedLists

logger = logging.getLogger(__name__)

__all__ = ["IVFADC"]

_QUERY_BLOCK = 256


class IVFADC(InvertedLists):
    """Inverted file with asymmetric distance computation, ``IVF nlist, M x nbits`` (Jegou et al. 2012, sec. VI-C).

    Parameters
    ----------
    nlist : int
        Number of coarse centroids (inverted lists); the paper uses 8192.
    M : int
        Sub-quantisers of the residual PQ (``d`` a multiple of ``M``).
    nbits : int
        Bits per sub-code, 1 to 16.
    nprobe : int
        Lists visited per query by default (the paper: 64 of 8192).
    store_vectors : {None, "float16", "float32"}
        Keep the raw vectors (in list order) for exact re-ranking.
    refine_M : int
        When > 0, a second product quantiser with ``refine_M`` sub-quantisers of ``refine_nbits`` bits encodes the
        residual error ``y - c_l - q(y - c_l)`` for re-ranking.
    refine_nbits : int
    precompute_table : {"auto", True, False}
        Use the distance-decomposition tables (nlist, M, ksub) float32; "auto" when they take at most
        ``precompute_max_bytes``.
    precompute_max_bytes : int
    n_iter : int
        k-means iterations (coarse and PQ).
    max_points_per_centroid : int
        k-means training sub-sampling (faiss: 256).
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    d_ : int
    centroids_ : ndarray of shape (nlist, d), dtype float32
        Coarse quantiser.
    pq_ : ProductQuantizer
        Residual quantiser (``codebooks_`` (M, ksub, dsub)).
    refine_pq_ : ProductQuantizer or None
    codes_ : ndarray of shape (ntotal_stored, M), dtype uint8 or uint16
        Inverted lists, contiguous, list after list.
    ids_ : ndarray of shape (ntotal_stored,), dtype int64
        Id of each stored row; -1 marks a removed row (compacted by :meth:`compact`).
    offsets_ : ndarray of shape (nlist + 1,), dtype int64
        Rows of list ``l`` are ``offsets_[l]:offsets_[l + 1]``.
    vectors_ : ndarray of shape (ntotal_stored, d), float16/float32, or None
    refine_codes_ : ndarray of shape (ntotal_stored, refine_M), or None
    """

    def __init__(self, nlist: int = 1024, M: int = 8, nbits: int = 8, nprobe: int = 1, *, store_vectors=None,
                 refine_M: int = 0, refine_nbits: int = 8, precompute_table="auto",
                 precompute_max_bytes: int = 256 << 20, n_iter: int = 25, max_points_per_centroid: int = 256,
                 random_state=None):
        self.nlist = nlist
        self.M = M
        self.nbits = nbits
        self.nprobe = nprobe
        self.store_vectors = store_vectors
        self.refine_M = refine_M
        self.refine_nbits = refine_nbits
        self.precompute_table = precompute_table
        self.precompute_max_bytes = precompute_max_bytes
        self.n_iter = n_iter
        self.max_points_per_centroid = max_points_per_centroid
        self.random_state = random_state

    # ------------------------------------------------------------------ training
    def _check_params(self):
        name = type(self).__name__
        check_scalar(self.nlist, "nlist", name, low=1)
        check_scalar(self.M, "M", name, low=1)
        check_scalar(self.nbits, "nbits", name, low=1, high=16)
        check_scalar(self.nprobe, "nprobe", name, low=1)
        check_choice(self.store_vectors, "store_vectors", name, (None, "float16", "float32"))
        check_scalar(self.refine_M, "refine_M", name, low=0)
        check_scalar(self.refine_nbits, "refine_nbits", name, low=1, high=16)
        check_choice(self.precompute_table, "precompute_table", name, ("auto", True, False))
        check_scalar(self.precompute_max_bytes, "precompute_max_bytes", name, low=0)

    def fit(self, X, y=None):
        """Train the coarse quantiser (k-means, ``nlist`` centroids) and the PQ of the residuals.

        Parameters
        ----------
        X : array-like of shape (n, d), float
            Training vectors, ``n >= max(nlist, 2**nbits)``.

        Returns
        -------
        self
        """
        self._check_params()
        X = check_array(X, "X", min_rows=1)
        d = X.shape[1]
        if d % self.M:
            raise ValueError(f"The dimension of X ({d}) must be a multiple of M={self.M}.")
        if self.refine_M and d % self.refine_M:
            raise ValueError(f"The dimension of X ({d}) must be a multiple of refine_M={self.refine_M}.")
        if X.shape[0] < self.nlist:
            raise ValueError(f"IVFADC with nlist={self.nlist} needs at least {self.nlist} training vectors; "
                             f"got {X.shape[0]}.")
        from retrieval.core.kmeans import kmeans  # training only (numba)

        rng = check_random_state(self.random_state)
        self.centroids_ = kmeans(X, self.nlist, n_iter=self.n_iter,
                                 max_points_per_centroid=self.max_points_per_centroid, rng=rng)
        labels, _ = nearest_centers(X, self.centroids_)
        R = X - self.centroids_[labels]
        self.pq_ = ProductQuantizer(self.M, self.nbits, n_iter=self.n_iter,
                                    max_points_per_centroid=self.max_points_per_centroid, random_state=rng).fit(R)
        self.refine_pq_ = None
        if self.refine_M:
            E = R - self.pq_.decode(self.pq_.encode(R))
            self.refine_pq_ = ProductQuantizer(self.refine_M, self.refine_nbits, n_iter=self.n_iter,
                                               max_points_per_centroid=self.max_points_per_centroid,
                                               random_state=rng).fit(E)
        self.d_ = int(d)
        self._init_storage()
        self._term2 = None
        self._cnorms = None
        return self.prepare()

    def prepare(self) -> IVFADC:
        """Compute the tables derived from the trained quantisers (squared norms of the coarse centroids, and the
        precomputed term of the distance decomposition when it is used), so that a search only reads the index:
        any number of threads may then search it at once. Called by :meth:`fit` and :meth:`load`."""
        self._cnorms = sq_norms(self.centroids_)
        if self._use_precomputed():
            self._term2 = None
            self._precomputed_term2()
        return self

    def empty_like(self) -> IVFADC:
        """A copy with the same trained quantisers and no vector (a shard's inverted lists are filled from it)."""
        import copy

        out = copy.copy(self)
        out._init_storage()
        return out.prepare()

    # ------------------------------------------------------------------ adding and removing
    def add(self, X, ids=None, *, batch_size: int = 65536) -> np.ndarray:
        """Assign, encode (residual PQ) and append vectors to their inverted lists.

        Parameters
        ----------
        X : array-like of shape (n, d), float
        ids : array-like of shape (n,), int, optional
            Non-negative labels; default: consecutive integers after the largest id given so far.
        batch_size : int
            Vectors encoded per batch (bounds the temporary memory).

        Returns
        -------
        ids : ndarray of shape (n,), dtype int64
            The ids given to the vectors (a new array; the caller's array is not modified).
        """
        check_is_fitted(self, "centroids_")
        X = check_array(X, "X", n_features=self.d_)
        n = X.shape[0]
        if ids is None:
            ids = np.arange(self.next_id_, self.next_id_ + n, dtype=np.int64)
        else:
            ids = np.array(ids, dtype=np.int64).reshape(-1)
            if ids.shape[0] != n:
                raise ValueError(f"ids must have one entry per row of X ({n}); got {ids.shape[0]}.")
            if n and ids.min() < 0:
                raise ValueError(f"ids must be non-negative; got minimum {ids.min()}.")
        check_scalar(batch_size, "batch_size", "IVFADC.add", low=1)
        if n == 0:
            return ids
        labels = np.empty(n, dtype=np.int64)
        codes = np.empty((n, self.M), dtype=self.pq_.code_dtype)
        refine = None if self.refine_pq_ is None else np.empty((n, self.refine_M), self.refine_pq_.code_dtype)
        for a in range(0, n, batch_size):
            xb = X[a:a + batch_size]
            lab, _ = nearest_centers(xb, self.centroids_)
            labels[a:a + batch_size] = lab
            r = xb - self.centroids_[lab]
            c = self.pq_.encode(r)
            codes[a:a + batch_size] = c
            if refine is not None:
                refine[a:a + batch_size] = self.refine_pq_.encode(r - self.pq_.decode(c))
        vectors = None if self.store_vectors is None else X.astype(self.store_vectors)
        self.add_preassigned(labels, codes, ids, vectors=vectors, refine_codes=refine)
        return ids

    # ------------------------------------------------------------------ search
    def _use_precomputed(self) -> bool:
        if self.precompute_table == "auto":
            return self.nlist * self.M * self.pq_.ksub_ * 4 <= self.precompute_max_bytes
        return bool(self.precompute_table)

    def _precomputed_term2(self) -> np.ndarray:
        """(nlist, M, ksub) float32: ||r_{m,j}||^2 + 2 <c_l^m, r_{m,j}> (distance decomposition)."""
        if getattr(self, "_term2", None) is None:
            books = self.pq_.codebooks_
            M, ksub, dsub = books.shape
            cs = self.centroids_.reshape(self.nlist, M, dsub)
            t = np.einsum("lmd,mjd->lmj", cs, books, optimize=True) * 2
            t += (books ** 2).sum(-1)[None]
            self._term2 = np.ascontiguousarray(t, dtype=np.float32)
        return self._term2

    def coarse_search(self, x, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``nprobe`` nearest coarse centroids of each query, nearest first.

        x (nq, d) float32 -> (distances (nq, nprobe) float32, lists (nq, nprobe) int64, -1 padded).
        """
        nq = x.shape[0]
        if getattr(self, "_cnorms", None) is None:
            self._cnorms = sq_norms(self.centroids_)
        dots = x @ self.centroids_.T
        xnorms = (x ** 2).sum(1, dtype=np.float32)
        if nq == 1 and not numba_loaded():
            v = (self._cnorms.astype(np.float64) - 2.0 * dots[0].astype(np.float64)).astype(np.float32)
            d, lists = _ivfadc_numpy.coarse_topk_one(v, xnorms[0], nprobe)
            return d[None], lists[None]
        from retrieval.search._ivfadc_kernels import coarse_topk

        dist = np.empty((nq, nprobe), dtype=np.float32)
        lists = np.empty((nq, nprobe), dtype=np.int64)
        coarse_topk(dots, self._cnorms, xnorms, dist, lists)
        return dist, lists

    def search(self, x, k: int = 10, *, nprobe: int | None = None, rerank: int = 0, threads: int = 1
               ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate k nearest neighbours by IVFADC (eq. 21/23 on residuals), optionally re-ranked.

        Parameters
        ----------
        x : array-like of shape (nq, d), float
        k : int
        nprobe : int, optional
            Lists visited (default ``self.nprobe``).
        rerank : int
            When > 0, the ``max(rerank, k)`` best ADC candidates are re-ranked with exact distances to the stored
            vectors (``store_vectors``) or, without them, with the refined reconstruction (``refine_M``).
        threads : int
            Threads over queries.

        Returns
        -------
        distances : ndarray of shape (nq, k), dtype float32
            Squared distances (approximate, or exact after re-ranking with stored vectors), ascending, +inf padded.
        ids : ndarray of shape (nq, k), dtype int64
            -1 padded.
        """
        check_is_fitted(self, "centroids_")
        x = check_array(x, "x", n_features=self.d_)
        nprobe = self.nprobe if nprobe is None else nprobe
        check_scalar(k, "k", "IVFADC.search", low=1)
        check_scalar(nprobe, "nprobe", "IVFADC.search", low=1)
        check_scalar(rerank, "rerank", "IVFADC.search", low=0)
        check_scalar(threads, "threads", "IVFADC.search", low=1)
        if rerank and self.vectors_ is None and self.refine_codes_ is None:
            raise ValueError("rerank > 0 needs store_vectors or refine_M > 0 at construction.")
        kk = max(k, rerank) if rerank else k
        nq = x.shape[0]
        D = np.empty((nq, kk), dtype=np.float32)
        P = np.empty((nq, kk), dtype=np.int64)
        pre = self._use_precomputed()
        books = self.pq_.codebooks_
        M, ksub, _ = books.shape
        term2 = self._precomputed_term2() if pre else np.empty((0, M, ksub), dtype=np.float32)
        ids = self.ids_ if self.n_removed_ else np.empty(0, dtype=np.int64)
        if nq == 1 and not numba_loaded():
            self._search_one(x, nprobe, pre, term2, ids, D, P)
        else:
            self._search_compiled(x, nprobe, pre, term2, ids, D, P, threads)
        if rerank:
            D, P = self._rerank(x, D, P, k)
        labels = np.where(P >= 0, self.ids_[np.maximum(P, 0)], -1)
        return D, labels

    def _search_one(self, x, nprobe, pre, term2, ids, D, P) -> None:
        """One query's scan in NumPy (a process that has not loaded numba): the rows and distances of
        :meth:`_search_compiled`, bit for bit (:mod:`retrieval.search._ivfadc_numpy`)."""
        xq = np.ascontiguousarray(x[0], dtype=np.float32)
        cd, lists = self.coarse_search(xq[None], nprobe)
        books = self.pq_.codebooks_
        term3 = None
        if pre:
            term3 = _ivfadc_numpy.tables_one(xq, books, False)
            term3 *= -2
        D[0], P[0] = _ivfadc_numpy.ivf_scan_one(D.shape[1], lists[0], cd[0], term3, term2 if pre else None, xq,
                                                self.centroids_, books, self.codes_, ids, self.offsets_)

    def _search_compiled(self, x, nprobe, pre, term2, ids, D, P, threads) -> None:
        """The compiled scan of the probed lists, query blocks of 256 over ``threads`` threads."""
        from retrieval.search._ivfadc_kernels import ivf_scan

        nq = x.shape[0]
        books = self.pq_.codebooks_
        M, ksub, _ = books.shape
        codes = self.codes_
        offsets = np.ascontiguousarray(self.offsets_)
        for a in range(0, nq, _QUERY_BLOCK):
            xb = np.ascontiguousarray(x[a:a + _QUERY_BLOCK])
            cd, lists = self.coarse_search(xb, nprobe)
            if pre:
                term3 = self.pq_.compute_inner_product_tables(xb)
                term3 *= -2
            else:
                term3 = np.empty((0, M, ksub), dtype=np.float32)
            Db, Pb = D[a:a + _QUERY_BLOCK], P[a:a + _QUERY_BLOCK]
            args = (D.shape[1], lists, cd, term3, term2, xb, self.centroids_, books, codes, ids, offsets, Db, Pb)
            nb = xb.shape[0]
            if threads == 1 or nb < 2:
                ivf_scan(0, nb, *args)
            else:
                bounds = np.linspace(0, nb, min(threads, nb) + 1).astype(np.int64)
                with ThreadPoolExecutor(max_workers=len(bounds) - 1) as pool:
                    futs = [pool.submit(ivf_scan, int(s), int(e), *args)
                            for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
                    for f in futs:
                        f.result()

    def _rerank(self, x, D, P, k):
        """Re-rank candidate rows P (nq, R) by exact (stored vectors) or refined distances; keep k."""
        nq, R = P.shape
        valid = P >= 0
        rows = np.maximum(P, 0)
        if self.vectors_ is not None:
            V = np.asarray(self.vectors_[rows.reshape(-1)], dtype=np.float32).reshape(nq, R, self.d_)
        else:
            flat = rows.reshape(-1)
            lists = np.searchsorted(self.offsets_, flat, side="right") - 1
            V = (self.centroids_[lists] + self.pq_.decode(self.codes_[flat])
                 + self.refine_pq_.decode(self.refine_codes_[flat])).reshape(nq, R, self.d_)
        diff = V - x[:, None, :]
        exact = np.einsum("qrd,qrd->qr", diff, diff).astype(np.float32)
        exact[~valid] = np.inf
        order = np.lexsort((np.where(valid, P, np.iinfo(np.int64).max), exact), axis=1)[:, :k]
        return np.take_along_axis(exact, order, 1), np.where(np.take_along_axis(valid, order, 1),
                                                                 np.take_along_axis(P, order, 1), -1)

    # ------------------------------------------------------------------ persistence (format: index_io.py)
    def save(self, folder) -> None:
        """Write the index to ``folder`` (JSON header + .npy arrays; docs/formats.md). Compacts first."""
        save_ivfadc(self, folder)

    @classmethod
    def load(cls, folder, *, mmap: bool = True) -> IVFADC:
        """Open an index folder; with ``mmap`` the lists and vectors are memory-mapped (not read)."""
        header, arrays, pq, refine_pq = load_ivfadc_parts(folder, mmap=mmap)
        index = cls(**header["params"])
        index.d_ = int(header["d"])
        index.centroids_ = np.array(arrays["centroids"])
        index.pq_ = pq
        index.refine_pq_ = refine_pq
        index.refine_codes_ = arrays.get("refine_codes")
        index.codes_ = arrays["codes"]
        index.ids_ = arrays["ids"]
        index.offsets_ = np.array(arrays["offsets"])
        index.vectors_ = arrays.get("vectors")
        index.n_removed_ = 0
        index.next_id_ = int(header["next_id"])
        index._term2 = None
        index._cnorms = None
        return index.prepare()
