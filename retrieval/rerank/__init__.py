"""Shortlist -> verified: tentative matches (one ratio test), geometric verification (affine / homography),
spatial re-ranking of a shortlist, and boxes (clipping, projection, IoU)."""

from retrieval.rerank.boxes import box_iou, clip_box, project_box, query_region
from retrieval.rerank.matching import (
    MatchResult,
    find_homography,
    match_descriptors,
    match_features,
    match_images,
    tentative_matches,
)
from retrieval.rerank.verification import (
    DEFAULT_MIN_INLIERS,
    Verification,
    model_problem,
    verify,
    verify_affine,
)
from retrieval.rerank.verifier import Verifier

__all__ = ["DEFAULT_MIN_INLIERS", "MatchResult", "Verification", "box_iou", "clip_box", "find_homography", "match_descriptors", "match_features",
           "match_images", "project_box", "query_region", "Verifier", "model_problem", "tentative_matches", "verify",
           "verify_affine"]
