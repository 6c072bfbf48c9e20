"""Spatial re-ranking of a shortlist (Philbin et al. 2007): ratio-test tentative matches
(:func:`retrieval.rerank.matching.tentative_matches`), the one geometric verification
(:func:`retrieval.rerank.verification.verify`: affine hypotheses, local optimisation, homography refit, degenerate
models rejected, one-to-one inliers, a decision threshold with a measured error rate), the query box projected into
verified images (:func:`retrieval.rerank.boxes.project_box`), and the shortlist re-ranked by inliers.
"""

from __future__ import annotations

import numpy as np

from retrieval.rerank.verification import model_problem


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
