"""The one PCA (retrieval.core.pca): numpy oracles of the four PCA rules it replaced (LocalPCA, PCAProjection, the
binary PCA embeddings, the AKM candidate subspace), the sign convention, the whitening rule and the rotation."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.aggregation.large_vocabulary import ApproximateKMeans
from retrieval.aggregation.pca import PCAProjection
from retrieval.codes.binary_embeddings import PCAE, PCAEITQ, PCAERR, random_orthogonal
from retrieval.core.pca import fit_pca, random_rotation, whitening_scale
from retrieval.features.pca import LocalPCA


def _data(n, D, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((D, D))
    return (rng.standard_normal((n, D)) @ A).astype(np.float32)


def _signed(Vt):
    """Oracle of the sign convention: each row's largest-magnitude entry positive."""
    s = np.sign(Vt[np.arange(len(Vt)), np.abs(Vt).argmax(1)])
    return Vt * np.where(s == 0, 1, s)[:, None]


def _oracle_eigh(X, k):
    """The rule of the old LocalPCA / PCAProjection (n >= D) / binary PCA (n >= D): eigh of the n-1 covariance."""
    X = X.astype(np.float64)
    mean = X.mean(0)
    w, V = np.linalg.eigh(np.cov(X.T))
    order = np.argsort(w)[::-1][:k]
    return mean, _signed(V[:, order].T), np.maximum(w[order], 0)


def _oracle_svd(X, k):
    """The rule of the old PCAProjection / binary PCA when n < D: thin SVD of the centred data."""
    X = X.astype(np.float64)
    mean = X.mean(0)
    _, s, Vt = np.linalg.svd(X - mean, full_matrices=False)
    return mean, _signed(Vt[:k]), (s**2 / (len(X) - 1))[:k]


@pytest.mark.parametrize(("n", "D", "k"), [(500, 12, 5), (9, 20, 6)])
def test_fit_pca_matches_oracles(n, D, k):
    X = _data(n, D)
    basis = fit_pca(X, k)
    mean, Vt, var = (_oracle_eigh if n >= D else _oracle_svd)(X, k)
    assert basis.solver == ("eigh" if n >= D else "svd")
    np.testing.assert_allclose(basis.mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(basis.components, Vt, atol=1e-8)
    np.testing.assert_allclose(basis.variances, var, rtol=1e-8)
    np.testing.assert_allclose(basis.components @ basis.components.T, np.eye(k), atol=1e-10)


def test_every_pca_user_reproduces_its_old_rule():
    X = _data(800, 16, seed=1)
    mean, Vt, var = _oracle_eigh(X, 6)
    lp = LocalPCA(6).fit(X)
    np.testing.assert_allclose(lp.components_, Vt, atol=1e-6)
    np.testing.assert_allclose(lp.explained_variance_, var, rtol=1e-5)
    np.testing.assert_allclose(lp.mean_, mean, rtol=1e-6, atol=1e-6)
    pp = PCAProjection(6, svd_solver="full").fit(X)
    np.testing.assert_allclose(pp.components_, Vt, atol=1e-6)
    pe = PCAE(6).fit(X)
    np.testing.assert_allclose(pe.components_, Vt.T, atol=1e-6)
    # AKM's old subspace had no sign convention: same axes up to sign (distances in the subspace are unchanged)
    akm = ApproximateKMeans.from_centers(X, n_coarse=4, n_components=6, random_state=0)
    np.testing.assert_allclose(np.abs(akm.components_.T @ Vt.T), np.eye(6), atol=1e-5)
    np.testing.assert_allclose(akm.components_.T, Vt, atol=1e-6)


def test_signs_are_deterministic_and_positive_at_largest_entry():
    X = _data(300, 10, seed=2)
    a = fit_pca(X, 4).components
    b = fit_pca(X[::-1], 4).components                       # same data, rows reversed
    np.testing.assert_allclose(a, b, atol=1e-10)
    assert np.all(a[np.arange(4), np.abs(a).argmax(1)] > 0)


def test_fewer_samples_than_axes_completes_an_orthonormal_basis():
    X = _data(4, 10, seed=3)
    basis = fit_pca(X, 8)
    C = basis.components
    np.testing.assert_allclose(C @ C.T, np.eye(8), atol=1e-10)
    assert np.all(basis.variances[4:] == 0) and basis.variances[0] > 0
    np.testing.assert_allclose(PCAE(8).fit(X).components_, C.T, atol=1e-6)


def test_randomized_solver_matches_full_on_dominant_axes():
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((400, 30)) * np.r_[np.linspace(10, 5, 5), np.full(25, 0.1)]).astype(np.float32)
    full = fit_pca(X, 5)
    rand = fit_pca(X, 5, solver="randomized", random_state=0)
    assert rand.solver == "randomized"
    np.testing.assert_allclose(rand.components, full.components, atol=1e-4)
    np.testing.assert_allclose(rand.variances, full.variances, rtol=1e-6)


