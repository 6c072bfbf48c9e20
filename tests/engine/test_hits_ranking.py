"""The one ordering key of every ranked list (retrieval.engine.hits.finish_ranking) on hand-built hits, and the
similarity mappings of the first stages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.engine.hits import (
    VERIFIED_SCALE,
    Hit,
    finish_ranking,
    rank_score,
    similarity_from_hamming,
    similarity_from_ip,
    similarity_from_sq_distance,
    similarity_ratio,
    verified_by_rerank,
)


def test_verified_first_by_inliers_then_similarity():
    hits = [Hit(1, 0.0, similarity=0.9), Hit(2, 0.0, 12, similarity=0.3, verified=True, box=(0, 0, 5, 5)),
            Hit(3, 0.0, 40, similarity=0.2, verified=True, box=(1, 1, 4, 4)),
            Hit(4, 0.0, 12, similarity=0.5, verified=True), Hit(5, 0.0, 3, similarity=0.95),
            Hit(6, 0.0, similarity=0.7)]
    out = finish_ranking(hits, reranked=True)
    # verified: 40 inliers, then the two with 12 by similarity (0.5 before 0.3); then unverified by similarity
    assert [h.id for h in out] == [3, 4, 2, 5, 1, 6]
    assert [h.score for h in out] == pytest.approx([1 + 40 / 50, 1 + 12 / 22, 1 + 12 / 22, 0.95, 0.9, 0.7])
    assert [h.verified for h in out] == [True, True, True, False, False, False]
    # an unverified hit keeps neither inliers nor box
    assert all(h.inliers is None and h.box is None for h in out[3:])
    assert out[0].box == (1, 1, 4, 4) and out[1].box is None  # a verified hit may have no box


def test_without_rerank_score_is_the_similarity_and_nothing_is_verified():
    hits = [Hit(1, 5.0, 30, (0, 0, 1, 1), similarity=0.4, verified=True), Hit(2, -1.0, similarity=0.6)]
    out = finish_ranking(hits, reranked=False)
    assert [(h.id, h.score, h.verified, h.inliers, h.box) for h in out] == [(2, 0.6, False, None, None),
                                                                          (1, 0.4, False, None, None)]


def test_ties_keep_the_first_stage_order_and_a_missing_similarity_is_refused():
    out = finish_ranking([Hit(i, 0.0, similarity=0.5) for i in (4, 2, 9)], reranked=True)
    assert [h.id for h in out] == [4, 2, 9]
    with pytest.raises(ValueError, match="hit 7: similarity is not set"):
        finish_ranking([Hit(7, 0.3)], reranked=False)


def test_the_verifier_decision_is_read_from_the_flag_only():
    """The decision is the verifier's flag: neither a box nor an inlier count makes a hit verified."""
    assert verified_by_rerank(Hit(1, 0.0, verified=True))
    assert not verified_by_rerank(Hit(1, 0.0, box=(0, 0, 1, 1)))
    assert not verified_by_rerank(Hit(1, 0.0, inliers=50))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans(), st.integers(1, 500)), min_size=1, max_size=30))
def test_score_never_increases_with_rank(rows):
    hits = [Hit(i, 0.0, inl if v else None, similarity=s, verified=v) for i, (s, v, inl) in enumerate(rows)]
    out = finish_ranking(hits, reranked=True)
    scores = [h.score for h in out]
    assert all(a >= b for a, b in zip(scores, scores[1:], strict=False))
    assert all((h.score > 1.0) == h.verified for h in out)
    assert all(0.0 <= h.score < 2.0 for h in out)


def test_rank_score_formula():
    assert rank_score(0.3, False, None) == 0.3
    assert rank_score(0.3, True, 10) == pytest.approx(1 + 10 / (10 + VERIFIED_SCALE)) == pytest.approx(1.5)
    assert rank_score(0.3, True, 30) > rank_score(0.9, True, 29) > 1.0


def test_similarity_mappings():
    """Each first stage's score relative to the query photo's own (the reference): 1 at the reference, clipped to
    [0, 1], increasing in the score (decreasing in the distance)."""
    np.testing.assert_allclose(similarity_from_ip([-1.0, 0.0, 0.5, 1.0], 1.0), [0.0, 0.0, 0.5, 1.0])
    np.testing.assert_allclose(similarity_from_ip([0.25, 0.5, 0.6], 0.5), [0.5, 1.0, 1.0])
    np.testing.assert_allclose(similarity_from_ip([0.0, 0.0], 0.0), [0.0, 0.0])   # a query without features
    # the squared distance of unit vectors is 2 - 2 ip: with an exact code (reference 0) both mappings agree
    ip = np.array([-1.0, -0.2, 0.3, 1.0])
    np.testing.assert_allclose(similarity_from_sq_distance(2 - 2 * ip, 0.0), similarity_from_ip(ip, 1.0))
    # a coding error of 0.3 on the query's own code: that distance reads 1, the others shift with it
    np.testing.assert_allclose(similarity_from_sq_distance([0.3, 1.3, 5.0, 0.1], 0.3), [1.0, 0.5, 0.0, 1.0])
    # a projection of squared norm 0.4: distances on its scale; no energy (no features): 0
    np.testing.assert_allclose(similarity_from_sq_distance([0.3, 0.7], 0.3, 0.4), [1.0, 0.5])
    np.testing.assert_allclose(similarity_from_sq_distance([0.3, 0.7], 0.3, 0.0), [0.0, 0.0])
    np.testing.assert_allclose(similarity_from_hamming([0, 64, 128, 200], 0, 256), [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(similarity_from_hamming([8, 72], 8, 256), [1.0, 0.5])
    np.testing.assert_allclose(similarity_ratio([0.1, 0.3, 0.4], 0.4), [0.25, 0.75, 1.0])
    np.testing.assert_allclose(similarity_ratio([0.004, 0.125, 0.5], 0.5, alpha=3.0), [0.2, 0.25 ** (1 / 3), 1.0])
