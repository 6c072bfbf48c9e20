"""Scores and correspondences of :class:`retrieval.engine.object_search.ObjectSearcher`: the similarity of each
dissimilarity (Zhu et al. 2013), unverified hits, and the visual-word correspondences used for verification when
no stored features are given."""

from __future__ import annotations

import numpy as np

from retrieval.engine.hits import Hit
from retrieval.search.invfile import METHODS

__all__ = ["object_similarity", "topk_by_id", "unverified_hits", "word_matches"]


def object_similarity(d, method: str, qv, weight: float) -> np.ndarray:
    """The dissimilarities ``d`` (n,) of one query mapped to a similarity in [0, 1], larger = more similar,
    decreasing in ``d`` (the ranking is unchanged). ``qv``: the query's idf-weighted histogram values; ``weight``:
    wbar (delta1, Zhu et al. 2013, eq. 9) or w (delta2, eq. 11).

    - l1 (eq. 1, L1-normalised histograms, d in [0, 2]): ``1 - d / 2``;
    - l2 (eq. 1, L2-normalised non-negative histograms): ``1 - d**2 / 2``, the cosine of the histograms;
    - delta1 (eq. 8): ``d`` is at least ``d_min = (1 - max(wbar, 1)) ||Q||_1`` (reached when T = Q for wbar >= 1);
      ``||Q||_1 / (||Q||_1 + d - d_min)`` -- 1 for a copy of the query, 1/2 when the excess dissimilarity
      ``d - d_min = ||max(T - Q, 0)||_1 + (wbar - 1) ||max(Q - T, 0)||_1`` equals the query's mass;
    - delta2 (eq. 10, d >= 0, 0 when T = Q): ``||Q||_2 / (||Q||_2 + d)``.
    """
    d = np.asarray(d, dtype=np.float64)
    qv = np.asarray(qv, dtype=np.float64)
    if method == "l1":
        s = 1.0 - d / 2.0
    elif method == "l2":
        s = 1.0 - d * d / 2.0
    elif method == "delta1":
        n1 = float(qv.sum())
        excess = np.maximum(d - (1.0 - max(float(weight), 1.0)) * n1, 0.0)
        s = n1 / (n1 + excess) if n1 > 0 else np.zeros_like(d)
    elif method == "delta2":
        n2 = float(np.sqrt((qv * qv).sum()))
        s = n2 / (n2 + np.maximum(d, 0.0)) if n2 > 0 else np.zeros_like(d)
    else:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}.")
    return np.clip(s, 0.0, 1.0)


def unverified_hits(ids, d, sims) -> list[Hit]:
    """Unverified hits in this order: ``score = similarity``, ``distance = d``."""
    ids, d, sims = (np.asarray(v).tolist() for v in (ids, d, sims))   # Python numbers: no numpy scalar per hit
    return [Hit(int(i), float(s), similarity=float(s), distance=float(x)) for i, x, s in zip(ids, d, sims, strict=True)]


def word_matches(q_words, db_words, max_pairs_per_word: int = 16):
    """Tentative correspondences: pairs (query feature, db feature) with the same visual word.

    Bursty words (more than ``max_pairs_per_word`` pairs) are skipped, as is usual in spatial verification.

    Returns
    -------
    ndarray of shape (m, 2), int64 -- (index into q_words, index into db_words)
    """
    q_words = np.asarray(q_words, np.int64)
    db_words = np.asarray(db_words, np.int64)
    qo = np.argsort(q_words, kind="stable")
    do = np.argsort(db_words, kind="stable")
    qs, ds = q_words[qo], db_words[do]
    common = np.intersect1d(qs, ds)
    if common.size == 0:
        return np.zeros((0, 2), np.int64)
    qa, qb = np.searchsorted(qs, common, "left"), np.searchsorted(qs, common, "right")
    da, db = np.searchsorted(ds, common, "left"), np.searchsorted(ds, common, "right")
    pairs = []
    for a1, b1, a2, b2 in zip(qa.tolist(), qb.tolist(), da.tolist(), db.tolist(), strict=True):
        if (b1 - a1) * (b2 - a2) > max_pairs_per_word:
            continue
        for x in qo[a1:b1]:
            for y in do[a2:b2]:
                pairs.append((x, y))
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def topk_by_id(d: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest entries of ``d``, ties broken by ``ids`` (also at the k-th value), sorted by
    (value, id): the choice does not depend on the order of the rows."""
    n = len(d)
    if n == 0 or k <= 0:
        return np.zeros(0, np.int64)
    if k < n:
        thr = d[np.argpartition(d, k - 1)[k - 1]]
        below = np.flatnonzero(d < thr)
        at = np.flatnonzero(d == thr)
        at = at[np.argsort(ids[at], kind="stable")[:k - len(below)]]
        top = np.concatenate([below, at])
    else:
        top = np.arange(n)
    return top[np.lexsort((ids[top], d[top]))].astype(np.int64)
