"""IVFADC's NumPy path for one query (what a process that has not loaded numba runs) gives the compiled path's
distances and rows bit for bit: every code length's grouping of the sums, the precomputed tables and the tables from
the residual, removed rows, ties (repeated vectors, integer-valued data), padding; and a new process searching a
saved index loads no numba and ranks as this one does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval.search.ivfadc as ivfadc_module
from retrieval.search import IVFADC
from retrieval.search._ivfadc_numpy import smallest_lex, tables_one

ROOT = Path(__file__).resolve().parents[2]


def _data(seed, d, n, integer):
    rng = np.random.default_rng(seed)
    if integer:  # few distinct values: equal distances everywhere, in the coarse and in the PQ stage
        X = rng.integers(-2, 3, (n, d)).astype(np.float32)
    else:
        centers = rng.standard_normal((12, d)).astype(np.float32) * 3
        X = (centers[rng.integers(0, 12, n)] + rng.standard_normal((n, d))).astype(np.float32)
    X[n // 2:n // 2 + 40] = X[:40]  # repeated vectors: identical codes in the same lists
    return X, rng


def _both(ix, q, k, nprobe, monkeypatch):
    out = []
    for loaded in (False, True):
        monkeypatch.setattr(ivfadc_module, "numba_loaded", lambda loaded=loaded: loaded)
        out.append(ix.search(q[None], k, nprobe=nprobe))
    return out


@pytest.mark.parametrize("M", [4, 8, 12, 16])
@pytest.mark.parametrize("precompute", [True, False])
@pytest.mark.parametrize("integer", [False, True])
def test_one_query_ranks_bit_for_bit_as_the_compiled_scan(M, precompute, integer, monkeypatch):
    d = 48
    X, rng = _data(M * 7 + integer, d, 1500, integer)
    ix = IVFADC(nlist=24, M=M, nbits=6, nprobe=5, precompute_table=precompute, n_iter=4, random_state=0).fit(X)
    ix.add(X)
    ix.remove(rng.choice(1500, 200, replace=False))  # removed rows are skipped by both paths
    assert ix.n_removed_ > 0 and ix._use_precomputed() is precompute
    Q = np.concatenate([X[rng.integers(0, 1500, 12)], rng.standard_normal((6, d)).astype(np.float32)])
    for q in Q:
        for k, nprobe in ((10, 5), (300, 24), (1500, 30)):  # padded when k exceeds the live rows or nprobe nlist
            (d1, i1), (d2, i2) = _both(ix, q, k, nprobe, monkeypatch)
            assert d1.tobytes() == d2.tobytes()
            np.testing.assert_array_equal(i1, i2)
    assert (i1 < 0).any()  # the last case was padded


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), nprobe=st.integers(1, 9), k=st.integers(1, 60))
def test_coarse_lists_and_tables_match_the_kernels(seed, nprobe, k):
    """The coarse top-nprobe (float32 key, list number on ties) and the inner-product tables, both paths."""
    from retrieval.codes._pq_kernels import tables_kernel
    from retrieval.search._ivfadc_kernels import coarse_topk
    from retrieval.search._ivfadc_numpy import coarse_topk_one

    rng = np.random.default_rng(seed)
    C = rng.integers(-1, 2, (8, 6)).astype(np.float32)  # repeated centroids: tied lists
    x = rng.integers(-2, 3, 6).astype(np.float32)
    cn = (C ** 2).sum(1, dtype=np.float32)
    dots = (x[None] @ C.T).astype(np.float32)
    xn = (x[None] ** 2).sum(1, dtype=np.float32)
    D = np.empty((1, nprobe), np.float32)
    L = np.empty((1, nprobe), np.int64)
    coarse_topk(dots, cn, xn, D, L)
    v = (cn.astype(np.float64) - 2.0 * dots[0].astype(np.float64)).astype(np.float32)
    d2, l2 = coarse_topk_one(v, xn[0], nprobe)
    assert D[0].tobytes() == d2.tobytes()
    np.testing.assert_array_equal(L[0], l2)
    books = rng.standard_normal((3, 5, 4)).astype(np.float32)
    xq = rng.standard_normal(12).astype(np.float32)
    for l2_tables in (True, False):
        out = np.empty((1, 3, 5), np.float32)
        tables_kernel(xq[None], books, out, l2_tables)
        assert out[0].tobytes() == tables_one(xq, books, l2_tables).tobytes()
    dd = rng.integers(0, 4, 50).astype(np.float32)
    idx = rng.permutation(50).astype(np.int64)
    sd, si = smallest_lex(dd, idx, k)
    ref = sorted(zip(dd.tolist(), idx.tolist(), strict=True))[:k]
    assert list(zip(sd.tolist(), si.tolist(), strict=True))[:len(ref)] == ref
    assert np.isinf(sd[len(ref):]).all() and (si[len(ref):] == -1).all()


def test_a_new_process_searches_a_saved_index_without_numba_and_ranks_alike(tmp_path):
    X, rng = _data(3, 32, 3000, False)
    ix = IVFADC(nlist=32, M=8, nbits=8, nprobe=6, n_iter=4, random_state=0).fit(X)
    ix.add(X)
    ix.save(tmp_path / "ivf")
    ix = IVFADC.load(tmp_path / "ivf")
    Q = rng.standard_normal((5, 32)).astype(np.float32)
    np.save(tmp_path / "q.npy", Q)
    expected = [ix.search(q[None], 20) for q in Q]  # this process has numba loaded: the compiled scan
    code = (
        "import sys, numpy as np\n"
        "from retrieval.search import IVFADC\n"
        f"ix = IVFADC.load({str(tmp_path / 'ivf')!r})\n"
        f"Q = np.load({str(tmp_path / 'q.npy')!r})\n"
        "out = [ix.search(q[None], 20) for q in Q]\n"
        f"np.savez({str(tmp_path / 'out.npz')!r}, D=np.stack([o[0] for o in out]), I=np.stack([o[1] for o in out]))\n"
        "print('numba' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False", "searching a saved IVFADC with one query imported numba"
    got = np.load(tmp_path / "out.npz")
    assert got["D"].tobytes() == np.stack([e[0] for e in expected]).tobytes()
    np.testing.assert_array_equal(got["I"], np.stack([e[1] for e in expected]))
