"""Shortlist -> verified: tentative matches (one ratio test), geometric verification (affine / homography),
spatial re-ranking of a shortlist, and box projection."""

from retrieval.rerank.matching import (
    MatchResult,
    find_homography,
    match_descriptors,
    match_features,
    match_images,
)
from retrieval.rerank.verification import verify_affine

__all__ = ["MatchResult", "find_homography", "match_descriptors", "match_features", "match_images", "verify_affine"]
