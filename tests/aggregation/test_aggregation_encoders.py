"""BoW, VLAD and Fisher vectors: hand-computed toys, numpy oracles of eq. 6 / eq. 18, cross-checks against
VLFeat (cyvlfeat) on real RootSIFT-PCA64 descriptors, and the properties of Jegou et al. 2012, sec. III."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import shared_path

from retrieval.aggregation import (
    VLAD,
    BoW,
    FisherVector,
    GMMVocabulary,
    KMeansVocabulary,
    fisher_vector,
    vlad_vector,
)
from retrieval.core.checks import NotFittedError


class _GMM:  # a hand-made mixture, "fitted"
    def __init__(self, w, mu, var):
        self.weights_, self.means_, self.covariances_ = (np.asarray(w, np.float32), np.asarray(mu, np.float32),
                                                         np.asarray(var, np.float32))


def _random_gmm(K, d, seed, sep=1.0):
    rng = np.random.default_rng(seed)
    w = rng.random(K) + 0.5
    return _GMM(w / w.sum(), rng.standard_normal((K, d)) * sep, 0.3 + rng.random((K, d)))


def fisher_oracle(X, w, mu, var, variances=False):
    """Eq. 5-6 written term by term with explicit loops over Gaussians (float64)."""
    X = X.astype(np.float64)
    w, mu, var = w.astype(np.float64), mu.astype(np.float64), var.astype(np.float64)
    T, K = X.shape[0], w.shape[0]
    logp = np.empty((T, K))
    for i in range(K):
        logp[:, i] = (np.log(w[i]) - 0.5 * np.sum(np.log(2 * np.pi * var[i]))
                      - 0.5 * np.sum((X - mu[i]) ** 2 / var[i], axis=1))
    gamma = np.exp(logp - logp.max(1, keepdims=True))
    gamma /= gamma.sum(1, keepdims=True)  # eq. 5
    G = [np.sum(gamma[:, i:i + 1] * (X - mu[i]) / np.sqrt(var[i]), axis=0) / (T * np.sqrt(w[i]))
         for i in range(K)]  # eq. 6
    if variances:
        G += [np.sum(gamma[:, i:i + 1] * ((X - mu[i]) ** 2 / var[i] - 1), axis=0) / (T * np.sqrt(2 * w[i]))
              for i in range(K)]
    return np.concatenate(G)


def vlad_oracle(X, C):
    """Algorithm 1 of Jegou et al. 2012, loop over descriptors."""
    V = np.zeros(C.shape, dtype=np.float64)
    for x in X.astype(np.float64):
        i = np.argmin(((C - x) ** 2).sum(1))
        V[i] += x - C[i]
    return V.ravel()


def rel(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b)


# --- oracles on synthetic data -----------------------------------------------------------------------------
@pytest.mark.parametrize("variances", [False, True])
def test_fisher_matches_eq6_oracle(variances):
    g = _random_gmm(5, 6, 0)
    X = np.random.default_rng(1).standard_normal((200, 6)).astype(np.float32)
    ours = fisher_vector(X, g.weights_, g.means_, g.covariances_, variances=variances)
    assert ours.shape == (5 * 6 * (2 if variances else 1),)
    assert rel(ours, fisher_oracle(X, g.weights_, g.means_, g.covariances_, variances)) < 1e-9


def test_vlad_matches_algorithm1_oracle_and_toy():
    C = np.array([[0.0, 0.0], [10.0, 0.0]], dtype=np.float32)
    X = np.array([[1, 1], [-1, 2], [9, 0], [12, -1]], dtype=np.float32)
    np.testing.assert_allclose(vlad_vector(X, C), [0, 3, 1, -1])
    np.testing.assert_allclose(vlad_vector(X, C, intra_normalize=True), [0, 1, 1 / np.sqrt(2), -1 / np.sqrt(2)])
    rng = np.random.default_rng(0)
    C = rng.standard_normal((7, 5)).astype(np.float32)
    X = rng.standard_normal((300, 5)).astype(np.float32)
    assert rel(vlad_vector(X, C), vlad_oracle(X, C)) < 1e-6


def test_bow_toy_by_hand():
    voc = KMeansVocabulary(3)
    voc.cluster_centers_ = np.array([[0.0], [10.0], [20.0]], dtype=np.float32)
    voc.sigma_ = 1.0
    imgs = [np.array([[0.1], [0.2], [9.0]]), np.array([[1.0], [19.0]]), np.array([[0.0], [11.0], [10.5]])]
    bow = BoW.from_vocabulary(voc, imgs, norm=None)
    # word 0 in all three images -> idf 0 (log 3/3); word 1 in images 0 and 2; word 2 in image 1
    np.testing.assert_allclose(bow.idf_, [0.0, np.log(3 / 2), np.log(3)], rtol=1e-6)
    V = bow.transform(imgs)
    np.testing.assert_allclose(V, [[0, np.log(1.5), 0], [0, 0, np.log(3)], [0, 2 * np.log(1.5), 0]], rtol=1e-6)
    tf = BoW.from_vocabulary(voc, idf=False, norm="l1").transform(imgs)
    np.testing.assert_allclose(tf, [[2 / 3, 1 / 3, 0], [0.5, 0, 0.5], [1 / 3, 2 / 3, 0]], rtol=1e-6)
    sq = BoW.from_vocabulary(voc, idf=False, norm="l2", alpha=0.5).transform(imgs[:1])
    np.testing.assert_allclose(sq, [[np.sqrt(2 / 3), np.sqrt(1 / 3), 0]], rtol=1e-6)


def test_bow_idf_zero_for_word_in_every_image():
    rng = np.random.default_rng(3)
    imgs = [rng.standard_normal((50, 4)).astype(np.float32) for _ in range(6)]
    for im in imgs:
        im[0] = 100.0  # one descriptor far away: its word is shared by every image
    bow = BoW(5, random_state=0).fit(imgs)
    w = bow.term_frequencies([np.full((1, 4), 100.0, np.float32)]).indices[0]
    assert bow.idf_[w] == 0.0
    assert bow.n_documents_ == 6


def test_bow_soft_assignment_and_sparse_output():
    rng = np.random.default_rng(4)
    train = rng.standard_normal((400, 3)).astype(np.float32)
    voc = KMeansVocabulary(8, random_state=0).fit(train)
    imgs = [rng.standard_normal((30, 3)).astype(np.float32) for _ in range(4)]
    soft = BoW.from_vocabulary(voc, imgs[:1] + [imgs[1][:2]], assignment="soft", soft_r=3, sparse=True)
    S = soft.transform(imgs)
    assert sp.issparse(S) and S.dtype == np.float32
    np.testing.assert_allclose(sp.linalg.norm(S, axis=1), 1.0, rtol=1e-5)
    tf = soft.term_frequencies(imgs)
    # soft weights of each descriptor sum to 1: the histogram mass equals the number of descriptors
    np.testing.assert_allclose(np.asarray(tf.sum(1)).ravel(), 30, rtol=1e-5)
    assert (np.diff(tf.indptr) >= np.diff(BoW.from_vocabulary(voc, idf=False).term_frequencies(imgs).indptr)).all()
    dense = BoW.from_vocabulary(voc, imgs[:1] + [imgs[1][:2]], assignment="soft", soft_r=3,
                               sparse=False).transform(imgs)
    np.testing.assert_allclose(S.toarray(), dense, rtol=1e-6)


def test_bow_needs_idf():
    voc = KMeansVocabulary(2)
    voc.cluster_centers_ = np.array([[0.0], [1.0]], np.float32)
    with pytest.raises(NotFittedError, match="fit_idf"):
        BoW.from_vocabulary(voc).transform([np.zeros((1, 1))])


# --- properties --------------------------------------------------------------------------------------------
def _encoders(d=6, seed=0):
    rng = np.random.default_rng(seed)
    train = [rng.standard_normal((300, d)).astype(np.float32) for _ in range(4)]
    return [FisherVector(4, random_state=0).fit(train), FisherVector(4, variances=True, random_state=0).fit(train),
            VLAD(4, random_state=0).fit(train), VLAD(4, intra_normalize=True, random_state=0).fit(train),
            BoW(6, idf=False, random_state=0).fit(train), BoW(6, norm="l1", alpha=0.5, random_state=0).fit(
                [t[:3] for t in train])], rng


def test_unit_norm_empty_images_order_invariance_and_errors():
    encoders, rng = _encoders()
    imgs = [rng.standard_normal((n, 6)).astype(np.float32) for n in (80, 1, 0, 150)]
    for enc in encoders:
        calls = []
        V, empty = enc.transform(imgs, return_empty=True, progress=lambda i, n, c=calls: c.append((i, n)))
        V = V.toarray() if sp.issparse(V) else V
        assert V.dtype == np.float32 and not np.isnan(V).any()
        np.testing.assert_array_equal(empty, [False, False, True, False])
        ord_ = 1 if getattr(enc, "norm", "l2") == "l1" else 2
        nz = np.abs(V).sum(1) > 0
        assert nz.sum() >= 2
        np.testing.assert_allclose(np.linalg.norm(V[nz], ord=ord_, axis=1), 1.0, rtol=1e-5)
        assert np.all(V[2] == 0)
        assert calls[-1] == (4, 4)
        perm = [im[np.random.default_rng(9).permutation(len(im))] for im in imgs]
        Vp = enc.transform(perm)
        np.testing.assert_allclose(Vp.toarray() if sp.issparse(Vp) else Vp, V, atol=1e-6)
        bad = imgs[0].copy()
        bad[5, 2] = np.nan
        with pytest.raises(ValueError, match=r"image 1 \(b.jpg\).*NaN"):
            enc.transform([imgs[0], bad], names=["a.jpg", "b.jpg"])
        with pytest.raises(ValueError, match="list of per-image"):
            enc.transform(imgs[0])


def test_power_normalisation_keeps_signs():
    g = _random_gmm(3, 4, 2)
    X = np.random.default_rng(5).standard_normal((60, 4)).astype(np.float32)
    raw = FisherVector.from_gmm(g, alpha=1.0, normalize=None).transform([X])[0]
    pw = FisherVector.from_gmm(g, alpha=0.5).transform([X])[0]
    np.testing.assert_array_equal(np.sign(pw), np.sign(raw))
    expect = np.sign(raw) * np.sqrt(np.abs(raw))
    np.testing.assert_allclose(pw, expect / np.linalg.norm(expect), rtol=1e-5, atol=1e-7)


def test_fisher_of_gmm_samples_tends_to_zero():
    """Eq. 13: the expected gradient under u_lambda is 0; with the diagonal Fisher information whitening each
    component of G has variance 1/T, so T ||G||^2 / (K d) ~ 1 for well-separated Gaussians."""
    K, d = 8, 32
    g = _random_gmm(K, d, 3, sep=20.0)
    gm = GMMVocabulary(K)
    gm.weights_, gm.means_, gm.covariances_ = g.weights_, g.means_, g.covariances_
    fv = FisherVector.from_gmm(gm, alpha=1.0, normalize=None, variances=True)
    norms = []
    for T in (1000, 20000):
        X = gm.sample(T, random_state=T).astype(np.float32)
        G = fv.transform([X])[0].astype(np.float64)
        norms.append(np.linalg.norm(G))
        assert 0.7 < T * np.sum(G[:K * d] ** 2) / (K * d) < 1.3
        assert 0.7 < T * np.sum(G[K * d:] ** 2) / (K * d) < 1.3
    assert norms[1] < norms[0] / 3
    # data that departs from the model does not vanish
    shifted = gm.sample(20000, random_state=1).astype(np.float32) + 0.5 * np.sqrt(g.covariances_.mean())
    assert np.linalg.norm(fv.transform([shifted])[0]) > 10 * norms[1]


def test_save_load_roundtrip(tmp_path):
    encoders, rng = _encoders()
    imgs = [rng.standard_normal((40, 6)).astype(np.float32) for _ in range(3)]
    for enc in encoders:
        back = type(enc).load(enc.save(tmp_path / type(enc).__name__))
        a, b = enc.transform(imgs), back.transform(imgs)
        np.testing.assert_array_equal(a.toarray() if sp.issparse(a) else a, b.toarray() if sp.issparse(b) else b)


# --- VLFeat cross-checks on real RootSIFT-PCA64 descriptors ------------------------------------------------
@pytest.fixture(scope="module")
def real_descriptors(features_of):
    from retrieval.features import root_sift
    from retrieval.features.pca import LocalPCA

    names = ["100200.jpg", "100201.jpg", "103100.jpg"]
    desc = [root_sift(features_of(shared_path("holidays", "images", n)).descriptors) for n in names]
    pca = LocalPCA(64, random_state=0).fit(np.concatenate(desc))
    return [pca.transform(x).astype(np.float32) for x in desc]


def test_fisher_equals_vlfeat_on_real_descriptors(real_descriptors):
    from cyvlfeat.fisher import fisher

    X = real_descriptors
    gmm = GMMVocabulary(16, max_iter=30, random_state=0).fit(X[0])
    for x in X[1:]:
        ref = fisher(x, gmm.means_, gmm.covariances_, gmm.weights_)  # layout: K*d means, then K*d variances
        Kd = gmm.means_.size
        # VLFeat in single precision accumulates in float32 (~1e-5 relative rounding of its own, means and
        # variances alike); given double-precision input it computes in double, and equals ours to 1e-5 relative
        ref64 = fisher(x.astype(np.float64), gmm.means_.astype(np.float64), gmm.covariances_.astype(np.float64),
                       gmm.weights_.astype(np.float64))
        assert rel(fisher_vector(x, gmm.weights_, gmm.means_, gmm.covariances_), ref64[:Kd]) < 1e-5
        assert rel(fisher_vector(x, gmm.weights_, gmm.means_, gmm.covariances_), ref[:Kd]) < 1e-4
        assert rel(fisher_vector(x, gmm.weights_, gmm.means_, gmm.covariances_, variances=True), ref64) < 1e-5
        assert rel(fisher_vector(x, gmm.weights_, gmm.means_, gmm.covariances_, variances=True), ref) < 1e-4
        ref_i = fisher(x.astype(np.float64), gmm.means_.astype(np.float64), gmm.covariances_.astype(np.float64),
                       gmm.weights_.astype(np.float64), improved=True)  # sqrt then L2
        ours = FisherVector.from_gmm(gmm, variances=True).transform([x])[0]
        assert rel(ours, ref_i) < 1e-5


def test_vlad_equals_vlfeat_on_real_descriptors(real_descriptors):
    from cyvlfeat.vlad import vlad

    X = real_descriptors
    voc = KMeansVocabulary(16, random_state=0).fit(X[0])
    C = voc.cluster_centers_
    for x in X[1:]:
        assign = np.zeros((x.shape[0], 16), np.float32)
        assign[np.arange(x.shape[0]), voc.predict(x)] = 1
        assert rel(vlad_vector(x, C), vlad(x, C, assign, unnormalized=True)) < 1e-5
        ref = vlad(x, C, assign, square_root=True)
        assert rel(VLAD.from_vocabulary(voc).transform([x])[0], ref) < 1e-5
        ref = vlad(x, C, assign, square_root=True, normalize_components=True)
        assert rel(VLAD.from_vocabulary(voc, intra_normalize=True).transform([x])[0], ref) < 1e-5
