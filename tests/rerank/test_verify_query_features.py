"""The query side of spatial verification capped to its largest features (``search.verify_query_features``): the
features kept are the largest in scale, in their order; the database side keeps all of its features (so each
query feature's ratio test is the one of the uncapped verifier); the ranked list, ``check_many`` and the one-pair
verdict agree."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_path

from retrieval.engine.hits import Hit
from retrieval.features.frames import largest
from retrieval.features.types import LocalFeatures
from retrieval.rerank.verifier import Verifier


def _features(n, seed=0):
    rng = np.random.default_rng(seed)
    frames = np.zeros((n, 6), np.float32)
    frames[:, :2] = rng.uniform(0, 500, (n, 2))
    s = rng.uniform(1, 20, n).astype(np.float32)
    frames[:, 2], frames[:, 5] = s, s * rng.uniform(0.5, 2, n).astype(np.float32)
    return LocalFeatures(frames, rng.integers(0, 255, (n, 128)).astype(np.uint8), (500, 500))


def test_largest_keeps_the_n_largest_scales_in_their_order():
    f = _features(50)
    scale = np.abs(f.frames[:, 2] * f.frames[:, 5] - f.frames[:, 3] * f.frames[:, 4])
    kept = largest(f, 10)
    idx = [int(np.flatnonzero((f.frames == row).all(1))[0]) for row in kept.frames]
    assert idx == sorted(idx)                                    # in their order
    assert sorted(idx) == sorted(np.argsort(-scale)[:10].tolist())  # the 10 largest
    np.testing.assert_array_equal(kept.descriptors, f.descriptors[idx])
    assert largest(f, 0) is f and largest(f, 50) is f and largest(f, 80) is f


def test_ties_keep_the_first_in_order():
    f = _features(6)
    f.frames[:, 2:] = [1, 0, 0, 1]                               # every scale equal
    np.testing.assert_array_equal(largest(f, 3).frames, f.frames[:3])


@pytest.fixture(scope="module")
def pairs(features_of):
    d = shared_path("homogr")
    out = []
    for name in ("boat", "graf", "Eiffel", "adam"):
        a, b = (next(d.glob(f"{name}{s}.*")) for s in "AB")
        out.append((features_of(a, detector="hesaff", max_side=1024), features_of(b, detector="hesaff", max_side=1024)))
    return out


def test_the_cap_is_the_query_side_only_and_every_path_agrees(pairs):
    capped, full = Verifier(query_features=300), Verifier()
    box = (0.0, 0.0, 1e5, 1e5)
    query = pairs[0][0]
    assert len(query) > 300
    dbs = {i: f for i, (_, f) in enumerate(pairs)} | {10 + i: f for i, (f, _) in enumerate(pairs[1:])}
    side = capped.query_side(query)
    assert len(side.descriptors) == 300
    reference = [full.check(full.described(largest(query, 300)), full.described(dbs[i]), box) for i in sorted(dbs)]
    many = capped.check_many(side, sorted(dbs), box, dbs.__getitem__, threads=2)
    assert [(o.verified, o.inliers, o.matches.tobytes()) for o in many] == \
        [(o.verified, o.inliers, o.matches.tobytes()) for o in reference]
    assert int(max(o.matches[:, 1].max() for o in many if len(o.matches))) >= 300   # database indices past the cap
    hits = capped.rerank([Hit(id=i, score=1.0) for i in sorted(dbs)], query, box, dbs.__getitem__,
                         shortlist=len(dbs))
    by_id = {h.id: (h.verified, h.inliers) for h in hits}
    assert by_id == {i: (o.verified, o.inliers) for i, o in zip(sorted(dbs), reference, strict=True)}
    assert by_id[0][0]   # the true pair still verifies on 300 of its query features
