"""PCAProjection, power and L2 normalisation (Jegou et al. 2012, eq. 7, sec. IV, V-B)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from retrieval.aggregation import PCAProjection, l1_normalize, l2_normalize, power_normalize, random_rotation
from retrieval.core.checks import NotFittedError

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


def test_power_normalize_toy():
    x = np.array([[4.0, -9.0, 0.0, 0.25]], dtype=np.float32)
    np.testing.assert_allclose(power_normalize(x, 0.5), [[2.0, -3.0, 0.0, 0.5]])
    np.testing.assert_allclose(power_normalize(x, 1.0), x)
    np.testing.assert_allclose(power_normalize(np.array([8.0, -27.0]), 1 / 3), [2.0, -3.0])
    assert x[0, 0] == 4.0  # input untouched


@settings(max_examples=40, deadline=None)
@given(arrays(np.float32, (3, 7), elements=finite), st.floats(0.05, 1.0))
def test_power_normalize_keeps_signs_and_order(x, alpha):
    y = power_normalize(x, alpha)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(np.sign(y), np.sign(x))
    # monotone: |x| order preserved
    a, b = np.abs(x).ravel(), np.abs(y).ravel()
    i, j = np.argsort(a, kind="stable")[:-1], np.argsort(a, kind="stable")[1:]
    assert np.all(b[j] >= b[i] - 1e-6 * (1 + b[j]))


def test_power_normalize_rejects_bad_alpha():
    with pytest.raises(ValueError, match="'alpha' parameter of power_normalize"):
        power_normalize(np.ones((1, 2)), 0)
    with pytest.raises(ValueError, match="alpha"):
        power_normalize(np.ones((1, 2)), 1.5)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float32, (4, 9), elements=finite))
def test_l2_normalize_unit_norm_or_zero(x):
    x = x.copy()
    x[1] = 0.0
    y = l2_normalize(x)
    norms = np.linalg.norm(y.astype(np.float64), axis=1)
    for r in range(4):
        if np.any(x[r] != 0):
            assert abs(norms[r] - 1) < 1e-5
        else:
            assert np.all(y[r] == 0)
    assert not np.isnan(y).any()


def test_normalize_sparse_matches_dense():
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((5, 30)) * (rng.random((5, 30)) < 0.2)
    dense[2] = 0
    csr = sp.csr_matrix(dense.astype(np.float32))
    for f in (l2_normalize, l1_normalize, lambda a: power_normalize(a, 0.5)):
        out = f(csr)
        assert sp.issparse(out)
        np.testing.assert_allclose(out.toarray(), f(dense.astype(np.float32)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.abs(l1_normalize(dense)).sum(1)[[0, 1, 3, 4]], 1.0)


def test_random_rotation_is_orthogonal_and_seeded():
    Q = random_rotation(12, 3)
    np.testing.assert_allclose(Q @ Q.T, np.eye(12), atol=1e-12)
    np.testing.assert_array_equal(Q, random_rotation(12, 3))
    assert not np.allclose(Q, random_rotation(12, 4))


def _data(n=300, D=20, seed=0):
    rng = np.random.default_rng(seed)
    scales = np.linspace(5, 0.1, D)
    basis = random_rotation(D, seed + 1)
    return (rng.standard_normal((n, D)) * scales) @ basis.T + 3.0


@pytest.mark.parametrize("n", [300, 12])  # covariance path (n >= D) and thin-SVD path (n < D)
def test_pca_matches_sklearn(n):
    from sklearn.decomposition import PCA

    X = _data(n=n)
    k = 8
    ours = PCAProjection(k).fit(X)
    ref = PCA(k, svd_solver="full").fit(X)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-4)
    # same axes up to sign
    G = ours.components_.astype(np.float64) @ ref.components_.T
    np.testing.assert_allclose(np.abs(np.diag(G)), 1.0, atol=1e-4)
    Y = ours.transform(X)
    assert Y.dtype == np.float32 and Y.shape == (n, k)
    np.testing.assert_allclose(np.abs(Y), np.abs(ref.transform(X)), rtol=1e-3, atol=1e-3)


def test_pca_randomized_solver_close_to_full():
    X = _data(n=400, D=50)
    a = PCAProjection(5, svd_solver="full").fit(X)
    b = PCAProjection(5, svd_solver="randomized", random_state=0).fit(X)
    np.testing.assert_allclose(b.explained_variance_, a.explained_variance_, rtol=1e-3)


def test_pca_whitening_gives_identity_covariance():
    X = _data()
    Y = PCAProjection(6, whiten=True).fit_transform(X).astype(np.float64)
    np.testing.assert_allclose(np.cov(Y, rowvar=False), np.eye(6), atol=1e-3)


def test_pca_renormalize_and_rotation():
    X = _data()
    p = PCAProjection(6, whiten=True, renormalize=True, rotation=True, random_state=0).fit(X)
    Y = p.transform(X)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, atol=1e-5)
    # rotation is applied last: undoing it gives the renormalised, un-rotated projection
    q = PCAProjection(6, whiten=True, renormalize=True).fit(X)
    np.testing.assert_allclose(Y @ p.rotation_, q.transform(X), atol=1e-5)
    # a rotation preserves inner products between outputs
    r = PCAProjection(6, rotation=True, random_state=1).fit(X)
    Yr, Y0 = r.transform(X[:10]), PCAProjection(6).fit(X).transform(X[:10])
    np.testing.assert_allclose(Yr @ Yr.T, Y0 @ Y0.T, rtol=1e-4, atol=1e-3)


def test_pca_inverse_transform_full_rank_roundtrip():
    X = _data(n=100, D=10)
    p = PCAProjection(10, whiten=True, rotation=True, random_state=0).fit(X)
    np.testing.assert_allclose(p.inverse_transform(p.transform(X)), X, atol=1e-3)
    with pytest.raises(ValueError, match="renormalize"):
        PCAProjection(3, renormalize=True).fit(X).inverse_transform(np.zeros((1, 3)))


def test_pca_sparse_input_and_no_mutation():
    X = _data(n=50, D=30)
    X[X < 3] = 0
    before = X.copy()
    p = PCAProjection(5).fit(sp.csr_matrix(X))
    np.testing.assert_allclose(p.transform(sp.csr_matrix(X)), p.transform(X), atol=1e-4)
    np.testing.assert_array_equal(X, before)


def test_pca_errors():
    X = _data(n=10, D=6)
    with pytest.raises(ValueError, match=r"at most min\(n_samples, n_features\)"):
        PCAProjection(7).fit(X)
    with pytest.raises(ValueError, match="'n_components' parameter of PCAProjection"):
        PCAProjection(0).fit(X)
    with pytest.raises(NotFittedError):
        PCAProjection(2).transform(X)
    p = PCAProjection(2).fit(X)
    with pytest.raises(ValueError, match="6 columns"):
        p.transform(np.zeros((2, 5)))
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        PCAProjection(2).fit(bad)


def test_pca_save_load(tmp_path):
    X = _data()
    p = PCAProjection(4, whiten=True, renormalize=True, rotation=True, random_state=5).fit(X)
    path = p.save(tmp_path / "pca")
    q = PCAProjection.load(path)
    assert q.whiten and q.renormalize and q.n_components == 4
    np.testing.assert_array_equal(q.transform(X), p.transform(X))
    p2 = PCAProjection(4).fit(X)
    q2 = PCAProjection.load(p2.save(tmp_path / "pca2.npz"))
    assert q2.rotation_ is None
    np.testing.assert_array_equal(q2.transform(X), p2.transform(X))
