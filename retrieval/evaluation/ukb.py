"""University of Kentucky Benchmark (Nister & Stewenius 2006): the "4 x recall@4" score (N-S score).

10,200 images in 2,550 groups of 4 consecutive images (``ukbench00000.jpg`` ... ``ukbench10199.jpg``; group =
index // 4). Every image is a query against the whole set (itself included); its score is the number of the 4
images of its group among the first 4 results, and the N-S score is the mean over the queries (0 to 4).
"""

from __future__ import annotations

import numpy as np

from retrieval.core.checks import check_array


def ukb_score(ranked_ids, query_ids=None, *, group_size: int = 4) -> tuple:
    """N-S score of ranked lists.

    Parameters
    ----------
    ranked_ids : array-like of shape (n_queries, k), int, k >= 4
        Database indices (best first) for each query; -1 pads short lists.
    query_ids : array-like of shape (n_queries,), int, or None
        Database index of each query (default: 0 .. n_queries - 1).
    group_size : int
        Images per group (4 for UKB).

    Returns
    -------
    score : float
        Mean number of same-group images in the top 4 (in [0, 4]).
    per_query : ndarray of shape (n_queries,), int64
    """
    ids = check_array(ranked_ids, "ranked_ids", dtype=None, finite=False)
    if ids.dtype.kind not in "iu":
        raise ValueError(f"ranked_ids must hold integer indices; got dtype {ids.dtype}.")
    if ids.shape[1] < group_size:
        raise ValueError(f"ranked_ids needs at least {group_size} columns; got shape {ids.shape}.")
    q = np.arange(ids.shape[0]) if query_ids is None else np.asarray(query_ids, dtype=np.int64)
    if q.shape != (ids.shape[0],):
        raise ValueError(f"query_ids must have shape ({ids.shape[0]},); got {q.shape}.")
    top = ids[:, :group_size].astype(np.int64)
    for i, row in enumerate(top):
        valid = row[row >= 0]
        if np.unique(valid).size != valid.size:
            raise ValueError(f"query {i}: an image is ranked twice in the top {group_size}.")
    hits = (top >= 0) & (top // group_size == (q // group_size)[:, None])
    per_query = hits.sum(axis=1).astype(np.int64)
    return float(per_query.mean()), per_query
