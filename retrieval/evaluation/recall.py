"""recall@R as in Jegou et al. 2012, Sec. 5 (and Jegou et al., PAMI 2011): the fraction of queries whose true nearest
neighbour is ranked within the first R results."""

from __future__ import annotations

import numpy as np

from retrieval.core.checks import check_array


def recall_at_r(ids, gt_nn, rs=(1, 10, 100)) -> dict:
    """recall@R for each R in ``rs``.

    Parameters
    ----------
    ids : array-like of shape (n_queries, k), int
        Returned database ids, best first (-1 for padding, as ``search`` returns).
    gt_nn : array-like of shape (n_queries,) or (n_queries, >=1), int
        The true nearest neighbour of each query (first column used when 2-d).
    rs : iterable of int
        Values of R (R larger than k counts only the k returned results).

    Returns
    -------
    dict int -> float
        ``{R: fraction of queries whose gt_nn is among ids[:, :R]}``.
    """
    ids = check_array(ids, "ids", dtype=None, finite=False)
    gt = np.asarray(gt_nn)
    if gt.ndim == 2:
        gt = gt[:, 0]
    if gt.shape != (ids.shape[0],):
        raise ValueError(f"gt_nn must have {ids.shape[0]} rows (one per query); got shape {np.asarray(gt_nn).shape}.")
    out = {}
    for r in rs:
        if int(r) < 1:
            raise ValueError(f"R must be >= 1; got {r}.")
        hit = (ids[:, : int(r)] == gt[:, None]).any(axis=1)
        out[int(r)] = float(hit.mean()) if ids.shape[0] else float("nan")
    return out
