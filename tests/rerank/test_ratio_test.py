"""The one ratio test (retrieval.rerank.matching.tentative_matches) against a float64 numpy brute force.

Most data are small integers: every squared distance is then an exact integer in float32 too, so the
implementation's matrix-product distances equal the oracle's exactly, true ties occur (nearest = lowest index of
B), and pairs sitting exactly on the ratio boundary occur (``ratio = 0.75``: ``0.75**2`` is exact in binary, so
``d1 == 0.5625 d2`` is a true equality and the strict test must reject it).
"""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.features import root_sift
from retrieval.rerank.matching import match_descriptors, tentative_matches


def oracle(a, b, ratio, mutual=False):
    """Brute force: nearest = first index of the smallest float64 distance; keep when d1 < ratio^2 d2 (strict;
    no second neighbour counts as d2 = inf); mutual = a is the first nearest row of A to its match."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) == 0 or len(b) == 0:
        return []
    d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    out = []
    for i in range(len(a)):
        order = np.argsort(d[i], kind="stable")
        j = int(order[0])
        d1 = d[i, j]
        d2 = d[i, order[1]] if len(b) > 1 else np.inf
        ok = True
        if ratio is not None:
            ok = bool(d1 < (ratio * ratio) * d2)
        if mutual:
            ok = ok and int(np.argmin(d[:, j])) == i
        if ok:
            out.append((i, j))
    return out


def pairs(m):
    return [tuple(int(v) for v in p) for p in m]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("ratio", "mutual"), [(r, m) for r in (0.5, 0.75, 0.8, 0.85, 1.0) for m in (False, True)]
                         + [(None, True)])
def test_integer_descriptors_equal_the_oracle(seed, ratio, mutual):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, (120, 6)).astype(np.float32)
    b = np.concatenate([a[:40], rng.integers(0, 4, (90, 6))]).astype(np.float32)  # duplicates of A, and of B
    want = oracle(a, b, ratio, mutual)
    got = tentative_matches(a, b, ratio=ratio, mutual=mutual)
    assert got.dtype == np.int64 and got.shape == (len(want), 2)
    assert pairs(got) == want
    assert pairs(match_descriptors(a, b, ratio=ratio, mutual=mutual, rootsift=False)) == want


def test_the_data_exercise_ties_and_the_exact_boundary():
    """Guard for the test above: its data hold nearest-neighbour ties and exact ratio-boundary pairs."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, (120, 6)).astype(np.float64)
    b = np.concatenate([a[:40], rng.integers(0, 4, (90, 6))])
    d = np.sort(((a[:, None, :] - b[None]) ** 2).sum(-1), axis=1)
    assert (d[:, 0] == d[:, 1]).sum() >= 20                        # ties for the nearest
    assert (d[:, 0] == 0.5625 * d[:, 1]).sum() >= 1                # exactly on the 0.75 boundary


def test_ratio_boundary_by_hand():
    """1-d: A = [0]; B = [3, -4] -> d1 = 3, d2 = 4: 3 / 4 = 0.75 exactly."""
    a = np.array([[0.0]], np.float32)
    b = np.array([[3.0], [-4.0]], np.float32)
    assert pairs(tentative_matches(a, b, ratio=0.75)) == []                  # equal: rejected (strict)
    assert pairs(tentative_matches(a, b, ratio=np.nextafter(0.75, 1))) == [(0, 0)]
    assert pairs(tentative_matches(a, b, ratio=0.76)) == [(0, 0)]
    m, r = tentative_matches(a, b, ratio=0.76, return_ratios=True)
    assert r.dtype == np.float32 and r.tolist() == [0.75]


def test_ties_duplicates_and_missing_second_neighbour_by_hand():
    a = np.array([[0.0, 0.0], [10.0, 0.0]], np.float32)
    # a[0]: two equally near rows (1 and 2) -> nearest is row 1, ratio 1: rejected by any ratio <= 1
    b = np.array([[5.0, 5.0], [1.0, 0.0], [-1.0, 0.0], [10.0, 0.0]], np.float32)
    assert pairs(tentative_matches(a, b, ratio=1.0)) == [(1, 3)]
    assert pairs(tentative_matches(a, b, ratio=None, mutual=True)) == [(0, 1), (1, 3)]
    # both nearest distances 0 (a duplicated row of B): 0 < ratio * 0 is false -> rejected
    dup = np.array([[0.0, 0.0], [0.0, 0.0], [7.0, 7.0]], np.float32)
    assert pairs(tentative_matches(a[:1], dup, ratio=0.9)) == []
    m, r = tentative_matches(a[:1], dup, ratio=None, mutual=True, return_ratios=True)
    assert pairs(m) == [(0, 0)] and r.tolist() == [1.0]
    # one row in B: no second neighbour, every row of A is kept (ratio 0 reported)
    m, r = tentative_matches(a, b[:1], ratio=0.5, return_ratios=True)
    assert pairs(m) == [(0, 0), (1, 0)] and r.tolist() == [0.0, 0.0]
    # empty sides
    assert tentative_matches(a[:0], b, ratio=0.8).shape == (0, 2)
    assert tentative_matches(a, b[:0], ratio=0.8).shape == (0, 2)


def test_rootsift_descriptors_equal_the_oracle_and_blocks_do_not_matter(monkeypatch):
    """Real-valued RootSIFT (what spatial re-ranking and match_descriptors compare): equal to the float64
    oracle when no pair lies within float32 rounding of the boundary (checked on these data), also when the
    rows of A are processed in several blocks."""
    import retrieval.rerank.matching as M

    rng = np.random.default_rng(5)
    base = rng.integers(0, 256, (150, 128))
    sift_a = base.astype(np.uint8)
    sift_b = np.clip(np.concatenate([base[:80] + rng.integers(-30, 31, (80, 128)), rng.integers(0, 256, (120, 128))]),
                     0, 255).astype(np.uint8)
    a, b = root_sift(sift_a), root_sift(sift_b)
    d = np.sort(((a[:, None, :].astype(np.float64) - b[None]) ** 2).sum(-1), axis=1)
    for ratio in (0.8, 0.85, 0.9):
        margin = np.abs(d[:, 0] - ratio * ratio * d[:, 1]) / d[:, 1]
        assert margin.min() > 1e-4  # no pair within rounding of the boundary: the comparison is meaningful
        want = oracle(a, b, ratio)
        assert len(want) >= 60
        assert pairs(tentative_matches(a, b, ratio=ratio)) == want
        assert pairs(match_descriptors(sift_a, sift_b, ratio=ratio)) == want
        monkeypatch.setattr(M, "_BLOCK", 7)
        assert pairs(tentative_matches(a, b, ratio=ratio)) == want
        monkeypatch.undo()
    assert pairs(match_descriptors(sift_a, sift_b, ratio=0.85, mutual=True)) == oracle(a, b, 0.85, mutual=True)


def test_bad_input_is_refused_with_one_sentence():
    a = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="need a ratio test"):
        tentative_matches(a, a, ratio=None, mutual=False)
    with pytest.raises(ValueError, match="ratio"):
        tentative_matches(a, a, ratio=1.5)
    with pytest.raises(ValueError, match="ratio"):
        tentative_matches(a, a, ratio=0.0)
    with pytest.raises(ValueError, match="differ in dimension: 4 vs 5"):
        tentative_matches(a, np.zeros((2, 5)), ratio=0.8)
    with pytest.raises(ValueError, match="2-d array"):
        tentative_matches(np.zeros(4), a, ratio=0.8)
