"""The compiled table look-up scan against its NumPy reference (Jegou et al. 2012, eq. 23; Gordo et al. 2014 byte tables)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.codes.scan import lut_scan_topk, lut_scan_topk_reference


def _check_valid_topk(tables, codes, D, ids, k, largest=False):
    """Independent float64 oracle: returned distances are the sums of the returned rows and form a top-k."""
    nq, M, _ = tables.shape
    full = tables.astype(np.float64)[:, np.arange(M)[None, :], codes.astype(np.intp)].sum(-1)  # (nq, n)
    n = codes.shape[0]
    kk = min(k, n)
    for q in range(nq):
        got = ids[q, :kk]
        assert len(set(got.tolist())) == kk and np.all(got >= 0)
        np.testing.assert_allclose(D[q, :kk], full[q, got], rtol=1e-5, atol=1e-4)
        key = -full[q] if largest else full[q]
        if kk:
            kth = np.sort(key)[kk - 1]
            assert np.all(key[got] <= kth + 1e-4)
        assert np.all(np.diff(-D[q, :kk] if largest else D[q, :kk]) >= 0)
        assert np.all(ids[q, kk:] == -1)
        assert np.all(np.isinf(D[q, kk:]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 300), M=st.sampled_from([1, 3, 4, 8, 16, 7, 32]),
       k=st.integers(1, 40), wide=st.booleans(), largest=st.booleans(), nq=st.integers(1, 3))
def test_kernel_matches_reference_random(seed, n, M, k, wide, largest, nq):
    rng = np.random.default_rng(seed)
    ksub = 1024 if wide else 256
    dtype = np.uint16 if wide else np.uint8
    tables = rng.standard_normal((nq, M, ksub)).astype(np.float32)
    codes = rng.integers(0, ksub, (n, M)).astype(dtype)
    D, ids = lut_scan_topk(tables, codes, k, largest=largest)
    Dr, idr = lut_scan_topk_reference(tables, codes, k, largest=largest)
    assert D.shape == (nq, k) and ids.dtype == np.int64 and D.dtype == np.float32
    np.testing.assert_allclose(D, Dr, rtol=1e-5, atol=1e-4)
    _check_valid_topk(tables, codes, D, ids, k, largest)
    _check_valid_topk(tables, codes, Dr, idr, k, largest)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 200), M=st.sampled_from([2, 8, 16, 5]),
       k=st.integers(1, 250), wide=st.booleans())
def test_kernel_exact_on_integer_tables_with_ties(seed, n, M, k, wide):
    # small integer tables: sums are exact in float32, many ties; both must break ties by the smaller row
    rng = np.random.default_rng(seed)
    ksub = 300 if wide else 256
    tables = rng.integers(0, 3, (2, M, ksub)).astype(np.float32)
    codes = rng.integers(0, ksub, (n, M)).astype(np.uint16 if wide else np.uint8)
    D, ids = lut_scan_topk(tables, codes, k)
    Dr, idr = lut_scan_topk_reference(tables, codes, k)
    np.testing.assert_array_equal(D, Dr)
    np.testing.assert_array_equal(ids, idr)


def test_hand_computed_toy_case():
    # 2 sub-codes, 4 entries each; row sums: r0 = 1+10 = 11, r1 = 0+20 = 20, r2 = 3+0 = 3
    T = np.array([[1, 0, 3, 9], [0, 10, 20, 30]], dtype=np.float32)
    codes = np.array([[0, 1], [1, 2], [2, 0]], dtype=np.uint8)
    D, ids = lut_scan_topk(T, codes, 4)
    np.testing.assert_array_equal(ids, [[2, 0, 1, -1]])
    np.testing.assert_array_equal(D, [[3, 11, 20, np.inf]])
    D, ids = lut_scan_topk(T, codes, 2, largest=True)
    np.testing.assert_array_equal(ids, [[1, 0]])
    np.testing.assert_array_equal(D, [[20, 11]])


def test_threads_give_identical_results():
    rng = np.random.default_rng(3)
    T = rng.random((9, 16, 256), dtype=np.float32)
    codes = rng.integers(0, 256, (5000, 16)).astype(np.uint8)
    a = lut_scan_topk(T, codes, 20, threads=1)
    b = lut_scan_topk(T, codes, 20, threads=3)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_bad_inputs_are_named():
    T = np.zeros((1, 4, 256), np.float32)
    with pytest.raises(ValueError, match="codes must have shape"):
        lut_scan_topk(T, np.zeros((3, 5), np.uint8), 1)
    with pytest.raises(ValueError, match="uint8 or uint16"):
        lut_scan_topk(T, np.zeros((3, 4), np.int32), 1)
    with pytest.raises(ValueError, match="smaller than ksub=256"):
        lut_scan_topk(T, np.full((3, 4), 300, np.uint16), 1)
    with pytest.raises(ValueError, match="'k' parameter"):
        lut_scan_topk(T, np.zeros((3, 4), np.uint8), 0)
