"""Kernels, KPCA (Bourrier et al. 2015, eq. 11, 21-22), exact search (App. A.2), KLSH, RMMH, KPCA+PQ/LSH, homkermap, BE-AHK."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

from retrieval.codes.binary import unpack_bits
from retrieval.codes.homogeneous_map import BEAHK, HomogeneousKernelMap
from retrieval.codes.kernel_pca import KernelPCAEmbedding
from retrieval.codes.kernels import kernel_diag, kernel_matrix, kernel_topk, l1_normalize
from retrieval.codes.klsh import KLSH
from retrieval.codes.rmmh import RMMH
from retrieval.search.kernel_exact import ExactKernelSearch, rerank
from retrieval.search.kernel_search import KPCALSH, KPCAPQ


def _hist(n, d=16, seed=0, power=3):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d)) ** power
    X[rng.random((n, d)) < 0.2] = 0.0   # exact zeros: the 0/0 terms of chi2
    X[:, 0] += 1e-3
    return l1_normalize(X)


def _oracle(X, Y, kernel, gamma=1.0):
    x, y = X[:, None, :].astype(np.float64), Y[None, :, :].astype(np.float64)
    if kernel == "chi2":
        s = x + y
        return np.where(s > 0, 2 * x * y / np.where(s > 0, s, 1), 0).sum(-1)
    if kernel == "intersection":
        return np.minimum(x, y).sum(-1)
    if kernel == "hellinger":
        return np.sqrt(x * y).sum(-1)
    return np.exp(-gamma * ((x - y) ** 2).sum(-1))


@pytest.mark.parametrize("kernel", ["chi2", "intersection", "hellinger", "rbf"])
def test_kernel_matrix_matches_numpy_oracle_and_is_one_on_the_diagonal(kernel):
    X, Y = _hist(30, seed=1), _hist(20, seed=2)
    np.testing.assert_allclose(kernel_matrix(X, Y, kernel, gamma=3.0), _oracle(X, Y, kernel, 3.0), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.diag(kernel_matrix(X, X, kernel, gamma=3.0)), 1.0, rtol=1e-5)
    np.testing.assert_allclose(kernel_diag(X, kernel), 1.0, rtol=1e-5)


def test_kernel_input_errors():
    with pytest.raises(ValueError, match="must be non-negative"):
        kernel_matrix(-np.ones((2, 3)), np.ones((2, 3)), "chi2")
    with pytest.raises(ValueError, match="'kernel' parameter"):
        kernel_matrix(np.ones((2, 3)), np.ones((2, 3)), "laplace")
    with pytest.raises(ValueError, match="same number of columns"):
        kernel_matrix(np.ones((2, 3)), np.ones((2, 4)), "chi2")


def test_kpca_matches_sklearn_kernel_pca_on_a_precomputed_kernel():
    from sklearn.decomposition import KernelPCA

    X = _hist(300, seed=3)
    emb = KernelPCAEmbedding("chi2", 300, 10, random_state=0).fit(X)
    Q = _hist(40, seed=4)
    ref = KernelPCA(10, kernel="precomputed").fit(kernel_matrix(emb.landmarks_, emb.landmarks_, "chi2"))
    ours = emb.transform(Q)
    theirs = ref.transform(kernel_matrix(Q, emb.landmarks_, "chi2"))
    signs = np.sign((ours * theirs).sum(axis=0))
    np.testing.assert_allclose(ours, theirs * signs, atol=2e-4)


def test_kpca_is_exact_on_landmarks_at_full_rank_and_cauchy_schwarz_holds():
    X = _hist(400, seed=5)
    full = KernelPCAEmbedding("chi2", 40, 39, random_state=0).fit(X)
    L = full.landmarks_
    F = full.transform_full(L)
    np.testing.assert_allclose(F @ F.T, kernel_matrix(L, L, "chi2"), atol=1e-4)   # V' spans the landmarks
    assert full.residual_norm(L, full=F).max() < 1e-2
    # centred embedding distances are projected feature-space distances: d_K on landmarks (eq. 4)
    Z = full.transform(L)
    dz = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    K = kernel_matrix(L, L, "chi2")
    np.testing.assert_allclose(dz, 2 - 2 * K, atol=1e-4)
    # truncated KPCA: |K - K~| <= R(x) R(y) (eq. 22) on unseen pairs, and the bound is not vacuous
    small = KernelPCAEmbedding("chi2", 100, 8, random_state=0).fit(X)
    A, B = _hist(60, seed=6), _hist(70, seed=7)
    FA, FB = small.transform_full(A), small.transform_full(B)
    err = np.abs(kernel_matrix(A, B, "chi2") - FA @ FB.T)
    bound = np.outer(small.residual_norm(A, full=FA), small.residual_norm(B, full=FB))
    assert np.all(err <= bound + 1e-5)
    assert bound.mean() < 0.5


@pytest.mark.parametrize("bound", ["kth", "paper"])
def test_exact_search_returns_the_true_nearest_neighbour_with_few_kernel_evaluations(bound):
    rng = np.random.default_rng(8)
    centres = rng.random((20, 16)) ** 4
    X = l1_normalize(centres[rng.integers(0, 20, 3000)] + 0.02 * rng.random((3000, 16)))
    base, queries = X[:2900], X[2900:]
    emb = KernelPCAEmbedding("chi2", 300, 32, random_state=0).fit(base)
    ex = ExactKernelSearch(emb, bound=bound)
    ex.add(base)
    vals, ids, evals = ex.search(queries, 1)
    tv, tid = kernel_topk(queries, base, 1)
    np.testing.assert_allclose(vals[:, 0], tv[:, 0], rtol=1e-6)
    assert np.all(ids[:, 0] == tid[:, 0]) or np.allclose(vals[:, 0], tv[:, 0])
    assert evals.mean() < 0.2 * base.shape[0]
    if bound == "kth":
        v5, i5, _ = ex.search(queries[:10], 5)
        tv5, _ = kernel_topk(queries[:10], base, 5)
        np.testing.assert_allclose(v5, tv5, rtol=1e-6)


def test_klsh_projection_is_a_whitened_subset_sum():
    """g(y_j) over the landmarks equals (K_c^{1/2} e_S)_j (eq. 15: <r, Psi_c(y_j)> = (K_c w)_j)."""
    X = _hist(500, seed=9)
    e = KLSH(16, kernel="chi2", n_landmarks=60, n_subset=5, random_state=0).fit(X)
    Y = e.landmarks_
    M = Y.shape[0]
    H = np.eye(M) - 1.0 / M
    Kc = H @ kernel_matrix(Y, Y, "chi2").astype(np.float64) @ H
    w, V = np.linalg.eigh(Kc)
    keep = w > w.max() * 1e-10
    Kc_inv_half = (V[:, keep] / np.sqrt(w[keep])) @ V[:, keep].T
    G = e.project(Y)
    np.testing.assert_allclose(G, Kc @ e.weights_, atol=1e-3)
    # K_c^{-1/2} g(Y) = P e_S = e_S - Q/M (P: projector on range(K_c), which is orthogonal to 1)
    U = Kc_inv_half @ G + 5.0 / M
    np.testing.assert_allclose(U, np.round(U), atol=1e-2)
    assert set(np.unique(np.round(U))) <= {0.0, 1.0} and np.all(np.round(U).sum(axis=0) == 5)
    assert G.shape == (M, 16)


def test_rmmh_hash_functions_are_svm_duals():
    X = _hist(400, seed=10)
    e = RMMH(12, kernel="chi2", n_landmarks=100, n_per_hash=10, C=10.0, random_state=0).fit(X)
    nz = (e.weights_ != 0).sum(axis=0)
    assert np.all((nz >= 2) & (nz <= 10))
    np.testing.assert_allclose(e.weights_.sum(axis=0), 0.0, atol=1e-8)    # sum_i alpha_i eps_i = 0
    assert np.all(np.abs(e.weights_) <= 10.0 + 1e-9)                       # 0 <= alpha_i <= C
    with pytest.raises(ValueError, match="must be even"):
        RMMH(4, n_landmarks=50, n_per_hash=5).fit(X)


def _clustered(n, d=16, seed=11):
    rng = np.random.default_rng(seed)
    centres = rng.random((40, d)) ** 4
    return l1_normalize(centres[rng.integers(0, 40, n)] + 0.03 * rng.random((n, d)) ** 2)


def test_kernel_codes_find_chi2_neighbours_and_rerank_is_exact():
    X = _clustered(4000)
    train, base, queries = X[:1000], X[1000:3950], X[3950:]
    _, gt = kernel_topk(queries, base, 1)
    gt = gt[:, 0]

    def recall(ids):
        return float(np.mean([(gt[i] == ids[i]).any() for i in range(len(gt))]))

    pq = KPCAPQ("chi2", 200, 32, M=4, preprocessing="permutation", random_state=0).fit(train)
    assert sorted(np.argmax(pq.transform_, axis=0).tolist()) == list(range(32))
    pq.add(base)
    r_pq = recall(pq.search(queries, 50)[1])
    D, ids = pq.search(queries, 5, rerank_size=50)
    kq = kernel_matrix(queries, base, "chi2")
    np.testing.assert_allclose(D[:, 0], 2 - 2 * kq[np.arange(len(gt)), ids[:, 0]], atol=1e-5)
    r_rerank1 = recall(ids[:, :1])
    assert r_rerank1 >= 0.9 * r_pq
    chance = 50 / base.shape[0]
    for e in (KPCALSH(32, n_landmarks=200, random_state=0), KLSH(32, n_landmarks=200, random_state=0),
              RMMH(32, n_landmarks=200, random_state=0), BEAHK(32, random_state=0)):
        e.fit(train)
        e.add(base)
        assert recall(e.search(queries, 50)[1]) > 5 * chance, type(e).__name__
    assert r_pq > 0.8
    D, ids = rerank(queries, base, np.tile(np.arange(10), (len(gt), 1)), 3, "chi2")
    assert np.all(np.diff(D, axis=1) >= 0) and np.all(ids < 10)


def test_kpcalsh_save_load(tmp_path):
    X = _clustered(600)
    e = KPCALSH(16, n_landmarks=50, random_state=0).fit(X)
    f = KPCALSH.load(e.save(tmp_path / "k"))
    np.testing.assert_array_equal(e.encode(X[:20]), f.encode(X[:20]))
    idx = KPCAPQ("chi2", 50, 16, M=4, nbits=4, random_state=0).fit(X)
    idx.add(X[:100])
    back = KPCAPQ.load(idx.save(tmp_path / "pq"))
    for kw in ({}, {"rerank_size": 20}):
        np.testing.assert_array_equal(idx.search(X[:5], 5, **kw)[1], back.search(X[:5], 5, **kw)[1])


@pytest.mark.parametrize("kernel,ns,final_tol", [("chi2", (1, 3, 10), 5e-4), ("intersection", (1, 10, 20), 5e-2),
                                                 ("hellinger", (1,), 1e-6)])
def test_homogeneous_kernel_map_converges_to_the_kernel(kernel, ns, final_tol):
    """Max error decreases with the number of samples: fast for the smooth chi2, slowly for the intersection
    kernel (Kim and Choi 2017 Corollary 2 and its footnote); the Hellinger map sqrt(x) is exact."""
    X, Y = _hist(50, seed=12), _hist(40, seed=13)
    errs = []
    for n in ns:
        m = HomogeneousKernelMap(kernel, n)
        FX, FY = m.transform(X), m.transform(Y)
        assert FX.shape == (50, 16 * m.dims_per_input)
        errs.append(np.abs(FX.astype(np.float64) @ FY.T - _oracle(X, Y, kernel)).max())
    assert np.all(np.diff(errs) < 0), errs
    assert errs[-1] < final_tol, errs


def _libvl():
    name = ctypes.util.find_library("vl")
    if not name:
        pytest.skip("libvl (VLFeat) not found: cannot cross-check the homogeneous kernel map")
    lib = ctypes.CDLL(name)
    lib.vl_homogeneouskernelmap_new.restype = ctypes.c_void_p
    lib.vl_homogeneouskernelmap_new.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_size_t, ctypes.c_double,
                                                ctypes.c_int]
    lib.vl_homogeneouskernelmap_evaluate_d.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double),
                                                       ctypes.c_size_t, ctypes.c_double]
    lib.vl_homogeneouskernelmap_delete.argtypes = [ctypes.c_void_p]
    return lib


@pytest.mark.parametrize("kernel,vl_type", [("chi2", 1), ("intersection", 0)])
def test_homogeneous_kernel_map_agrees_with_vlfeat(kernel, vl_type):
    lib = _libvl()
    n, period = 3, 8.0
    h = lib.vl_homogeneouskernelmap_new(vl_type, 1.0, n, period, 0)   # gamma 1, uniform window
    try:
        xs = np.array([1e-3, 0.01, 0.07, 0.2, 0.5, 0.9])
        vl = np.zeros((xs.size, 2 * n + 1))
        buf = (ctypes.c_double * (2 * n + 1))()
        for i, x in enumerate(xs):
            lib.vl_homogeneouskernelmap_evaluate_d(h, buf, 1, float(x))
            vl[i] = np.frombuffer(buf, dtype=np.float64)
    finally:
        lib.vl_homogeneouskernelmap_delete(h)
    ours = HomogeneousKernelMap(kernel, n, period).transform(xs[:, None]).astype(np.float64)
    # VLFeat orders (Psi_0, cos_1, sin_1, ...), like ours; it interpolates a table, hence the tolerance
    np.testing.assert_allclose(ours, vl, atol=2e-3 * np.abs(vl).max())


def test_beahk_hamming_tracks_the_angle_of_the_map_and_needs_no_training():
    X = _hist(30, seed=14)
    e = BEAHK(4096, kernel="chi2", random_state=0).fit(X[:2])   # only the dimension is learnt
    F = HomogeneousKernelMap("chi2", 3).transform(X).astype(np.float64)
    nrm = np.linalg.norm(F, axis=1)
    theta = np.arccos(np.clip(F @ F.T / np.outer(nrm, nrm), -1, 1))
    bits = unpack_bits(e.encode(X), 4096).astype(np.int32)
    ham = (bits[:, None, :] != bits[None, :, :]).mean(-1)
    assert np.abs(ham - theta / np.pi).max() < 4 * np.sqrt(0.25 / 4096) + 0.01