def test_whitening_rule_by_hand_and_identity_covariance():
    np.testing.assert_allclose(whitening_scale([4.0, 1.0, 0.0], 0.25), [1 / np.sqrt(5), 1 / np.sqrt(2), 1.0])
    np.testing.assert_array_equal(whitening_scale([2.0, 0.0], 0.0), [1 / np.sqrt(2.0), 0.0])
    X = _data(2000, 8, seed=5)
    for model in (LocalPCA(5, whiten=True, eps=0.0), PCAProjection(5, whiten=True, whiten_eps=0.0)):
        Y = model.fit(X).transform(X).astype(np.float64)
        np.testing.assert_allclose(np.cov(Y.T), np.eye(5), atol=1e-3)
    lp = LocalPCA(5, whiten=True, eps=0.1).fit(X)
    var = lp.explained_variance_.astype(np.float64)
    plain = LocalPCA(5).fit(X).transform(X[:3]).astype(np.float64)
    np.testing.assert_allclose(lp.transform(X[:3]), plain / np.sqrt(var + 0.1 * var[0]), rtol=1e-5)
    np.testing.assert_allclose(lp.inverse_transform(lp.transform(X[:3])), LocalPCA(5).fit(X).inverse_transform(
        plain), rtol=1e-4, atol=1e-3)


def test_random_rotation_is_the_polar_rule_and_shared():
    R = random_rotation(6, 11)
    G = np.random.default_rng(11).standard_normal((6, 6))
    U, _, Vt = np.linalg.svd(G)
    np.testing.assert_allclose(R, U @ Vt, atol=1e-12)
    # the orthogonal polar factor: G = R P with P symmetric positive definite
    P = R.T @ G
    np.testing.assert_allclose(P, P.T, atol=1e-10)
    assert np.linalg.eigvalsh((P + P.T) / 2).min() > 0
    np.testing.assert_allclose(R @ R.T, np.eye(6), atol=1e-12)
    np.testing.assert_array_equal(random_orthogonal(6, np.random.default_rng(11)), R)
    # PCAE-RR draws its rotation first from its generator, PCAProjection after the PCA
    X = _data(500, 12, seed=6)
    rr = PCAERR(8, random_state=3).fit(X)
    np.testing.assert_allclose(rr.rotation_, random_rotation(8, 3), atol=1e-7)
    np.testing.assert_allclose(rr.components_, PCAE(8).fit(X).components_ @ rr.rotation_, atol=1e-5)
    pp = PCAProjection(8, rotation=True, random_state=3).fit(X)
    np.testing.assert_allclose(pp.rotation_, random_rotation(8, 3), atol=1e-7)
    itq = PCAEITQ(8, n_iter=0, random_state=3).fit(X)        # no iteration: the initial random rotation
    np.testing.assert_allclose(itq.rotation_, random_rotation(8, 3), atol=1e-7)


def test_fit_pca_rejects_bad_input():
    with pytest.raises(ValueError, match="n_components"):
        fit_pca(np.ones((5, 3)), 4)
    with pytest.raises(ValueError, match="2-d"):
        fit_pca(np.ones(5), 1)
    with pytest.raises(ValueError, match="solver"):
        fit_pca(np.ones((5, 3)), 2, solver="arpack")
    with pytest.raises(ValueError, match="'n'"):
        random_rotation(0)
