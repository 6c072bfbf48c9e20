"""verify_affine (Philbin et al. 2007): hand-built frames, a numpy oracle, and real images."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.rerank.verification import affine_from_frames, verify_affine


def _frames_under(T, frames):
    """Apply the affine T (2x3) to frames: centre -> M x + t, A -> M A."""
    M, t = T[:, :2], T[:, 2]
    out = frames.copy()
    out[:, :2] = frames[:, :2] @ M.T + t
    out[:, 2:] = np.einsum("ij,njk->nik", M, frames[:, 2:].reshape(-1, 2, 2)).reshape(-1, 4)
    return out


def test_single_correspondence_hypothesis_by_hand():
    fq = np.array([[10.0, 20.0, 2.0, 0.0, 0.0, 2.0]])
    fd = np.array([[100.0, 50.0, 4.0, 0.0, 1.0, 6.0]])
    T = affine_from_frames(fq, fd)[0]
    # M = A_d A_q^{-1} = [[4, 0], [1, 6]] / 2; t = x_d - M x_q
    M = np.array([[2.0, 0.0], [0.5, 3.0]])
    np.testing.assert_allclose(T[:, :2], M)
    np.testing.assert_allclose(T[:, 2], [100 - 20, 50 - (5 + 60)])


def test_recovers_affine_with_outliers():
    rng = np.random.default_rng(0)
    n = 200
    fq = np.zeros((n, 6))
    fq[:, :2] = rng.uniform(0, 500, (n, 2))
    fq[:, 2] = rng.uniform(3, 10, n)
    fq[:, 4] = rng.uniform(-2, 2, n)
    fq[:, 5] = rng.uniform(3, 10, n)
    T = np.array([[0.8, -0.1, 40.0], [0.2, 1.1, -15.0]])
    fd = _frames_under(T, fq)
    fd[:, :2] += rng.normal(0, 0.5, (n, 2))
    outl = rng.random(n) < 0.6
    fd[outl, :2] = rng.uniform(0, 600, (outl.sum(), 2))
    matches = np.stack([np.arange(n), np.arange(n)], 1)
    inl, H = verify_affine(fq, fd, matches, threshold=5.0)
    assert H.shape == (3, 3)
    np.testing.assert_allclose(H[:2], T, atol=0.05 * np.abs(T).max())
    # oracle: the truly consistent matches are exactly those within the threshold of T
    err = np.linalg.norm(fq[:, :2] @ T[:, :2].T + T[:, 2] - fd[:, :2], axis=1)
    np.testing.assert_array_equal(inl, err < 5.0)


def test_subsampled_hypotheses_and_empty_and_bad_input():
    inl, H = verify_affine(np.zeros((0, 6)), np.zeros((0, 6)), np.zeros((0, 2), int))
    assert inl.shape == (0,) and H is None
    with pytest.raises(ValueError, match="matches must be integer pairs"):
        verify_affine(np.zeros((2, 6)), np.zeros((2, 6)), np.array([[0, 5]]))
    rng = np.random.default_rng(1)
    fq = np.c_[rng.uniform(0, 100, (50, 2)), np.tile([3.0, 0, 0, 3], (50, 1))]
    fd = fq.copy()
    fd[:, :2] += 7
    inl, H = verify_affine(fq, fd, np.stack([np.arange(50)] * 2, 1), max_hypotheses=5)
    assert inl.all() and np.allclose(H[:2, 2], 7)


def test_real_pair_graf(features_of):
    from conftest import shared_path

    from retrieval.rerank.matching import match_descriptors

    d = shared_path("opencv_samples")
    fa, fb = features_of(d / "graf1.png"), features_of(d / "graf3.png")
    m = match_descriptors(fa.descriptors, fb.descriptors, ratio=0.8)
    inl, H = verify_affine(fa.frames, fb.frames, m)
    # graf1 -> graf3 is a homography: an affine approximation holds over the scene with a 15 px tolerance
    assert inl.sum() > 0.5 * len(m)
    assert 0.5 < abs(np.linalg.det(H[:2, :2])) < 1.0


@pytest.mark.parametrize("seed", range(4))
def test_compiled_and_vectorised_hypothesis_scores_are_the_same(seed, monkeypatch):
    """The first step's two forms (compiled for large pairs, vectorised below COMPILED_FROM) give the same counts
    and costs, bit for bit, and so the same verification; checked against a float64 oracle of the counts."""
    from retrieval.rerank import verification as v

    rng = np.random.default_rng(seed)
    n = 700
    fq = np.c_[rng.uniform(0, 1000, (n, 2)), rng.uniform(2, 9, n), np.zeros(n), rng.uniform(-2, 2, n),
               rng.uniform(2, 9, n)]
    T = np.array([[0.9, 0.05, 30.0], [-0.04, 1.1, -12.0]])
    fd = _frames_under(T, fq)
    fd[:, :2] += rng.normal(0, 1.0, (n, 2))
    outl = rng.random(n) < 0.5
    fd[outl, :2] = rng.uniform(0, 1100, (outl.sum(), 2))
    hyp = affine_from_frames(fq[:300], fd[:300]).astype(np.float32)
    hyp[7] = hyp[3]                                       # a tie: the same hypothesis twice
    thr2 = 900.0
    compiled = v.score_hypotheses(hyp, fq[:, :2], fd[:, :2], thr2)
    monkeypatch.setattr(v, "COMPILED_FROM", 10 ** 12)
    vectorised = v.score_hypotheses(hyp, fq[:, :2], fd[:, :2], thr2, block=64)
    np.testing.assert_array_equal(compiled[0], vectorised[0])
    np.testing.assert_array_equal(compiled[1], vectorised[1])
    H = hyp.astype(np.float64)
    e2 = ((np.einsum("hij,nj->hni", H[:, :, :2], fq[:, :2]) + H[:, None, :, 2] - fd[None, :, :2]) ** 2).sum(-1)
    near = np.abs(e2 - thr2) <= 1e-2 * thr2                  # only there may float32 and float64 disagree
    assert (np.abs(compiled[0] - (e2 < thr2).sum(1)) <= near.sum(1)).all()
    assert compiled[0].max() > 0.4 * n                       # the true transform's hypotheses find the inliers
    assert compiled[0][3] == compiled[0][7] and compiled[1][3] == compiled[1][7]
    matches = np.stack([np.arange(n)] * 2, 1)
    slow = v.verify(fq, fd, matches, threshold=30.0)
    monkeypatch.setattr(v, "COMPILED_FROM", 1)
    fast = v.verify(fq, fd, matches, threshold=30.0)
    assert slow.verified and fast.verified and np.array_equal(slow.inlier_mask, fast.inlier_mask)
    np.testing.assert_array_equal(slow.transform, fast.transform)
