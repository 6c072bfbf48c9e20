"""Spatial re-ranking of a shortlist (Philbin et al. 2007): ratio-test tentative matches
(:func:`retrieval.rerank.matching.tentative_matches`), the one geometric verification
(:func:`retrieval.rerank.verification.verify`: affine hypotheses, local optimisation, homography refit, degenerate
models rejected, one-to-one inliers, a decision threshold with a measured error rate), the query box projected into
verified images (:func:`retrieval.rerank.boxes.project_box`), and the shortlist re-ranked by inliers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from retrieval.core.cache import BytesLRU
from retrieval.rerank.verification import DEFAULT_MIN_INLIERS, model_problem
from retrieval.rerank.verifier import Verifier


def distinct_inliers(matches: np.ndarray, mask: np.ndarray) -> int:
    """Inliers counted once per query feature and once per database feature: ``min`` of the numbers of distinct
    query and database indices among the inlier matches (many-to-one matches on repeated texture count once)."""
    inl = np.asarray(matches)[np.asarray(mask, bool)]
    if len(inl) == 0:
        return 0
    return int(min(len(np.unique(inl[:, 0])), len(np.unique(inl[:, 1]))))


def plausible_transform(transform, max_scale_change: float = 10.0, region=None) -> bool:
    """False for a degenerate query -> database transform (:func:`retrieval.rerank.verification.model_problem`:
    mirrored, collapsed, extreme scale or shear), checked on ``region`` (default: a 100 x 100 square at the
    origin)."""
    return model_problem(transform, region or (0.0, 0.0, 100.0, 100.0), max_scale=max_scale_change) is None


def spatial_rerank(hits: list, query, query_box, get_features: Callable, *, shortlist: int,
                   min_inliers: int | None = None, ratio: float, describe: Callable | None = None,
                   cache: BytesLRU | None = None) -> list:
    """Re-rank the first ``shortlist`` hits: verified hits first, by decreasing inliers (:meth:`Verifier.rerank
    <retrieval.rerank.verifier.Verifier.rerank>` with these settings).

    Tentative matches by the ratio test of :func:`retrieval.rerank.matching.tentative_matches` (RootSIFT by
    default), then :func:`retrieval.rerank.verification.verify`. Verified hits come first, by decreasing
    one-to-one inliers (ties by first-stage score), then the rest in their first-stage order.

    Parameters
    ----------
    hits : list of :class:`retrieval.engine.hits.Hit` (or records with ``id``, ``score`` and settable
        ``inliers``, ``box``), best first. The first ``shortlist`` get ``inliers`` (the one-to-one inliers of the
        best sane model, 0 when there is none) and ``verified`` set in place, and ``box`` only when verified.
    query : LocalFeatures — the query's features (already restricted to the box)
    query_box : (x1, y1, x2, y2) — the query region, projected into each verified image to give its box
    get_features : callable(id) -> LocalFeatures — the stored features of a database image
    min_inliers : int or None
        The decision threshold of :func:`verify`; None = ``DEFAULT_MIN_INLIERS`` (chosen on real unrelated pairs,
        false-verification rate below 0.1 %, docs/results.md "Geometric verification"). Lower values verify
        unrelated images more often.
    describe : callable(uint8 SIFT (n, 128)) -> float32 (n, d) or None — descriptors compared by the ratio test
        (default RootSIFT; the global backends pass RootSIFT reduced by their local PCA to 64-d, twice as fast)
    cache : BytesLRU or None
        Keeps each database image's frames and described descriptors (key ``("described", id)``) across calls
        (the caller guarantees that an id always names the same image and that ``describe`` does not change).
    """
    verifier = Verifier(ratio=ratio, min_inliers=DEFAULT_MIN_INLIERS if min_inliers is None else min_inliers,
                        describe=describe)
    return verifier.rerank(hits, query, query_box, get_features, shortlist=shortlist, cache=cache)
