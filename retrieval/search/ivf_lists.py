"""Storage of the IVFADC inverted lists: ``nlist`` lists kept contiguous, list after list (Jegou et al. 2012,
section VI-C; layout of :class:`retrieval.search.ivfadc.IVFADC`).

``codes_`` (ntotal, M) holds the residual PQ codes with the rows of list ``l`` at ``offsets_[l]:offsets_[l + 1]``,
``ids_`` (ntotal,) int64 the ids beside them (-1 marks a removed row until :meth:`InvertedLists.compact`), and
optionally ``vectors_`` (ntotal, d) and ``refine_codes_`` (ntotal, refine_M) in the same order. Adding merges the
new rows into place in one O(ntotal) pass; removing marks rows and compacts when a quarter of them are marked.
"""

from __future__ import annotations

import numpy as np

from retrieval.core.checks import check_array, check_is_fitted

__all__ = ["InvertedLists"]


class InvertedLists:
    """Mixin holding the contiguous inverted lists of an IVFADC (expects ``nlist``, ``M``, ``store_vectors``,
    ``refine_M``, ``d_``, ``pq_`` and ``refine_pq_`` on the instance)."""

    def _init_storage(self):
        self.codes_ = np.empty((0, self.M), dtype=self.pq_.code_dtype)
        self.ids_ = np.empty(0, dtype=np.int64)
        self.offsets_ = np.zeros(self.nlist + 1, dtype=np.int64)
        self.vectors_ = None if self.store_vectors is None else np.empty((0, self.d_), dtype=self.store_vectors)
        self.refine_codes_ = (None if self.refine_pq_ is None
                              else np.empty((0, self.refine_M), dtype=self.refine_pq_.code_dtype))
        self.n_removed_ = 0
        self.next_id_ = 0

    @property
    def ntotal(self) -> int:
        """Number of live (not removed) vectors."""
        check_is_fitted(self, "centroids_")
        return int(self.ids_.shape[0]) - int(self.n_removed_)

    @property
    def bytes_per_vector(self) -> int:
        """Memory per indexed vector in the lists: code bytes + 8 bytes of id (+ refine code, + stored vector)."""
        check_is_fitted(self, "centroids_")
        b = self.pq_.code_size + 8
        if self.refine_pq_ is not None:
            b += self.refine_pq_.code_size
        if self.store_vectors is not None:
            b += self.d_ * np.dtype(self.store_vectors).itemsize
        return b

    def list_sizes(self) -> np.ndarray:
        """Stored rows per list (removed rows included until :meth:`compact`), shape (nlist,), int64."""
        check_is_fitted(self, "centroids_")
        return np.diff(self.offsets_)

    def add_preassigned(self, list_nos, codes, ids, *, vectors=None, refine_codes=None) -> None:
        """Append already encoded entries to given lists (the lists stay contiguous; one O(ntotal) merge).

        Parameters
        ----------
        list_nos : ndarray of shape (n,), int
        codes : ndarray of shape (n, M), dtype uint8/uint16 (the residual PQ codes)
        ids : ndarray of shape (n,), int64, non-negative
        vectors : ndarray of shape (n, d) or None (required when ``store_vectors`` is set)
        refine_codes : ndarray of shape (n, refine_M) or None (required when ``refine_M > 0``)
        """
        check_is_fitted(self, "centroids_")
        list_nos = np.asarray(list_nos, dtype=np.int64).reshape(-1)
        n = list_nos.shape[0]
        if n and (list_nos.min() < 0 or list_nos.max() >= self.nlist):
            raise ValueError(f"list numbers must be in [0, {self.nlist}); got [{list_nos.min()}, {list_nos.max()}].")
        codes = self.pq_.check_codes(codes)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if codes.shape[0] != n or ids.shape[0] != n:
            raise ValueError(f"list_nos, codes and ids must have the same length; got {n}, {codes.shape[0]}, "
                             f"{ids.shape[0]}.")
        if (vectors is None) != (self.store_vectors is None):
            raise ValueError("vectors must be given exactly when store_vectors is set.")
        if (refine_codes is None) != (self.refine_pq_ is None):
            raise ValueError("refine_codes must be given exactly when refine_M > 0.")
        order = np.argsort(list_nos, kind="stable")
        counts = np.bincount(list_nos, minlength=self.nlist).astype(np.int64)
        old_sizes = np.diff(self.offsets_)
        new_offsets = np.zeros(self.nlist + 1, dtype=np.int64)
        np.cumsum(old_sizes + counts, out=new_offsets[1:])
        old_lists = np.repeat(np.arange(self.nlist), old_sizes)
        dst_old = np.arange(old_sizes.sum(), dtype=np.int64) - self.offsets_[old_lists] + new_offsets[old_lists]
        sorted_lists = list_nos[order]
        first_new = np.zeros(self.nlist + 1, dtype=np.int64)
        np.cumsum(counts, out=first_new[1:])
        dst_new = (np.arange(n, dtype=np.int64) - first_new[sorted_lists]
                   + new_offsets[sorted_lists] + old_sizes[sorted_lists])

        def merge(old, new):
            out = np.empty((new_offsets[-1],) + old.shape[1:], dtype=old.dtype)
            out[dst_old] = old
            out[dst_new] = np.asarray(new, dtype=old.dtype)[order]
            return out

        self.codes_ = merge(self.codes_, codes.astype(self.pq_.code_dtype, copy=False))
        self.ids_ = merge(self.ids_, ids)
        if self.vectors_ is not None:
            self.vectors_ = merge(self.vectors_, check_array(vectors, "vectors", n_features=self.d_, dtype=None))
        if self.refine_codes_ is not None:
            self.refine_codes_ = merge(self.refine_codes_, self.refine_pq_.check_codes(refine_codes))
        self.offsets_ = new_offsets
        if n:
            self.next_id_ = max(int(self.next_id_), int(ids.max()) + 1)

    def set_inverted_lists(self, codes, ids, offsets) -> None:
        """Install contiguous inverted lists as they are (no copy): for scale runs with injected codes.

        codes (ntotal, M) uint8/uint16 C-contiguous, ids (ntotal,) int64, offsets (nlist + 1,) int64
        non-decreasing from 0 to ntotal. Only allowed without stored vectors / refine codes.
        """
        check_is_fitted(self, "centroids_")
        if self.store_vectors is not None or self.refine_pq_ is not None:
            raise ValueError("set_inverted_lists is only available without store_vectors and refine_M.")
        offsets = np.asarray(offsets, dtype=np.int64)
        if (codes.ndim != 2 or codes.shape[1] != self.M or codes.dtype != self.pq_.code_dtype
                or not codes.flags.c_contiguous):
            raise ValueError(f"codes must be a C-contiguous {self.pq_.code_dtype} array of shape (n, {self.M}); "
                             f"got {codes.dtype} {codes.shape}.")
        ksub = self.pq_.ksub_
        if ksub < np.iinfo(codes.dtype).max + 1 and codes.size and int(codes.max()) >= ksub:
            raise ValueError(f"codes must be smaller than ksub={ksub}; got {int(codes.max())}.")
        if ids.dtype != np.int64 or ids.shape != (codes.shape[0],):
            raise ValueError(f"ids must be int64 of shape ({codes.shape[0]},); got {ids.dtype} {ids.shape}.")
        if (offsets.shape != (self.nlist + 1,) or offsets[0] != 0 or offsets[-1] != codes.shape[0]
                or np.any(np.diff(offsets) < 0)):
            raise ValueError(f"offsets must be non-decreasing of shape ({self.nlist + 1},) from 0 to {codes.shape[0]}.")
        self.codes_, self.ids_, self.offsets_ = codes, ids, offsets
        self.n_removed_ = 0
        self.next_id_ = int(ids.max()) + 1 if ids.size else 0

    def remove(self, ids) -> int:
        """Mark the entries with these ids as removed (they are never returned again); compacts the lists when
        more than a quarter of the stored rows are marked.

        Parameters
        ----------
        ids : array-like of int

        Returns
        -------
        n_removed : int
            Number of stored entries newly marked.
        """
        check_is_fitted(self, "centroids_")
        ids = np.unique(np.asarray(ids, dtype=np.int64).reshape(-1))
        ids = ids[ids >= 0]
        hit = np.isin(self.ids_, ids)
        count = int(np.count_nonzero(hit))
        if count:
            if not self.ids_.flags.writeable:
                self.ids_ = np.array(self.ids_)
            self.ids_[hit] = -1
            self.n_removed_ = int(self.n_removed_) + count
            if self.n_removed_ * 4 > self.ids_.shape[0]:
                self.compact()
        return count

    def compact(self) -> None:
        """Drop the rows marked as removed and rebuild the offsets (O(ntotal) copy)."""
        check_is_fitted(self, "centroids_")
        if not self.n_removed_:
            return
        keep = self.ids_ >= 0
        lists = np.repeat(np.arange(self.nlist), np.diff(self.offsets_))
        sizes = np.bincount(lists[keep], minlength=self.nlist)
        self.codes_ = np.ascontiguousarray(self.codes_[keep])
        self.ids_ = np.ascontiguousarray(self.ids_[keep])
        if self.vectors_ is not None:
            self.vectors_ = np.ascontiguousarray(self.vectors_[keep])
        if self.refine_codes_ is not None:
            self.refine_codes_ = np.ascontiguousarray(self.refine_codes_[keep])
        self.offsets_ = np.zeros(self.nlist + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.offsets_[1:])
        self.n_removed_ = 0
