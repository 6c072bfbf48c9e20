"""Scoring through the postings of :class:`retrieval.search.invfile.InvertedFile`: per-image accumulators of the
shared-component terms of l1/l2 (Zhu et al. 2013, eq. 1) and delta_1/delta_2 (eq. 8-11), visiting only the postings
of the query's words, and the top-k selection of the scores."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["acc_delta2", "acc_dot", "acc_min", "acc_min_normalized", "topk_smallest"]


@njit(cache=True)
def acc_min(indptr, pids, ptf, qwords, qvals, idf, acc):
    """delta1: acc[j] += min(Q_l, idf_l t_jl); returns the total sum over all postings (eq. 9 denominator)."""
    total = 0.0
    for i in range(qwords.shape[0]):
        w = qwords[i]
        q = qvals[i]
        f = idf[w]
        for p in range(indptr[w], indptr[w + 1]):
            t = f * ptf[p]
            m = q if q < t else t
            acc[pids[p]] += m
            total += m
    return total


@njit(cache=True)
def acc_min_normalized(indptr, pids, ptf, qwords, qvals, idf, inv_norm, acc):
    """l1: acc[j] += min(Qh_l, idf_l t_jl / ||T_j||_1)."""
    for i in range(qwords.shape[0]):
        w = qwords[i]
        q = qvals[i]
        f = idf[w]
        for p in range(indptr[w], indptr[w + 1]):
            j = pids[p]
            t = f * ptf[p] * inv_norm[j]
            acc[j] += q if q < t else t


@njit(cache=True)
def acc_dot(indptr, pids, ptf, qwords, qvals, idf, acc):
    """l2: acc[j] += Q_l idf_l t_jl."""
    for i in range(qwords.shape[0]):
        w = qwords[i]
        qf = qvals[i] * idf[w]
        for p in range(indptr[w], indptr[w + 1]):
            acc[pids[p]] += qf * ptf[p]


@njit(cache=True)
def acc_delta2(indptr, pids, ptf, qwords, qvals, idf, acc3):
    """delta2: acc3[j] += (T_jl m_l, Q_l m_l, m_l^2) with m_l = min(Q_l, idf_l t_jl)."""
    for i in range(qwords.shape[0]):
        w = qwords[i]
        q = qvals[i]
        f = idf[w]
        for p in range(indptr[w], indptr[w + 1]):
            j = pids[p]
            t = f * ptf[p]
            m = q if q < t else t
            acc3[j, 0] += t * m
            acc3[j, 1] += q * m
            acc3[j, 2] += m * m


def topk_smallest(s: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k smallest entries of ``s`` (n,), sorted by (value, index); shape (min(k, n),) int64."""
    n = s.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        part = np.argpartition(s, k - 1)[:k]
    else:
        part = np.arange(n)
    return part[np.lexsort((part, s[part]))].astype(np.int64)
