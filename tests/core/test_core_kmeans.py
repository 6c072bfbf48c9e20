"""The one exact nearest-centre search and the one small-K k-means (retrieval.core.nearest, retrieval.core.kmeans):
numpy oracles of the old rules they replaced, toy cases by hand, and the VLFeat path of KMeansVocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.core.kmeans import kmeans, seed_vlfeat, update_centers
from retrieval.core.nearest import k_nearest_centers, nearest_centers, sq_norms, squared_distances


def _points(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((k, d)) * 4
    return (C[rng.integers(0, k, n)] + rng.standard_normal((n, d))).astype(np.float32)


def _oracle_d2(X, C):
    return ((X.astype(np.float64)[:, None, :] - C.astype(np.float64)[None]) ** 2).sum(-1)


def test_nearest_toy_by_hand():
    C = np.array([[0, 0], [10, 0], [0, 10]], np.float32)
    X = np.array([[1, 1], [9, 1], [2, 8], [5, 5]], np.float32)
    labels, d2 = nearest_centers(X, C)
    np.testing.assert_array_equal(labels, [0, 1, 2, 0])            # (5, 5): three-way tie -> lowest index
    np.testing.assert_allclose(d2, [2, 2, 8, 50])
    np.testing.assert_allclose(squared_distances(X[:1], C), [[2, 82, 82]])
    np.testing.assert_allclose(sq_norms(C), [0, 100, 100])


@pytest.mark.parametrize("d", [4, 40])
def test_nearest_matches_brute_force_oracle_with_any_blocking(d):
    X = _points(700, d, 30, seed=d)
    C = _points(300, d, 30, seed=d + 1)
    D = _oracle_d2(X, C)
    labels, d2 = nearest_centers(X, C)
    np.testing.assert_array_equal(labels, D.argmin(1))
    np.testing.assert_allclose(d2, D.min(1), rtol=1e-4, atol=1e-3)
    small = nearest_centers(X, C, block_elements=1000)              # rows and centres both blocked
    np.testing.assert_array_equal(small[0], labels)
    np.testing.assert_allclose(small[1], d2, rtol=1e-6, atol=1e-4)   # other sgemm shapes: float32 rounding only
    lab3, d3 = k_nearest_centers(X, C, 3, block_elements=5000)
    np.testing.assert_array_equal(lab3, np.argsort(D, 1, kind="stable")[:, :3])
    np.testing.assert_allclose(d3, np.sort(D, 1)[:, :3], rtol=1e-4, atol=1e-3)


def test_nearest_rejects_bad_shapes():
    with pytest.raises(ValueError, match="same d"):
        nearest_centers(np.ones((3, 2)), np.ones((4, 3)))
    with pytest.raises(ValueError, match="at least one row"):
        nearest_centers(np.ones((3, 2)), np.ones((0, 2)))


def test_update_centers_by_hand():
    X = np.array([[0, 0], [2, 0], [5, 5], [7, 7]], np.float32)
    C = np.full((3, 2), -1, np.float32)
    counts = update_centers(X, np.array([0, 0, 2, 2]), C)
    np.testing.assert_array_equal(counts, [2, 0, 2])
    np.testing.assert_array_equal(C, [[1, 0], [-1, -1], [6, 6]])    # the empty centre is left in place


def _oracle_lloyd(X, k, n_iter, rng, split_empty):
    """The rule of the old PQ / IVFADC k-means (faiss defaults, no sub-sampling here) and, without the repair, of
    the old coarse cells of approximate k-means: float64 distances, float64 means."""
    C = X[rng.choice(len(X), k, replace=False)].copy()
    for _ in range(n_iter):
        lab = _oracle_d2(X, C).argmin(1)
        counts = np.bincount(lab, minlength=k)
        for j in np.flatnonzero(counts):
            C[j] = X[lab == j].astype(np.float64).mean(0)
        if split_empty:
            for j in np.flatnonzero(counts == 0):
                big = int(rng.choice(k, p=counts / counts.sum()))
                C[j], C[big] = C[big] * np.float32(1 + 1 / 1024), C[big] * np.float32(1 - 1 / 1024)
                counts[j] = counts[big] // 2
                counts[big] -= counts[j]
    return C


@pytest.mark.parametrize("split_empty", [True, False])
def test_lloyd_matches_oracle(split_empty):
    X = _points(600, 6, 8, seed=3)
    got = kmeans(X, 8, n_iter=10, rng=np.random.default_rng(5), split_empty=split_empty)
    want = _oracle_lloyd(X, 8, 10, np.random.default_rng(5), split_empty)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_empty_clusters_are_split_or_kept():
    # 10 copies of two points, k = 3: two initial centres coincide, the higher-numbered one gets no point
    X = np.repeat(np.array([[1, 1], [8, 1]], np.float32), 10, axis=0)
    for seed in range(5):
        kept = kmeans(X, 3, n_iter=3, rng=np.random.default_rng(seed), split_empty=False)
        split = kmeans(X, 3, n_iter=3, rng=np.random.default_rng(seed), split_empty=True)
        np.testing.assert_array_equal(np.unique(kept, axis=0), [[1, 1], [8, 1]])
        assert len(np.unique(split, axis=0)) == 3
        want = _oracle_lloyd(X, 3, 3, np.random.default_rng(seed), True)
        np.testing.assert_allclose(split, want, rtol=1e-6)


def test_subsampling_to_max_points_per_centroid():
    X = _points(2000, 3, 4, seed=4)
    rng = np.random.default_rng(9)
    got = kmeans(X, 4, n_iter=5, rng=np.random.default_rng(9), max_points_per_centroid=100)
    sub = X[np.sort(rng.choice(2000, 400, replace=False))]
    np.testing.assert_allclose(got, _oracle_lloyd(sub, 4, 5, rng, True), rtol=1e-5, atol=1e-5)


def test_kmeans_rejects_bad_input():
    with pytest.raises(ValueError, match="at least k=5"):
        kmeans(np.ones((4, 2), np.float32), 5, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="algorithm"):
        kmeans(np.ones((4, 2), np.float32), 2, rng=np.random.default_rng(0), algorithm="elkan")


def test_vlfeat_path_is_the_seeded_cyvlfeat_call():
    pytest.importorskip("cyvlfeat")
    from cyvlfeat.kmeans import kmeans as vl_kmeans

    from retrieval.aggregation.kmeans import KMeansVocabulary

    X = _points(1500, 8, 10, seed=6)
    if not seed_vlfeat(0):
        pytest.skip("libvl not loadable: VLFeat k-means cannot be seeded")
    seed_vlfeat(int(np.random.default_rng(7).integers(2**63 - 1)))
    want = vl_kmeans(X, 10, distance="l2", initialization="PLUSPLUS", algorithm="ELKAN", num_repetitions=1,
                     num_trees=3, max_num_comparisons=100, max_num_iterations=100)
    voc = KMeansVocabulary(10, random_state=7).fit(X)
    np.testing.assert_array_equal(voc.cluster_centers_, np.asarray(want, np.float32))
    got = kmeans(X, 10, rng=np.random.default_rng(7), n_iter=100, algorithm="vlfeat-elkan")
    np.testing.assert_array_equal(got, voc.cluster_centers_)
