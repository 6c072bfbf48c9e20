"""Building the postings of :class:`retrieval.search.invfile.InvertedFile` (Zhu et al. 2013, section 3.3): images'
visual words -> sparse histogram rows, the CSR merge of added postings, the removal of images, and the per-image
norms of the idf-weighted histograms recomputed after each change."""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval.core.checks import is_sparse

__all__ = ["filter_postings", "histogram_rows", "image_norms", "live_counts", "merge_postings", "row_mass"]


@njit(cache=True)
def image_norms(indptr, pids, ptf, idf, n_images, out1, out2):
    """Per-image ||T_j||_1 and ||T_j||_2^2 of the idf-weighted histograms, one pass over all postings."""
    for j in range(n_images):
        out1[j] = 0.0
        out2[j] = 0.0
    for w in range(indptr.shape[0] - 1):
        f = idf[w]
        for p in range(indptr[w], indptr[w + 1]):
            t = f * ptf[p]
            out1[pids[p]] += t
            out2[pids[p]] += t * t


@njit(cache=True)
def live_counts(indptr, rows, live, out):
    """out[w] = how many postings of word ``w`` belong to a live row (``live[rows[p]]``): the document frequencies
    of the images still indexed, counted without the rows removed since a part was written."""
    for w in range(indptr.shape[0] - 1):
        c = 0
        for p in range(indptr[w], indptr[w + 1]):
            if live[rows[p]]:
                c += 1
        out[w] = c


@njit(cache=True)
def row_mass(indptr, rows, weight, out):
    """out[r] = sum of ``weight[w]`` over the words ``w`` whose list holds row ``r`` (each row's words in increasing
    order, whatever else is in the lists: the same float sums for an image however the images are split)."""
    for r in range(out.shape[0]):
        out[r] = 0.0
    for w in range(indptr.shape[0] - 1):
        f = weight[w]
        for p in range(indptr[w], indptr[w + 1]):
            out[rows[p]] += f


@njit(cache=True)
def merge_postings(old_indptr, old_ids, old_tf, new_indptr_add, add_ids, add_tf, out_indptr, out_ids, out_tf):
    """CSR merge: for each word, the old postings then the added ones (both already grouped by word)."""
    n_words = old_indptr.shape[0] - 1
    out_indptr[0] = 0
    pos = 0
    for w in range(n_words):
        for p in range(old_indptr[w], old_indptr[w + 1]):
            out_ids[pos] = old_ids[p]
            out_tf[pos] = old_tf[p]
            pos += 1
        for p in range(new_indptr_add[w], new_indptr_add[w + 1]):
            out_ids[pos] = add_ids[p]
            out_tf[pos] = add_tf[p]
            pos += 1
        out_indptr[w + 1] = pos


@njit(cache=True)
def filter_postings(indptr, pids, ptf, remap, out_indptr, out_ids, out_tf):
    """Drop postings of removed images (remap < 0) and renumber the others; returns the new posting count."""
    pos = 0
    out_indptr[0] = 0
    for w in range(indptr.shape[0] - 1):
        for p in range(indptr[w], indptr[w + 1]):
            r = remap[pids[p]]
            if r >= 0:
                out_ids[pos] = r
                out_tf[pos] = ptf[p]
                pos += 1
        out_indptr[w + 1] = pos
    return pos


def histogram_rows(X, n_words: int, name: str = "X"):
    """Turn images' visual words into sparse histogram rows.

    Parameters
    ----------
    X : scipy.sparse matrix of shape (n, n_words), or a list of items, each either
        an int array of shape (m,) (one word per feature, hard assignment: tf = counts) or
        a pair ``(words, weights)`` of arrays of shape (m,) (soft assignment: tf = summed weights).
    n_words : int
    name : str

    Returns
    -------
    list of (words, tf) : words int64 sorted unique of shape (u,), tf float64 of shape (u,) (all > 0).
    """
    rows = []
    if is_sparse(X):
        import scipy.sparse as sp

        X = sp.csr_matrix(X)
        if X.shape[1] != n_words:
            raise ValueError(f"{name} must have {n_words} columns (the vocabulary size); got shape {X.shape}.")
        X.sum_duplicates()
        for i in range(X.shape[0]):
            a, b = X.indptr[i], X.indptr[i + 1]
            words = X.indices[a:b].astype(np.int64)
            tf = X.data[a:b].astype(np.float64)
            rows.append(_clean(words, tf, n_words, f"{name}[{i}]"))
        return rows
    if isinstance(X, np.ndarray) and X.ndim == 1 and X.dtype.kind in "iu":
        X = [X]
    for i, item in enumerate(X):
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ValueError(f"{name}[{i}] must be a (words, weights) pair; got a tuple of {len(item)}.")
            words = np.asarray(item[0])
            weights = np.asarray(item[1], dtype=np.float64).ravel()
        else:
            words = np.asarray(item)
            weights = None
        if words.size and words.dtype.kind not in "iu":
            raise ValueError(f"{name}[{i}] word indices must be integers; got dtype {words.dtype}.")
        words = words.astype(np.int64).ravel()
        if weights is None:
            weights = np.ones(words.shape[0], dtype=np.float64)
        if weights.shape[0] != words.shape[0]:
            raise ValueError(f"{name}[{i}]: {words.shape[0]} words but {weights.shape[0]} weights.")
        rows.append(_clean(words, weights, n_words, f"{name}[{i}]"))
    return rows


def _clean(words, tf, n_words, where):
    if words.size and (words.min() < 0 or words.max() >= n_words):
        raise ValueError(f"{where}: word indices must be in [0, {n_words}); got range [{words.min()}, {words.max()}].")
    if tf.size and (not np.isfinite(tf).all() or (tf < 0).any()):
        raise ValueError(f"{where}: term weights must be finite and non-negative.")
    uw, inv = np.unique(words, return_inverse=True)
    acc = np.zeros(uw.shape[0], dtype=np.float64)
    np.add.at(acc, inv, tf)
    keep = acc > 0
    return uw[keep], acc[keep]
