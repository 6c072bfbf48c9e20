"""verify (the one geometric verification): one-to-one inliers, degenerate models, spread, the decision on real
unrelated pairs (UKBench + Holidays), and spatial re-ranking on top of it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.rerank.verification import DEFAULT_MIN_INLIERS, model_problem, one_to_one, verify


def _frames(xy, a=4.0):
    f = np.zeros((len(xy), 6))
    f[:, :2] = xy
    f[:, 2] = f[:, 5] = a
    return f


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 120), st.integers(1, 30), st.integers(1, 30))
def test_inliers_never_exceed_tentative_and_are_one_to_one(seed, m, nq, nd):
    rng = np.random.default_rng(seed)
    fq = _frames(rng.uniform(0, 200, (nq, 2)), 1 + 5 * rng.random())
    fd = _frames(rng.uniform(0, 200, (nd, 2)), 1 + 5 * rng.random())
    matches = np.stack([rng.integers(0, nq, m), rng.integers(0, nd, m)], axis=1)  # many-to-many, repeats
    v = verify(fq, fd, matches, min_inliers=1)
    assert v.inliers <= v.tentative == m
    assert v.inlier_mask.shape == (m,) and int(v.inlier_mask.sum()) == v.inliers
    inl = matches[v.inlier_mask]
    assert len(np.unique(inl[:, 0])) == len(inl) == len(np.unique(inl[:, 1]))
    assert (v.transform is not None) == v.verified


def test_one_to_one_by_hand():
    matches = np.array([[0, 5], [1, 5], [2, 5], [3, 6], [3, 7]])
    mask = np.array([True, True, True, True, True])
    r = np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    # db 5: the smallest residual is match 1; query 3: match 4 (residual 4 < 5)
    np.testing.assert_array_equal(one_to_one(matches, mask, r), [False, True, False, False, True])


@pytest.mark.parametrize("T, words", [
    (np.array([[1.0, 2.0, 0.0], [0.5, 1.0, 0.0]]), "mirrored, collapsed"),   # rank 1: a line
    (np.array([[-1.0, 0.0, 99.0], [0.0, 1.0, 0.0]]), "mirrored, collapsed"),  # left-right flip
    (np.array([[0.02, 0.0, 0.0], [0.0, 0.02, 0.0]]), "extreme scale"),
    (np.array([[30.0, 0.0, 0.0], [0.0, 30.0, 0.0]]), "extreme scale"),
    (np.array([[4.0, 0.0, 0.0], [0.0, 0.25, 0.0]]), "extreme shear"),        # singular values 4 and 0.25
    (np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [-0.02, 0.0, 1.0]]), "infinity"),  # x = 50 goes to infinity
])
def test_degenerate_models_rejected(T, words):
    assert words in model_problem(T, (0, 0, 99, 99))


def test_sane_models_accepted():
    assert model_problem(np.array([[0.8, -0.1, 40.0], [0.2, 1.1, -15.0]]), (0, 0, 99, 99)) is None
    assert model_problem(np.array([[1.0, 0.1, 3.0], [0.0, 0.9, 1.0], [1e-4, 0.0, 1.0]]), (0, 0, 99, 99)) is None


def test_mirrored_correspondences_do_not_verify():
    """A left-right mirrored copy: points and frames mirrored; every hypothesis has det < 0."""
    rng = np.random.default_rng(3)
    fq = _frames(rng.uniform(0, 300, (60, 2)))
    fq[:, 4] = rng.uniform(-2, 2, 60)
    fd = fq.copy()
    fd[:, 0] = 300 - fq[:, 0]
    fd[:, 2:] = (np.diag([-1.0, 1.0]) @ fq[:, 2:].reshape(-1, 2, 2)).reshape(-1, 4)
    v = verify(fq, fd, np.stack([np.arange(60)] * 2, 1))
    assert not v.verified and v.transform is None and "no sane hypothesis" in v.reason
    ok = verify(fq, fq + [7, 3, 0, 0, 0, 0], np.stack([np.arange(60)] * 2, 1))  # the same points translated
    assert ok.verified and ok.inliers == 60 and np.allclose(ok.transform[:2, 2], [7, 3], atol=1e-6)


def test_clustered_inliers_do_not_verify():
    """30 consistent matches inside a 3 x 3 px patch of a 500 x 500 query region: not spread."""
    rng = np.random.default_rng(4)
    xy = np.r_[rng.uniform(100, 103, (30, 2)), [[0, 0], [500, 500]]]
    fq = _frames(xy)
    fd = fq + [20, 10, 0, 0, 0, 0]
    v = verify(fq, fd, np.stack([np.arange(30)] * 2, 1))
    assert not v.verified and v.sane and v.inliers == 30 and "not spread" in v.reason


def test_bad_input():
    with pytest.raises(ValueError, match="matches must be integer pairs"):
        verify(np.zeros((2, 6)), np.zeros((2, 6)), np.array([[0, 5]]))
    with pytest.raises(ValueError, match="min_inliers"):
        verify(np.zeros((2, 6)), np.zeros((2, 6)), np.zeros((0, 2), int), min_inliers=0)


# --- real unrelated pairs: zero false verifications on a fixed 500-pair sample --------------------------------

def _sample_images(shared_path):
    from retrieval.bench.verify import holidays_groups, ukbench_groups

    up, ug = ukbench_groups(shared_path("real", "ukbench400"))
    hp, hg = holidays_groups(shared_path("real", "holidays805"))
    rng = np.random.default_rng(2024)
    sets = []
    for paths, groups, n_groups in ((up, ug, 15), (hp, hg, 25)):
        chosen = rng.choice(np.unique(groups), size=n_groups, replace=False)
        idx = np.flatnonzero(np.isin(groups, chosen))[:60]
        sets.append(([paths[i] for i in idx], groups[idx]))
    return sets


def test_no_false_verification_on_500_unrelated_pairs(features_of):
    from conftest import shared_path

    from retrieval.bench.verify import pair_evidence, unrelated_pairs

    evid, n = [], 0
    for k, (paths, groups) in enumerate(_sample_images(shared_path)):
        feats = [features_of(p, detector="hesaff", max_side=1024) for p in paths]
        pairs = unrelated_pairs(groups, 250, random_state=k)
        assert np.all(groups[pairs[:, 0]] != groups[pairs[:, 1]])
        e = pair_evidence(feats, pairs)["evidence"]
        evid.append(e)
        n += len(pairs)
    e = np.concatenate(evid)
    assert n == 500
    assert int((e >= DEFAULT_MIN_INLIERS).sum()) == 0, np.sort(e)[-10:]


def test_spatial_rerank_verified_first_with_boxes():
    """Hits whose features are a translated copy of the query verify (box = the query box moved); hits with
    shuffled positions do not (no box), and keep their first-stage order after the verified ones."""
    from retrieval.engine.hits import Hit
    from retrieval.features.types import LocalFeatures
    from retrieval.rerank.verifier import Verifier

    rng = np.random.default_rng(5)
    n = 200
    desc = (rng.random((n, 128)) * 255).astype(np.uint8)
    fq = _frames(rng.uniform(0, 400, (n, 2))).astype(np.float32)
    query = LocalFeatures(fq, desc, (400, 400))
    moved = fq.copy()
    moved[:, :2] += [30, 20]
    shuffled = fq.copy()
    shuffled[:, :2] = rng.uniform(0, 400, (n, 2))
    half = fq.copy()
    half[n // 2:, :2] = rng.uniform(0, 400, (n - n // 2, 2))
    db = {1: LocalFeatures(shuffled, desc, (400, 400)), 2: LocalFeatures(half, desc, (400, 400)),
          3: LocalFeatures(moved, desc, (500, 500)), 4: LocalFeatures(shuffled, desc, (400, 400))}
    hits = [Hit(1, 0.9), Hit(2, 0.8), Hit(3, 0.7), Hit(4, 0.6), Hit(5, 0.5)]
    out = Verifier(ratio=0.85).rerank(hits, query, (0, 0, 399, 399), db.__getitem__, shortlist=4)
    assert [h.id for h in out] == [3, 2, 1, 4, 5]
    assert out[0].inliers == n and out[0].verified and np.allclose(out[0].box, (30, 20, 429, 419))
    assert out[1].verified and n // 2 <= out[1].inliers < n
    assert not out[2].verified and out[2].box is None and not out[3].verified


def test_spatial_rerank_cache_reads_each_image_once_and_changes_nothing():
    """With a verification cache, a second re-ranking of the same hits reads no stored features and gives the
    same order, inliers and boxes as re-ranking without a cache; a budget too small for one image keeps nothing
    and still gives the same result."""
    from retrieval.core.cache import BytesLRU
    from retrieval.engine.hits import Hit
    from retrieval.features.types import LocalFeatures
    from retrieval.rerank.verifier import Verifier

    rng = np.random.default_rng(6)
    n = 150
    desc = (rng.random((n, 128)) * 255).astype(np.uint8)
    fq = _frames(rng.uniform(0, 400, (n, 2))).astype(np.float32)
    query = LocalFeatures(fq, desc, (400, 400))
    db = {}
    for i, shift in enumerate([(10, 5), None, (40, -3), None], start=1):
        f = fq.copy()
        if shift is None:
            f[:, :2] = rng.uniform(0, 400, (n, 2))
        else:
            f[:, :2] += shift
        db[i] = LocalFeatures(f, desc, (480, 480))
    reads = []

    def get_features(i):
        reads.append(i)
        return db[i]

    def ranked(cache):
        hits = [Hit(i, 1.0 - 0.1 * i) for i in db]
        out = Verifier(ratio=0.85).rerank(hits, query, (0, 0, 399, 399), get_features, shortlist=4, cache=cache)
        return [(h.id, h.inliers, h.verified, None if h.box is None else tuple(np.round(h.box, 6))) for h in out]

    plain = ranked(None)
    assert [r[0] for r in plain] == [1, 3, 2, 4] and plain[0][2] and plain[1][2] and not plain[2][2]
    cache = BytesLRU(1 << 30)
    reads.clear()
    assert ranked(cache) == plain and sorted(reads) == [1, 2, 3, 4]
    reads.clear()
    assert ranked(cache) == plain and reads == []   # all four came from the cache
    assert cache.hits == 4 and len(cache) == 4
    tiny = BytesLRU(1000)   # smaller than one image's frames and descriptions
    reads.clear()
    assert ranked(tiny) == plain and ranked(tiny) == plain and len(reads) == 8 and len(tiny) == 0


@pytest.mark.parametrize("query_features", [0, 500])
def test_no_false_verification_on_500_unrelated_pairs_with_match_cells(features_of, query_features):
    """Also with the query side of each pair cut to its 500 largest features (search.verify_query_features)."""
    from conftest import shared_path

    from retrieval.bench.verify import pair_evidence, unrelated_pairs
    from retrieval.engine.object.backend import train_cells

    sets = [([features_of(p, detector="hesaff", max_side=1024) for p in paths], groups)
            for paths, groups in _sample_images(shared_path)]
    cells = train_cells([f for feats, _ in sets for f in feats], True, 0)
    evid, probed = [], 0
    for k, (feats, groups) in enumerate(sets):
        out = pair_evidence(feats, unrelated_pairs(groups, 250, random_state=k), cells=cells,
                            query_features=query_features)
        evid.append(out["evidence"])
        probed += int(out["probed"].sum())
    e = np.concatenate(evid)
    if query_features:
        assert sum(len(f) > query_features for feats, _ in sets for f in feats) >= 20   # the cap cut query sides
    else:
        assert probed >= 5               # UKBench pairs past 1,000,000 comparisons went through the probed test
    assert int((e >= DEFAULT_MIN_INLIERS).sum()) == 0, np.sort(e)[-10:]
