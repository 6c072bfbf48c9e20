"""KMeansVocabulary and GMMVocabulary (Jegou et al. 2012, sec. III-A/B; Philbin et al. 2008 soft assignment)."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.aggregation import GMMVocabulary, KMeansVocabulary
from retrieval.core.checks import NotFittedError
from retrieval.core.persistence import load_estimator


def _blobs(n=3000, K=6, d=5, seed=0, spread=6.0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((K, d)) * spread
    lab = rng.integers(0, K, n)
    scales = 0.3 + rng.random(d)
    return (centers[lab] + rng.standard_normal((n, d)) * scales).astype(np.float32), centers, lab


def test_kmeans_recovers_separated_blobs_and_is_seeded():
    X, centers, _ = _blobs()
    a = KMeansVocabulary(6, random_state=0).fit(X)
    b = KMeansVocabulary(6, random_state=0).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.cluster_centers_.dtype == np.float32 and a.cluster_centers_.shape == (6, 5)
    # every true centre has a learnt word nearby
    d = np.linalg.norm(centers[:, None, :] - a.cluster_centers_[None], axis=2)
    assert d.min(axis=1).max() < 0.3
    # inertia_ equals the brute-force quantisation error
    lab = a.predict(X)
    err = ((X - a.cluster_centers_[lab]) ** 2).sum()
    assert abs(a.inertia_ - err) / err < 1e-4


@pytest.mark.parametrize("algorithm", ["elkan", "ann", "lloyd"])
def test_kmeans_algorithms_reach_similar_energy(algorithm):
    X, _, _ = _blobs(n=2000, K=10, d=8, spread=1.0)
    ref = KMeansVocabulary(10, algorithm="elkan", random_state=1, n_init=2).fit(X)
    km = KMeansVocabulary(10, algorithm=algorithm, random_state=1, n_init=2).fit(X)
    assert km.inertia_ < 1.1 * ref.inertia_


def test_predict_matches_brute_force():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((500, 16)).astype(np.float32)
    km = KMeansVocabulary(40, random_state=0).fit(X)
    Q = rng.standard_normal((300, 16)).astype(np.float32)
    d = ((Q[:, None, :].astype(np.float64) - km.cluster_centers_[None]) ** 2).sum(2)
    np.testing.assert_array_equal(km.predict(Q), d.argmin(1))


def test_soft_assign_toy():
    km = KMeansVocabulary(3)
    km.cluster_centers_ = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]], dtype=np.float32)
    km.sigma_ = 1.0
    km.n_features_in_ = 2
    labels, w = km.soft_assign(np.array([[0.25, 0.0]]), r=2, sigma=0.5, normalize=False)
    np.testing.assert_array_equal(labels, [[0, 1]])
    # exp(-d^2 / (2 sigma^2)) with d = 0.25 and 0.75
    np.testing.assert_allclose(w, [[np.exp(-0.0625 / 0.5), np.exp(-0.5625 / 0.5)]], rtol=1e-6)
    labels, w = km.soft_assign(np.array([[0.25, 0.0]]), r=3, sigma=0.5)
    raw = np.exp(-np.array([0.0625, 0.5625, 9.0625]) / 0.5)
    np.testing.assert_allclose(w[0], raw / raw.sum(), rtol=1e-5)


def test_kmeans_errors_and_persistence(tmp_path):
    X, _, _ = _blobs(n=50)
    with pytest.raises(ValueError, match="'n_clusters' parameter of KMeansVocabulary"):
        KMeansVocabulary(0).fit(X)
    with pytest.raises(ValueError, match="at most the number of training descriptors"):
        KMeansVocabulary(60).fit(X)
    with pytest.raises(NotFittedError):
        KMeansVocabulary(3).predict(X)
    bad = X.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        KMeansVocabulary(3).fit(bad)
    km = KMeansVocabulary(4, random_state=0).fit(X)
    with pytest.raises(ValueError, match="5 columns"):
        km.predict(np.zeros((2, 4)))
    back = load_estimator(km.save(tmp_path / "voc"))
    assert isinstance(back, KMeansVocabulary) and back.sigma_ == km.sigma_
    np.testing.assert_array_equal(back.predict(X), km.predict(X))


def test_kmeans_accepts_list_of_images_and_max_samples():
    X, _, _ = _blobs(n=1000)
    km = KMeansVocabulary(6, max_samples=400, random_state=0).fit([X[:300], X[300:300], X[300:]])
    assert km.cluster_centers_.shape == (6, 5)


def test_gmm_matches_sklearn_likelihood():
    from sklearn.mixture import GaussianMixture

    X, _, _ = _blobs(n=4000, K=5, d=4, spread=3.0, seed=3)
    g = GMMVocabulary(5, random_state=0).fit(X)
    ref = GaussianMixture(5, covariance_type="diag", n_init=3, random_state=0).fit(X)
    assert g.weights_.shape == (5,) and g.means_.shape == (5, 4) and g.covariances_.shape == (5, 4)
    assert abs(g.weights_.sum() - 1) < 1e-6
    assert g.score(X) > ref.score(X) - 1e-3
    # our log-likelihood formula agrees with scikit-learn's for the same parameters
    ref2 = GaussianMixture(5, covariance_type="diag")
    ref2.weights_, ref2.means_, ref2.covariances_ = (g.weights_.astype(float), g.means_.astype(float),
                                                     g.covariances_.astype(float))
    ref2.precisions_cholesky_ = 1 / np.sqrt(ref2.covariances_)
    np.testing.assert_allclose(g.score_samples(X[:50]), ref2.score_samples(X[:50]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g.predict_proba(X[:50]), ref2.predict_proba(X[:50]), atol=1e-5)


def test_gmm_variance_floor_and_seeding(tmp_path):
    X, _, _ = _blobs(n=600, K=3, d=3)
    X[:200, 2] = 1.0  # a degenerate dimension in part of the data
    g = GMMVocabulary(3, variance_floor=1e-2, random_state=4).fit(X)
    floor = 1e-2 * X.var(axis=0, dtype=np.float64)
    assert np.all(g.covariances_ >= floor[None, :] * (1 - 1e-5))
    h = GMMVocabulary(3, variance_floor=1e-2, random_state=4).fit(X)
    np.testing.assert_array_equal(g.means_, h.means_)
    back = GMMVocabulary.load(g.save(tmp_path / "gmm.npz"))
    np.testing.assert_array_equal(back.covariances_, g.covariances_)
    assert back.n_iter_ == g.n_iter_


def test_gmm_errors():
    with pytest.raises(ValueError, match="'n_components' parameter of GMMVocabulary"):
        GMMVocabulary(0).fit(np.zeros((5, 2)))
    with pytest.raises(ValueError, match="at most the number of training descriptors"):
        GMMVocabulary(10).fit(np.random.default_rng(0).standard_normal((5, 2)))
    with pytest.raises(NotFittedError):
        GMMVocabulary(2).predict_proba(np.zeros((1, 2)))
