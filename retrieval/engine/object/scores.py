"""Scores and correspondences of :class:`retrieval.engine.object.searcher.ObjectSearcher`: the similarity of each
dissimilarity (Zhu et al. 2013), the scores of the query photo's own encoding that make a similarity of 1 (BoW
histogram, ASMK* signatures), unverified hits, and the visual-word correspondences used for verification when no
stored features are given."""

from __future__ import annotations

import numpy as np

from retrieval.engine.hits import Hit
from retrieval.search import dissimilarities as dis
from retrieval.search import smk
from retrieval.search.invfile import METHODS

__all__ = ["bow_dissimilarity", "kernel_reference", "object_similarity", "topk_by_id", "unverified_hits",
           "word_matches"]


def bow_dissimilarity(qw, qtf, tw, ttf, idf, method: str, weight: float) -> float:
    """The exact float64 dissimilarity (Zhu et al. 2013, eq. 1, 8, 10) between the query histogram ``(qw, qtf)``
    and one image's ``(tw, ttf)`` (sorted words, term frequencies; ``ttf`` as stored in the postings, float32),
    both weighted by ``idf`` (n_words,); ``weight``: wbar (delta1) or w (delta2)."""
    sup = np.union1d(qw, tw)
    Q = np.zeros(sup.shape[0])
    T = np.zeros(sup.shape[0])
    Q[np.searchsorted(sup, qw)] = np.asarray(qtf, np.float64) * idf[qw]
    T[np.searchsorted(sup, tw)] = np.asarray(ttf, np.float32).astype(np.float64) * idf[tw]
    if method == "l1":
        return float(dis.lp_distance(Q, T, 1)[0])
    if method == "l2":
        return float(dis.lp_distance(Q, T, 2)[0])
    if method == "delta1":
        return float(dis.delta1(Q, T, weight)[0])
    return float(dis.delta2(Q, T, weight)[0])


def kernel_reference(qwords, qvec, own_words, own_sigs, idf=None, *, alpha: float, threshold: float,
                     asymmetric: bool) -> float:
    """The normalised ASMK* kernel K(Q, X) of :meth:`retrieval.search.smk.SMKFile.similarities` between a query side
    ``(qwords (u,) sorted, qvec (u, d) unit rows)`` and one image's stored signatures ``(own_words (v,) sorted,
    own_sigs (v, d/8) uint8)``, with the collection's ``idf`` (n_words,) or 1 per word (None): the score of the
    query photo's own encoding, what ``similarity`` 1 means (Tolias et al. 2013, eq. 6-7, 15; the same sums as the
    inverted file's, one image)."""
    qwords, own_words = np.asarray(qwords, np.int64), np.asarray(own_words, np.int64)
    if len(qwords) == 0 or len(own_words) == 0:
        return 0.0
    wq = np.ones(len(qwords)) if idf is None else np.asarray(idf, np.float64)[qwords]
    wo = np.ones(len(own_words)) if idf is None else np.asarray(idf, np.float64)[own_words]
    qmass, omass = float(wq.sum()), float(wo.sum())
    if qmass <= 0 or omass <= 0:
        return 0.0
    common, iq, io = np.intersect1d(qwords, own_words, assume_unique=True, return_indices=True)
    v = np.asarray(qvec, np.float64)[iq]
    bits = np.unpackbits(np.asarray(own_sigs, np.uint8)[io], axis=1)[:, :v.shape[1]].astype(bool)
    if asymmetric:   # <v, s> / ||v||_1 with s in {-1, +1}^d; a word whose residual is zero adds nothing
        l1 = np.abs(v).sum(axis=1)
        u = np.where(l1 > 0, (v * np.where(bits, 1.0, -1.0)).sum(axis=1) / np.where(l1 > 0, l1, 1.0), -np.inf)
    else:            # the normalised Hamming similarity 1 - 2 h / d of the two signatures
        u = 1.0 - 2.0 * ((v > 0) != bits).sum(axis=1) / v.shape[1]
    kernel = smk.selective(np.where(np.isfinite(u), u, threshold), alpha, threshold)
    return float((wq[iq] * kernel).sum() / np.sqrt(qmass) / np.sqrt(omass))


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
