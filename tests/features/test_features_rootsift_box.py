"""RootSIFT (hand-computed) and box selection."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from retrieval.features import LocalFeatures, parse_box, root_sift, select_in_box


def test_root_sift_hand_case():
    d = np.array([[1, 0, 3, 0], [0, 0, 0, 0]], np.uint8)
    r = root_sift(d)
    assert r.dtype == np.float32
    np.testing.assert_allclose(r[0], [0.5, 0, np.sqrt(0.75), 0], rtol=1e-6)
    np.testing.assert_array_equal(r[1], 0)
    np.testing.assert_array_equal(d, [[1, 0, 3, 0], [0, 0, 0, 0]])


@settings(max_examples=30, deadline=None)
@given(arrays(np.uint8, st.tuples(st.integers(1, 5), st.just(128)), elements=st.integers(0, 255)))
def test_root_sift_unit_norm_and_hellinger(x):
    r = root_sift(x)
    nz = x.sum(1) > 0
    np.testing.assert_allclose(np.linalg.norm(r[nz], axis=1), 1.0, rtol=1e-5)
    # Euclidean distance^2 between RootSIFT = 2 - 2 * Hellinger kernel of the L1-normalised histograms
    if nz.sum() >= 2:
        a, b = x[nz][0] / x[nz][0].sum(), x[nz][1] / x[nz][1].sum()
        k = np.sqrt(a * b).sum()
        assert np.sum((r[nz][0] - r[nz][1]) ** 2) == pytest.approx(2 - 2 * k, abs=1e-5)


def test_root_sift_rejects_negative_and_bad_shape():
    with pytest.raises(ValueError, match="non-negative"):
        root_sift(np.array([[-1.0, 2.0]]))
    with pytest.raises(ValueError, match="2-d"):
        root_sift(np.zeros(128))


def test_select_in_box_inclusive_bounds():
    frames = np.zeros((5, 6), np.float32)
    frames[:, 0] = [0, 10, 20, 30, 10]
    frames[:, 1] = [0, 10, 20, 30, 31]
    f = LocalFeatures(frames, np.zeros((5, 128), np.uint8), (40, 40))
    np.testing.assert_array_equal(select_in_box(f, "10,10,30,30"), [False, True, True, True, False])
    np.testing.assert_array_equal(select_in_box(frames, (0, 0, 9.9, 100)), [True, False, False, False, False])


def test_parse_box_errors():
    assert parse_box("1, 2, 3,4") == (1.0, 2.0, 3.0, 4.0)
    with pytest.raises(ValueError, match="x1 <= x2"):
        parse_box("5,0,1,1")
    with pytest.raises(ValueError, match="4 finite"):
        parse_box("1,2,3")
    with pytest.raises(ValueError, match="numbers"):
        parse_box("a,b,c,d")
