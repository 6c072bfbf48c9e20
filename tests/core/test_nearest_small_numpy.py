"""The nearest-centre search of a few low-dimensional rows (PQ sub-spaces) in a process without numba gives the
compiled pass's labels and distances bit for bit, ties to the lowest index; PQ encoding and IVFADC adding of one
vector are the same through both."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval.core.nearest as nearest_module
from retrieval.core._nearest_small import nearest_small
from retrieval.core.nearest import nearest_centers, nearest_small_numpy, sq_norms


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 100_000), n=st.integers(1, 64), d=st.integers(1, 32), K=st.integers(1, 300),
       integer=st.booleans())
def test_same_labels_and_distances_as_the_compiled_pass(seed, n, d, K, integer):
    rng = np.random.default_rng(seed)
    if integer:   # equal distances to several centres: the lowest index wins on both paths
        X = rng.integers(-2, 3, (n, d)).astype(np.float32)
        C = rng.integers(-1, 2, (K, d)).astype(np.float32)
    else:
        X = rng.standard_normal((n, d)).astype(np.float32)
        C = rng.standard_normal((K, d)).astype(np.float32)
    cs = sq_norms(C)
    labels = np.empty(n, np.int64)
    dist = np.empty(n, np.float32)
    nearest_small(X, np.ascontiguousarray(C.T), cs, labels, dist)
    l2, d2 = nearest_small_numpy(X, np.ascontiguousarray(C.T), cs)
    np.testing.assert_array_equal(labels, l2)
    assert dist.tobytes() == d2.tobytes()


def test_encoding_one_vector_is_the_same_without_numba(monkeypatch):
    from retrieval.search import IVFADC

    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 32)).astype(np.float32)
    ix = IVFADC(nlist=16, M=8, nbits=8, nprobe=4, n_iter=3, random_state=0).fit(X)
    codes = {}
    for loaded in (True, False):
        monkeypatch.setattr(nearest_module, "numba_loaded", lambda loaded=loaded: loaded)
        codes[loaded] = (ix.pq_.encode(X[:5]), nearest_centers(X[:3, :4], X[100:400, :4]))
    np.testing.assert_array_equal(codes[True][0], codes[False][0])
    for a, b in zip(codes[True][1], codes[False][1], strict=True):
        assert a.tobytes() == b.tobytes()


def test_many_rows_keep_the_compiled_pass(monkeypatch):
    """Past 64 rows the compiled pass is used even without numba loaded (training, batch encoding)."""
    calls = []
    monkeypatch.setattr(nearest_module, "numba_loaded", lambda: False)
    monkeypatch.setattr(nearest_module, "nearest_small_numpy", lambda *a: calls.append(a) or (None, None))
    X = np.zeros((65, 4), np.float32)
    nearest_centers(X, np.ones((3, 4), np.float32))
    assert calls == []
    nearest_centers(X[:64], np.ones((3, 4), np.float32))
    assert len(calls) == 1
    with pytest.raises(ValueError):
        nearest_centers(X[:2], np.ones((0, 4), np.float32))
