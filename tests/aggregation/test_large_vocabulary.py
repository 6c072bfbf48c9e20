"""Approximate k-means vocabulary: exact when every cell is probed, agreement with brute force, soft assignment."""

import numpy as np
import pytest

from retrieval.aggregation.large_vocabulary import ApproximateKMeans, exact_nearest


def blobs(rng, n, k=60, d=24):
    centers = rng.normal(size=(k, d)).astype(np.float32)
    return (centers[rng.integers(0, k, n)] + 0.35 * rng.normal(size=(n, d))).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return blobs(rng, 6000), blobs(np.random.default_rng(1), 800)


def test_exhaustive_probe_is_exact(data):
    X, Xq = data
    v = ApproximateKMeans(300, n_iter=2, nprobe=1000, n_candidates=300, n_components=24, random_state=0).fit(X)
    lab, _ = exact_nearest(Xq, v.cluster_centers_)
    np.testing.assert_array_equal(v.predict(Xq), lab)
    d, w = v.kneighbors(Xq, 3)
    full = ((Xq[:, None, :] - v.cluster_centers_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(w, np.argsort(full, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(d, np.sort(full, axis=1)[:, :3], rtol=1e-4, atol=1e-4)


def test_default_structure_agrees_with_brute_force(data):
    X, Xq = data
    v = ApproximateKMeans(300, n_iter=4, random_state=0).fit(X)
    lab, _ = exact_nearest(Xq, v.cluster_centers_)
    agree = (v.predict(Xq) == lab).mean()
    assert agree >= 0.9, agree
    # training lowers the quantisation error compared with the random initial words
    v0 = ApproximateKMeans(300, n_iter=0, random_state=0).fit(X)
    assert v.inertia_ < 0.9 * v0.inertia_
    # cells are contiguous ranges of words covering all of them
    assert v.cell_indptr_[0] == 0 and v.cell_indptr_[-1] == 300 and np.all(np.diff(v.cell_indptr_) >= 0)


def test_recall_does_not_drop_with_nprobe(data):
    X, Xq = data
    v = ApproximateKMeans(300, n_iter=2, random_state=0).fit(X)
    lab, _ = exact_nearest(Xq, v.cluster_centers_)
    rates = []
    for p in (1, 2, 4, 8, 32):
        v.nprobe = p
        rates.append((v.predict(Xq) == lab).mean())
    assert all(b >= a for a, b in zip(rates, rates[1:], strict=False)), rates


def test_soft_assignment_and_persistence(data, tmp_path):
    X, Xq = data
    v = ApproximateKMeans(200, n_iter=2, random_state=3).fit(X)
    w, wt = v.soft_assign(Xq, r=3)
    assert w.shape == (len(Xq), 3) and wt.dtype == np.float32
    np.testing.assert_allclose(wt.sum(1), 1.0, rtol=1e-5)
    assert np.all(np.diff(wt, axis=1) <= 1e-7)                     # nearest word has the largest weight
    np.testing.assert_array_equal(w[:, 0], v.predict(Xq))
    d, _ = v.kneighbors(Xq, 3)
    e = np.exp(-(d - d[:, :1]) / (2 * v.sigma_ ** 2))
    np.testing.assert_allclose(wt, e / e.sum(1, keepdims=True), rtol=1e-5)
    path = v.save(tmp_path / "voc")
    back = ApproximateKMeans.load(path)
    np.testing.assert_array_equal(back.predict(Xq), v.predict(Xq))
    assert back.sigma_ == v.sigma_


def test_from_centers_and_errors(data):
    X, Xq = data
    v = ApproximateKMeans.from_centers(X[:500], nprobe=64, n_candidates=64, random_state=0)
    np.testing.assert_array_equal(v.cluster_centers_, X[:500][v.perm_])
    with pytest.raises(ValueError, match="sigma"):
        v.soft_assign(Xq)
    with pytest.raises(ValueError, match="at least 300 rows"):
        ApproximateKMeans(300).fit(X[:100])
    with pytest.raises(ValueError, match="'nprobe' parameter"):
        ApproximateKMeans(10, nprobe=0).fit(X)
    with pytest.raises(ValueError, match="columns"):
        v.predict(Xq[:, :5])


@pytest.mark.parametrize("n_rows", [1, 3, 40])
def test_exhaustive_probe_is_exact_for_small_and_large_cell_groups(data, n_rows):
    """Few rows per cell take the vectorised-loop product, many rows the BLAS one; both must be exact when every
    cell is probed: with all 24 PCA dimensions the candidate scores are exact (a rotation), so the 8 candidates
    kept through the per-row bound of the nearest cell and the merge must hold the true 4 nearest words."""
    X, Xq = data
    v = ApproximateKMeans.from_centers(X[:400], n_coarse=12, nprobe=12, n_candidates=8, n_components=24,
                                       random_state=0)
    q = Xq[:n_rows]
    full = ((q[:, None, :] - v.cluster_centers_[None]) ** 2).sum(-1)
    d, w = v.kneighbors(q, 4)
    np.testing.assert_array_equal(w, np.argsort(full, axis=1, kind="stable")[:, :4])
    np.testing.assert_allclose(d, np.sort(full, axis=1)[:, :4], rtol=1e-4, atol=1e-4)
