"""select_dim (Jegou et al. 2012, eq. 27-28): projection error against a numpy oracle, the trade-off, validation."""

import numpy as np
import pytest

from retrieval.codes.dim_select import select_dim


@pytest.fixture(scope="module")
def spectrum_data():
    rng = np.random.default_rng(0)
    D = 64
    scales = 1.0 / np.arange(1, D + 1) ** 0.7
    basis = np.linalg.qr(rng.standard_normal((D, D)))[0]
    X = ((rng.standard_normal((900, D)) * scales) @ basis.T + 2.0).astype(np.float32)
    return X


def test_errors_follow_the_tradeoff_and_minimum_is_interior(spectrum_data):
    X = spectrum_data
    r = select_dim(X[:600], 2, X_eval=X[600:], n_iter=5, random_state=0)
    assert r.M == 2 and r.nbits == 8 and np.all(r.dims % 2 == 0)
    assert np.all(np.diff(r.projection_error) < 0)          # more components, less projection error
    assert r.quantization_error[-1] > r.quantization_error[0]  # more dimensions for the same bits: coarser
    assert r.projection_error[-1] < 1e-4                      # D' = D keeps everything
    np.testing.assert_allclose(r.total_error, r.projection_error + r.quantization_error)
    assert r.dims[0] < r.best_dim < r.dims[-1]                 # Fig. 4: interior minimum
    assert r.total_error[list(r.dims).index(r.best_dim)] == r.total_error.min()


def test_projection_error_matches_numpy_oracle(spectrum_data):
    X = spectrum_data
    L, E = X[:600], X[600:]
    r = select_dim(L, 2, X_eval=E, candidates=[8, 20], n_iter=2, random_state=0)
    mean = L.mean(0)
    _, _, vt = np.linalg.svd(L - mean, full_matrices=False)
    for c, ep in zip([8, 20], r.projection_error, strict=True):
        P = vt[:c]
        resid = (E - mean) - (E - mean) @ P.T @ P
        np.testing.assert_allclose(ep, (resid.astype(np.float64) ** 2).sum(1).mean(), rtol=1e-3)


def test_validation(spectrum_data):
    with pytest.raises(ValueError, match="multiple of M=2"):
        select_dim(spectrum_data, 2, candidates=[7])
    with pytest.raises(ValueError, match="at least 256 learning vectors"):
        select_dim(spectrum_data[:200], 2)
    with pytest.raises(ValueError, match="whole number"):
        select_dim(spectrum_data, 1, nbits=3)


def test_chosen_projection_is_pca_plus_rotation(spectrum_data):
    r = select_dim(spectrum_data, 2, candidates=[8, 16], n_iter=2, random_state=0)
    proj = r.make_projection(random_state=0).fit(spectrum_data)
    Z = proj.transform(spectrum_data)
    assert Z.shape == (900, r.best_dim) and proj.rotation_ is not None
    R = proj.rotation_.astype(np.float64)
    np.testing.assert_allclose(R @ R.T, np.eye(r.best_dim), atol=1e-5)
