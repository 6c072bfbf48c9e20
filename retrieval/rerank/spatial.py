"""Spatial re-ranking of a shortlist (Philbin et al. 2007): ratio-test tentative matches
(:func:`retrieval.rerank.matching.tentative_matches`), fast affine verification
(:func:`retrieval.rerank.verification.verify_affine`), inliers counted one-to-one, the query box projected into
verified images (:func:`retrieval.rerank.boxes.project_box`), and the shortlist re-ranked by inliers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from retrieval.features.rootsift import root_sift
from retrieval.rerank.boxes import project_box
from retrieval.rerank.matching import tentative_matches
from retrieval.rerank.verification import verify_affine


def distinct_inliers(matches: np.ndarray, mask: np.ndarray) -> int:
    """Inliers counted once per query feature and once per database feature: ``min`` of the numbers of distinct
    query and database indices among the inlier matches (many-to-one matches on repeated texture count once)."""
    inl = np.asarray(matches)[np.asarray(mask, bool)]
    if len(inl) == 0:
        return 0
    return int(min(len(np.unique(inl[:, 0])), len(np.unique(inl[:, 1]))))


def plausible_transform(transform, max_scale_change: float = 10.0) -> bool:
    """False for a degenerate query -> database transform: its linear part changes areas by more than
    ``max_scale_change**2`` or less than its inverse (e.g. everything collapsed onto one spot)."""
    T = np.asarray(transform, dtype=np.float64)
    det = abs(float(np.linalg.det(T[:2, :2])))
    return bool(np.isfinite(det) and max_scale_change ** -2 <= det <= max_scale_change ** 2)


def spatial_rerank(hits: list, query, query_box, get_features: Callable, *, shortlist: int, min_inliers: int,
                   ratio: float, describe: Callable | None = None) -> list:
    """Re-rank the first ``shortlist`` hits by the number of spatially verified inliers.

    Tentative matches by the ratio test of :func:`retrieval.rerank.matching.tentative_matches` (RootSIFT by
    default), then :func:`retrieval.rerank.verification.verify_affine` (fast affine hypotheses from single frame
    correspondences, Philbin et al. 2007). Hits with at least ``min_inliers`` come first, by decreasing inliers
    (ties by first-stage score), then the rest in their first-stage order.

    Parameters
    ----------
    hits : list of :class:`retrieval.engine.hits.Hit` (or records with ``id``, ``score`` and settable
        ``inliers``, ``box``), best first. The first ``shortlist`` get ``inliers`` (and ``box`` when verified)
        set in place.
    query : LocalFeatures — the query's features (already restricted to the box)
    query_box : (x1, y1, x2, y2) — the query region, projected into each verified image to give its box
    get_features : callable(id) -> LocalFeatures — the stored features of a database image
    describe : callable(uint8 SIFT (n, 128)) -> float32 (n, d) or None — descriptors compared by the ratio test
        (default RootSIFT; the global backends pass RootSIFT reduced by their local PCA to 64-d, twice as fast)
    """
    if len(query) == 0 or not hits:
        return hits
    describe = describe or root_sift
    dq = describe(query.descriptors)
    head, tail = hits[:shortlist], hits[shortlist:]
    verified, unverified = [], []
    for hit in head:
        db = get_features(hit.id)
        matches = tentative_matches(dq, describe(db.descriptors), ratio=ratio) if len(db) else \
            np.empty((0, 2), np.int64)
        n_in, transform = 0, None
        if len(matches) >= 3:
            mask, transform = verify_affine(query.frames, db.frames, matches)
            n_in = distinct_inliers(matches, mask)
            if transform is not None and not plausible_transform(transform):
                n_in, transform = 0, None
        hit.inliers = n_in
        if n_in >= min_inliers and transform is not None:
            hit.box = project_box(query_box, transform, db.image_size)
            verified.append(hit)
        else:
            unverified.append(hit)
    verified.sort(key=lambda h: (-h.inliers, -h.score))
    return verified + unverified + tail
