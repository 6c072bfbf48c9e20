"""Bag-of-words inverted file scored with l1/l2 (Zhu et al. 2013, eq. 1) and the asymmetric delta_1/delta_2 (eq. 8-11).

Layout (Zhu et al. 2013, section 3.3): postings in CSR order, word ``l`` owns ``postings_ids[indptr[l]:indptr[l+1]]``
(uint32 internal image numbers) and ``postings_tf[...]`` (float32 term frequencies: counts for hard assignment,
summed weights for soft assignment) -- 8 bytes per posting. idf is applied on the fly, so that an add or a
delete only changes ``idf_`` and the per-image norms ``||T_j||_1`` and ``||T_j||_2`` of the idf-weighted
histograms, which are recomputed in one pass when the index changes ("pre-computed during the offline indexing
stage").

Scoring visits only the postings of the query's words and accumulates, per image, the shared-component terms:

- l1 (eq. 1, p = 1): ``||Qh - Th_j||_1 = |Qh|_1 + |Th_j|_1 - 2 sum_l min(Qh_l, Th_jl)`` with ``Xh = X / ||X||_1``;
- l2 (eq. 1, p = 2): ``||Qh - Th_j||_2 = sqrt(|Qh|^2 + |Th_j|^2 - 2 Qh . Th_j)`` with ``Xh = X / ||X||_2``;
- delta1 (eq. 8): ``||T_j||_1 - wbar ||min(Q, T_j)||_1`` with ``wbar`` from ``alpha_1`` by eq. 9;
- delta2 (eq. 10): ``w sqrt(|Q|^2 - 2 Q.m_j + |m_j|^2) + sqrt(|T_j|^2 - 2 T_j.m_j + |m_j|^2)``, ``m_j = min(Q, T_j)``,
  ``w`` from ``alpha_2`` by eq. 11;

images sharing no word with the query get the closed form of the same expression with zero shared terms, so the
scores of ALL images equal the dense formulas of :mod:`retrieval.search.dissimilarities`.
"""

from __future__ import annotations

import logging
import numbers
import threading
from pathlib import Path

import numpy as np

from retrieval._version import __version__
from retrieval.core.checks import check_choice, check_scalar, is_sparse
from retrieval.core.persistence import FormatError, read_folder_header, save_npy_atomic, write_json_atomic
from retrieval.search.dissimilarities import idf_weights
from retrieval.search.postings import (
    filter_postings,
    histogram_rows,
    image_norms,
    live_counts,
    merge_postings,
)
from retrieval.search.postings_scoring import acc_delta2, acc_dot, acc_min, acc_min_normalized, topk_smallest

logger = logging.getLogger(__name__)

__all__ = ["InvertedFile", "histogram_rows", "METHODS", "topk_smallest"]

METHODS = ("l1", "l2", "delta1", "delta2")
FORMAT = "retrieval-invfile"
FORMAT_VERSION = 1
"""The version of a folder holding its postings; version 2 (:data:`FORWARD_VERSION`) holds none (:meth:`save` with
``postings=False``): the owner gives them back from its forward index (:meth:`postings_from`)."""
FORWARD_VERSION = 2
_POSTINGS = ("indptr_", "postings_ids_", "postings_tf_")


# ----------------------------------------------------------------------------------------------------------------


class InvertedFile:
    """Inverted file over BoW histograms, scored through the postings only (Zhu et al. 2013, section 3.3).

    Parameters
    ----------
    n_words : int
        Vocabulary size k.
    idf : bool
        Weight histograms (query and database) by ``idf_l = log(N / n_l)`` computed on the indexed images
        (Zhu et al. 2013, section 2.2). Recomputed, with the norms, whenever images are added or removed.

    Attributes
    ----------
    indptr_ : ndarray of shape (n_words + 1,), dtype int64
    postings_ids_ : ndarray of shape (P,), dtype uint32 -- internal image numbers
    postings_tf_ : ndarray of shape (P,), dtype float32 -- term frequencies
    ids_ : ndarray of shape (ntotal,), dtype int64 -- external id of each internal image number
    idf_ : ndarray of shape (n_words,), dtype float64
    norm1_, norm2_ : ndarray of shape (ntotal,), dtype float64 -- ||T_j||_1 and ||T_j||_2 (idf-weighted)
    """

    def __init__(self, n_words: int, *, idf: bool = True):
        self.n_words = n_words
        self.idf = idf
        check_scalar(n_words, "n_words", "InvertedFile", low=1)
        if not isinstance(idf, bool):
            raise ValueError(f"The 'idf' parameter of InvertedFile must be a bool. Got {idf!r} instead.")
        self.indptr_ = np.zeros(n_words + 1, dtype=np.int64)
        self.postings_ids_ = np.zeros(0, dtype=np.uint32)
        self.postings_tf_ = np.zeros(0, dtype=np.float32)
        self.ids_ = np.zeros(0, dtype=np.int64)
        self.idf_ = np.zeros(n_words, dtype=np.float64) if idf else np.ones(n_words, dtype=np.float64)
        self.norm1_ = np.zeros(0, dtype=np.float64)
        self.norm2_ = np.zeros(0, dtype=np.float64)
        self._pending = []  # (words int64, internal ids int64, tf float64)
        self._pending_ids = []
        self._id_set = set()
        self._dirty = False
        self._sum_norm1 = 0.0
        self._norm2sq = np.zeros(0, dtype=np.float64)

    def postings_from(self, build) -> InvertedFile:
        """Postings not held: ``build()`` returns ``(indptr, postings_ids, postings_tf)``, called once, when a
        method first needs them (under a lock, so that concurrent searches build them once and see them whole).
        For a folder saved without postings (:meth:`save` with ``postings=False``), whose owner keeps the same
        histograms in its forward index."""
        for name in _POSTINGS:
            self.__dict__.pop(name, None)
        self._build, self._build_lock = build, threading.Lock()
        return self

    def __getattr__(self, name):
        if name not in _POSTINGS or "_build" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with self._build_lock:
            if name not in self.__dict__:
                indptr, pids, ptf = self._build()
                self.__dict__.update(postings_tf_=ptf, postings_ids_=pids, indptr_=indptr)
        return self.__dict__[name]

    @property
    def holds_postings(self) -> bool:
        """False while postings left to :meth:`postings_from` are not built."""
        return all(name in self.__dict__ for name in _POSTINGS)

    # ------------------------------------------------------------------ construction
    @property
    def ntotal(self) -> int:
        """Number of indexed images (pending additions included)."""
        return int(self.ids_.shape[0]) + sum(len(x) for x in self._pending_ids)

    @property
    def n_postings(self) -> int:
        self._commit()
        return int(self.postings_ids_.shape[0])

    @property
    def bytes_per_posting(self) -> int:
        """Bytes per posting of the CSR arrays (ids + tf): 8."""
        return self.postings_ids_.dtype.itemsize + self.postings_tf_.dtype.itemsize

    def add(self, ids, X) -> InvertedFile:
        """Index images.

        Parameters
        ----------
        ids : array-like of shape (n,), integer -- external ids, unique and not already indexed
        X : scipy.sparse (n, n_words) or list of n word arrays / (words, weights) pairs (see :func:`histogram_rows`)
        """
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ValueError(f"ids must be a 1-d integer array; got shape {ids.shape} and dtype {ids.dtype}.")
        ids = ids.astype(np.int64)
        rows = histogram_rows(X, self.n_words, "X")
        if len(rows) != ids.shape[0]:
            raise ValueError(f"ids has {ids.shape[0]} entries but X holds {len(rows)} images.")
        if len(set(ids.tolist())) != ids.shape[0]:
            raise ValueError("ids contains duplicates; each image needs its own id.")
        clash = self._id_set.intersection(ids.tolist())
        if clash:
            raise ValueError(f"ids already indexed: {sorted(clash)[:10]}; remove them first.")
        start = self.ntotal
        if start + len(rows) >= 2**32:
            raise ValueError("InvertedFile holds at most 2**32 - 1 images (uint32 postings).")
        internal = np.concatenate([np.full(r[0].shape[0], start + i, dtype=np.int64) for i, r in enumerate(rows)]
                                  ) if rows else np.zeros(0, np.int64)
        words = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int64)
        tf = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0)
        self._pending.append((words, internal, tf))
        self._pending_ids.append(ids)
        self._id_set.update(ids.tolist())
        self._dirty = True
        return self

    def commit(self) -> None:
        """Merge the images added since the last commit into the postings and refresh the weights (idf, norms).
        Searches commit first when needed; a writer commits once after adding, so that searches only read."""
        self._commit()

    def _commit(self) -> None:
        if self._pending:
            words = np.concatenate([p[0] for p in self._pending])
            internal = np.concatenate([p[1] for p in self._pending])
            tf = np.concatenate([p[2] for p in self._pending])
            order = np.argsort(words, kind="stable")
            counts = np.bincount(words, minlength=self.n_words)
            add_indptr = np.zeros(self.n_words + 1, dtype=np.int64)
            np.cumsum(counts, out=add_indptr[1:])
            P = self.postings_ids_.shape[0] + words.shape[0]
            out_indptr = np.empty(self.n_words + 1, dtype=np.int64)
            out_ids = np.empty(P, dtype=np.uint32)
            out_tf = np.empty(P, dtype=np.float32)
            merge_postings(np.asarray(self.indptr_), np.asarray(self.postings_ids_), np.asarray(self.postings_tf_),
                   add_indptr, internal[order].astype(np.uint32), tf[order].astype(np.float32),
                   out_indptr, out_ids, out_tf)
            self.indptr_, self.postings_ids_, self.postings_tf_ = out_indptr, out_ids, out_tf
            self.ids_ = np.concatenate([np.asarray(self.ids_)] + self._pending_ids)
            self._pending, self._pending_ids = [], []
        if self._dirty:
            self._refresh_weights()
            self._dirty = False

    def _refresh_weights(self) -> None:
        if self.idf:
            self.idf_ = idf_weights(np.diff(self.indptr_), self.ids_.shape[0])
        w = self._norms_under(self.idf_)
        self.norm1_, self.norm2_ = w["norm1"], w["norm2"]
        self._norm2sq = w["norm2sq"]   # as a loaded file has it (norm2 is saved): the same scores either way
        self._sum_norm1 = w["sum_norm1"]

    @classmethod
    def from_csr(cls, indptr, postings_ids, postings_tf, ids, *, idf: bool = True) -> InvertedFile:
        """Build directly from CSR postings (e.g. a benchmark generator); arrays are used as given (no copy).

        indptr (n_words + 1,) int64, postings_ids (P,) uint32 internal numbers < len(ids), postings_tf (P,)
        float32 > 0, ids (n,) int64 unique.
        """
        indptr = np.asarray(indptr, dtype=np.int64)
        inv = cls(int(indptr.shape[0] - 1), idf=idf)
        postings_ids = np.asarray(postings_ids)
        if postings_ids.dtype != np.uint32 or np.asarray(postings_tf).dtype != np.float32:
            raise ValueError("postings_ids must be uint32 and postings_tf float32.")
        if indptr[0] != 0 or indptr[-1] != postings_ids.shape[0] or (np.diff(indptr) < 0).any():
            raise ValueError("indptr must start at 0, be non-decreasing and end at the number of postings.")
        inv.indptr_, inv.postings_ids_, inv.postings_tf_ = indptr, postings_ids, np.asarray(postings_tf)
        inv.ids_ = np.asarray(ids, dtype=np.int64)
        inv._id_set = set(inv.ids_.tolist())
        if len(inv._id_set) != inv.ids_.shape[0]:
            raise ValueError("ids contains duplicates.")
        inv._dirty = True
        inv._commit()
        return inv

    def remove(self, ids) -> int:
        """Remove images by external id (unknown ids are ignored); returns the number removed. One pass, O(P)."""
        self._commit()
        ids = np.asarray(ids, dtype=np.int64).ravel()
        dead = np.isin(self.ids_, ids)
        n_dead = int(dead.sum())
        if n_dead == 0:
            return 0
        remap = np.where(dead, -1, np.cumsum(~dead) - 1).astype(np.int64)
        out_indptr = np.empty(self.n_words + 1, dtype=np.int64)
        out_ids = np.empty(self.postings_ids_.shape[0], dtype=np.uint32)
        out_tf = np.empty(self.postings_ids_.shape[0], dtype=np.float32)
        P = filter_postings(np.asarray(self.indptr_), np.asarray(self.postings_ids_), np.asarray(self.postings_tf_), remap,
                    out_indptr, out_ids, out_tf)
        self.indptr_, self.postings_ids_, self.postings_tf_ = out_indptr, out_ids[:P].copy(), out_tf[:P].copy()
        self._id_set.difference_update(self.ids_[dead].tolist())
        self.ids_ = np.asarray(self.ids_)[~dead]
        self._dirty = True
        self._commit()
        return n_dead

    # ------------------------------------------------------------------ scoring
    def query_weights(self, q) -> tuple[np.ndarray, np.ndarray]:
        """The idf-weighted query histogram Q: (words int64 (u,), values float64 (u,)) from one query item."""
        self._commit()
        words, tf = histogram_rows(q if is_sparse(q) else [q], self.n_words, "query")[0]
        return words, tf * self.idf_[words]

    def scores(self, q, *, method: str = "delta1", alpha: float = 0.5) -> tuple[np.ndarray, float]:
        """Dissimilarity of one query to EVERY indexed image (smaller is better), through the postings only.

        Parameters
        ----------
        q : one query: int array of words (m,), a (words, weights) pair, or a sparse row (1, n_words)
        method : {"l1", "l2", "delta1", "delta2"}
        alpha : float > 0 -- alpha_1 (eq. 9) for delta1, alpha_2 (eq. 11) for delta2; unused by l1/l2

        Returns
        -------
        scores : ndarray of shape (ntotal,), dtype float64, in internal order (``ids_``)
        weight : float -- wbar (eq. 9) for delta1, w (eq. 11) for delta2, nan for l1/l2
        """
        check_choice(method, "method", "InvertedFile.scores", METHODS)
        check_scalar(alpha, "alpha", "InvertedFile.scores", kind=numbers.Real, low=0, closed="neither")
        qw, qv = self.query_weights(q)
        return self._scores(qw, qv, method, float(alpha))

    def scores_of_weights(self, qw, qv, method: str, alpha: float):
        """:meth:`scores` of a query already weighted: ``qw`` its sorted words, ``qv`` their idf-weighted values.
        ``qv`` must be computed with the committed ``idf_`` (call :meth:`commit` first)."""
        self._commit()
        return self._scores(qw, qv, method, float(alpha))

    def terms(self, qw, qv, method: str, weights: dict | None = None) -> dict:
        """The per-image terms of :meth:`scores_of_weights` before the collection-wide weight, for scoring several
        inverted files as one collection: l1 / l2 ``{"scores"}`` (no collection term); delta1 ``{"acc", "norm1"}``
        (eq. 9: ``norm1 - wbar acc`` with ``wbar = alpha sum(norm1) / sum(acc)``); delta2 ``{"qterm", "tterm"}``
        (eq. 11: ``w qterm + tterm`` with ``w = alpha sum(tterm) / sum(qterm)``). Sums over the images of every
        file give the weights of the whole collection. ``weights``: :meth:`weights_under` the idf of a collection
        this file is part of (None: its own)."""
        self._commit()
        w = self._own_weights() if weights is None else weights
        n = self.ids_.shape[0]
        indptr, pids, ptf = np.asarray(self.indptr_), np.asarray(self.postings_ids_), np.asarray(self.postings_tf_)
        if method in ("l1", "l2"):
            return {"scores": self._scores(qw, qv, method, 1.0, w)[0]}
        if method == "delta1":
            acc = np.zeros(n, dtype=np.float64)
            acc_min(indptr, pids, ptf, qw, qv, w["idf"], acc)
            return {"acc": acc, "norm1": np.asarray(w["norm1"], np.float64)}
        acc3 = np.zeros((n, 3), dtype=np.float64)
        acc_delta2(indptr, pids, ptf, qw, qv, w["idf"], acc3)
        qq = float((qv * qv).sum())
        return {"qterm": np.sqrt(np.maximum(qq - 2.0 * acc3[:, 1] + acc3[:, 2], 0.0)),
                "tterm": np.sqrt(np.maximum(w["norm2sq"] - 2.0 * acc3[:, 0] + acc3[:, 2], 0.0))}

    def _own_weights(self) -> dict:
        return {"idf": self.idf_, "norm1": self.norm1_, "norm2": self.norm2_, "norm2sq": self._norm2sq,
                "sum_norm1": self._sum_norm1}

    def document_frequencies(self, live=None) -> np.ndarray:
        """How many images hold each word (int64 (K,)); ``live`` (bool (N,), internal order): only those rows."""
        self._commit()
        if live is None:
            return np.diff(np.asarray(self.indptr_)).astype(np.int64)
        out = np.empty(self.n_words, np.int64)
        live_counts(np.asarray(self.indptr_), np.asarray(self.postings_ids_), np.asarray(live, np.bool_), out)
        return out

    def weights_under(self, idf) -> dict:
        """This file's per-image norms under the weights ``idf`` of a collection it is part of (the idf of all its
        images): what :meth:`terms` takes as ``weights``."""
        self._commit()
        return self._norms_under(idf)

    def _norms_under(self, idf) -> dict:
        idf = np.asarray(idf, np.float64)
        n = self.ids_.shape[0]
        n1 = np.empty(n, dtype=np.float64)
        n2 = np.empty(n, dtype=np.float64)
        image_norms(np.asarray(self.indptr_), np.asarray(self.postings_ids_), np.asarray(self.postings_tf_),
                    idf, n, n1, n2)
        norm2 = np.sqrt(n2)
        return {"idf": idf, "norm1": n1, "norm2": norm2, "norm2sq": norm2 ** 2, "sum_norm1": float(n1.sum())}

    def _scores(self, qw, qv, method, alpha, w=None):
        w = self._own_weights() if w is None else w
        n = self.ids_.shape[0]
        idf, norm1 = w["idf"], w["norm1"]
        indptr, pids, ptf = np.asarray(self.indptr_), np.asarray(self.postings_ids_), np.asarray(self.postings_tf_)
        if method == "delta1":
            acc = np.zeros(n, dtype=np.float64)
            total = acc_min(indptr, pids, ptf, qw, qv, idf, acc)
            wbar = alpha * w["sum_norm1"] / total if total > 0 else 0.0
            return norm1 - wbar * acc, wbar
        if method == "l1":
            acc = np.zeros(n, dtype=np.float64)
            qn = qv.sum()
            qh = qv / qn if qn > 0 else qv
            inv = np.divide(1.0, norm1, out=np.zeros(n), where=norm1 > 0)
            acc_min_normalized(indptr, pids, ptf, qw, qh, idf, inv, acc)
            return (1.0 if qn > 0 else 0.0) + (norm1 > 0) - 2.0 * acc, float("nan")
        if method == "l2":
            acc = np.zeros(n, dtype=np.float64)
            acc_dot(indptr, pids, ptf, qw, qv, idf, acc)
            qn = float(np.sqrt((qv * qv).sum()))
            tn = w["norm2"]
            denom = np.where(tn > 0, tn, 1.0) * (qn if qn > 0 else 1.0)
            sq = (1.0 if qn > 0 else 0.0) + (tn > 0) - 2.0 * acc / denom
            return np.sqrt(np.maximum(sq, 0.0)), float("nan")
        acc3 = np.zeros((n, 3), dtype=np.float64)
        acc_delta2(indptr, pids, ptf, qw, qv, idf, acc3)
        qq = float((qv * qv).sum())
        qterm = np.sqrt(np.maximum(qq - 2.0 * acc3[:, 1] + acc3[:, 2], 0.0))
        tterm = np.sqrt(np.maximum(w["norm2sq"] - 2.0 * acc3[:, 0] + acc3[:, 2], 0.0))
        den = qterm.sum()
        w = alpha * tterm.sum() / den if den > 0 else 0.0
        return w * qterm + tterm, w

    def search(self, Q, k: int = 10, *, method: str = "delta1", alpha: float = 0.5):
        """k most similar images (smallest dissimilarity) for each query.

        Parameters
        ----------
        Q : scipy.sparse (nq, n_words), or a list of nq queries (word arrays or (words, weights) pairs),
            or one int array of words (nq = 1)
        k : int >= 1
        method, alpha : see :meth:`scores`

        Returns
        -------
        distances : ndarray of shape (nq, k), dtype float64, best first, padded with +inf
        ids : ndarray of shape (nq, k), dtype int64, external ids, padded with -1
        """
        check_scalar(k, "k", "InvertedFile.search", low=1)
        check_choice(method, "method", "InvertedFile.search", METHODS)
        check_scalar(alpha, "alpha", "InvertedFile.search", kind=numbers.Real, low=0, closed="neither")
        self._commit()
        rows = histogram_rows(Q, self.n_words, "Q")
        D = np.full((len(rows), k), np.inf)
        ids = np.full((len(rows), k), -1, dtype=np.int64)
        for i, (w, tf) in enumerate(rows):
            s, _ = self._scores(w, tf * self.idf_[w], method, float(alpha))
            top = topk_smallest(s, k)
            D[i, : top.shape[0]] = s[top]
            ids[i, : top.shape[0]] = self.ids_[top]
        return D, ids

    # ------------------------------------------------------------------ histograms back from the index
    def internal_index(self, ids) -> np.ndarray:
        """Internal numbers of external ids (-1 when absent), shape (n,) int64."""
        self._commit()
        lookup = {int(v): i for i, v in enumerate(np.asarray(self.ids_).tolist())}
        return np.array([lookup.get(int(v), -1) for v in np.asarray(ids).ravel()], dtype=np.int64)

    # ------------------------------------------------------------------ persistence
    def save(self, folder, *, postings: bool = True) -> Path:
        """Write ``header.json`` + ``indptr.npy``, ``postings_ids.npy``, ``postings_tf.npy``, ``ids.npy``,
        ``norm1.npy``, ``norm2.npy``, ``idf.npy`` into ``folder`` (each atomically; memory-mappable).
        ``postings=False``: no ``indptr``, ``postings_ids``, ``postings_tf`` (format version 2): the owner keeps the
        same histograms elsewhere and gives them back when loaded (:meth:`postings_from`)."""
        self._commit()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = [("ids", self.ids_), ("norm1", self.norm1_), ("norm2", self.norm2_), ("idf", self.idf_)]
        if postings:
            arrays = [("indptr", self.indptr_), ("postings_ids", self.postings_ids_),
                      ("postings_tf", self.postings_tf_)] + arrays
        for name, arr in arrays:
            save_npy_atomic(folder / f"{name}.npy", np.asarray(arr))
        header = {"format": FORMAT, "format_version": FORMAT_VERSION if postings else FORWARD_VERSION,
                  "class": "retrieval.search.invfile.InvertedFile", "library_version": __version__,
                  "params": {"n_words": self.n_words, "idf": self.idf}, "ntotal": int(self.ids_.shape[0])}
        if postings:
            header["n_postings"] = int(self.postings_ids_.shape[0])
        write_json_atomic(folder / "header.json", header)
        return folder

    @classmethod
    def load(cls, folder, *, mmap: bool = True, postings=None) -> InvertedFile:
        """Open a folder written by :meth:`save`; the postings are memory-mapped read-only when ``mmap``. A folder
        saved without them needs ``postings``, the callable given to :meth:`postings_from`."""
        folder = Path(folder)
        try:
            header = read_folder_header(folder, FORMAT, FORMAT_VERSION, "inverted file")
        except FormatError:
            header = read_folder_header(folder, FORMAT, FORWARD_VERSION, "inverted file")
        held = header["format_version"] == FORMAT_VERSION
        if not held and postings is None:
            raise FormatError(f"{folder}: an inverted file saved without its postings; open it through its owner "
                              "(an object searcher).")
        inv = cls(**header["params"])
        mode = "r" if mmap else None
        names = ("ids", "norm1", "norm2", "idf") + (("indptr", "postings_ids", "postings_tf") if held else ())
        arrs = {n: np.load(folder / f"{n}.npy", mmap_mode=mode, allow_pickle=False) for n in names}
        if held:
            inv.indptr_, inv.postings_ids_, inv.postings_tf_ = arrs["indptr"], arrs["postings_ids"], arrs["postings_tf"]
        else:
            inv.postings_from(postings)
        inv.ids_ = np.asarray(arrs["ids"])
        inv.norm1_, inv.norm2_, inv.idf_ = (np.asarray(arrs["norm1"]), np.asarray(arrs["norm2"]),
                                            np.asarray(arrs["idf"]))
        inv._sum_norm1 = float(inv.norm1_.sum())
        inv._norm2sq = inv.norm2_ ** 2
        inv._id_set = set(inv.ids_.tolist())
        if (held and inv.indptr_.shape[0] != inv.n_words + 1) or inv.norm1_.shape[0] != inv.ids_.shape[0]:
            raise FormatError(f"{folder}: array shapes do not match the header.")
        return inv
