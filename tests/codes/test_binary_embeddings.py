"""Binary embeddings of Gordo et al. 2014: bit order, Hamming scan, d_E / d_LB by hand, LSH collision law, each method."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.codes import binary_scan as binary_search
from retrieval.codes import scan
from retrieval.codes.binary import (
    DISTANCES,
    EMBEDDINGS,
    LSH,
    PCAE,
    PCAEITQ,
    PCAERR,
    SH,
    byte_tables,
    hamming_distances,
    hamming_topk,
    make_embedding,
    pack_bits,
    unpack_bits,
)
from retrieval.core.checks import NotFittedError


def test_bit_order_is_little_endian_within_bytes():
    bits = np.zeros((1, 12), dtype=np.uint8)
    bits[0, 0] = 1   # byte 0, value 1
    bits[0, 3] = 1   # byte 0, value 8
    bits[0, 9] = 1   # byte 1, value 2
    codes = pack_bits(bits)
    assert codes.tolist() == [[9, 2]]
    np.testing.assert_array_equal(unpack_bits(codes, 12), bits)


def _oracle_topk(qc, c, k):
    full = hamming_distances(qc, c)
    ids = np.stack([np.lexsort((np.arange(c.shape[0]), row))[:k] for row in full])
    return np.take_along_axis(full, ids, 1), ids


@pytest.mark.parametrize("nbytes", [1, 3, 8, 16])
def test_hamming_topk_matches_numpy_oracle_with_ties(nbytes):
    rng = np.random.default_rng(nbytes)
    c = rng.integers(0, 4, (3000, nbytes), dtype=np.uint8)  # few distinct values: many ties
    q = rng.integers(0, 4, (5, nbytes), dtype=np.uint8)
    for k in (1, 17, 500):
        D, ids = hamming_topk(q, c, k)
        Do, io = _oracle_topk(q, c, k)
        np.testing.assert_array_equal(ids, io)
        np.testing.assert_array_equal(D, Do.astype(np.float32))


def test_hamming_topk_threads_and_padding():
    rng = np.random.default_rng(1)
    c = rng.integers(0, 256, (5, 2), dtype=np.uint8)
    q = rng.integers(0, 256, (4, 2), dtype=np.uint8)
    D, ids = hamming_topk(q, c, 8, threads=2)
    assert (ids[:, 5:] == -1).all() and np.isinf(D[:, 5:]).all()
    Do, io = _oracle_topk(q, c, 5)
    np.testing.assert_array_equal(ids[:, :5], io)


def test_byte_tables_equal_the_per_bit_sum():
    rng = np.random.default_rng(2)
    c0, c1 = rng.random((3, 13)), rng.random((3, 13))
    tables = byte_tables(c0, c1)
    assert tables.shape == (3, 2, 256) and tables.dtype == np.float32
    codes = rng.integers(0, 256, (50, 2), dtype=np.uint8)
    codes[:, 1] &= 0b11111  # 13 bits: the 3 high bits of the last byte are padding (0)
    bits = unpack_bits(codes, 13).astype(bool)
    direct = np.where(bits[None], c1[:, None, :], c0[:, None, :]).sum(axis=2)
    via_tables = tables[:, 0, codes[:, 0]] + tables[:, 1, codes[:, 1]]
    np.testing.assert_allclose(via_tables, direct, rtol=1e-5)


def _two_bit_lsh():
    """An LSH whose g is the identity on R^2 (t = 0), with alphas learnt on a hand-made training set."""
    train = np.array([[1.0, 1.0], [3.0, -1.0], [-2.0, 2.0], [-4.0, -3.0]], dtype=np.float32)
    e = LSH(2, center=False, random_state=0).fit(train)
    e.projections_ = np.eye(2, dtype=np.float32)
    e._fit_alphas(train)
    return e


def test_alphas_by_hand():
    e = _two_bit_lsh()
    # bit 0: g = 1, 3 (bit 1) and -2, -4 (bit 0); bit 1: g = 1, 2 (bit 1) and -1, -3 (bit 0)
    np.testing.assert_allclose(e.alpha1_, [2.0, 1.5])
    np.testing.assert_allclose(e.alpha0_, [-3.0, -2.0])
    np.testing.assert_allclose(e.alpha1_sq_, [5.0, 2.5])
    np.testing.assert_allclose(e.alpha0_sq_, [10.0, 5.0])


def test_fit_statistics_re_estimates_the_alphas_on_another_sample():
    e = _two_bit_lsh()
    other = np.array([[2.0, -2.0], [4.0, 1.0], [-1.0, 3.0], [-1.0, 5.0]], dtype=np.float32)
    assert e.fit_statistics(other) is e
    # bit 0: g = 2, 4 (bit 1), -1, -1 (bit 0); bit 1: g = 1, 3, 5 (bit 1), -2 (bit 0)
    np.testing.assert_allclose(e.alpha1_, [3.0, 3.0])
    np.testing.assert_allclose(e.alpha0_, [-1.0, -2.0])
    np.testing.assert_allclose(e.alpha1_sq_, [10.0, 35.0 / 3])
    np.testing.assert_allclose(e.alpha0_sq_, [1.0, 4.0])
    np.testing.assert_array_equal(e.projections_, np.eye(2))  # g itself is unchanged
    with pytest.raises(ValueError, match="must have 2 columns"):
        e.fit_statistics(np.zeros((3, 5)))
    with pytest.raises(NotFittedError):
        LSH(4).fit_statistics(other)


def test_in_sample_pca_alphas_overestimate_the_spread_of_new_data():
    # Gordo et al. 2014, eq. 22-23 estimated on the PCA's own training set: with few samples in high dimension the
    # leading sample directions carry more variance in-sample than on new draws of the same distribution
    rng = np.random.default_rng(0)
    d, n = 400, 100
    train, base = rng.standard_normal((n, d)), rng.standard_normal((5000, d))
    e = PCAE(8).fit(train)
    spread_train = e.alpha1_ - e.alpha0_
    e.fit_statistics(base)
    spread_base = e.alpha1_ - e.alpha0_
    assert np.all(spread_train > 1.5 * spread_base), (spread_train, spread_base)


def test_d_E_and_d_LB_on_a_two_bit_example():
    e = _two_bit_lsh()
    # database: the four codes 00, 10, 01, 11 (bit 0 first)
    e.add_codes(pack_bits(np.array([[0, 0], [1, 0], [0, 1], [1, 1]])))
    x = np.array([[0.5, -1.0]], dtype=np.float32)          # g(x) = (0.5, -1), h(x) = (1, 0)
    # d_E (eq. 21-26): beta^b_k = (g_k(x) - alpha^b_k)^2
    # bit 0: beta^0 = (0.5 + 3)^2 = 12.25, beta^1 = (0.5 - 2)^2 = 2.25
    # bit 1: beta^0 = (-1 + 2)^2 = 1,      beta^1 = (-1 - 1.5)^2 = 6.25
    expected_E = {0: 12.25 + 1, 1: 2.25 + 1, 2: 12.25 + 6.25, 3: 2.25 + 6.25}
    D, ids = e.search(x, 4, "expectation")
    assert ids[0].tolist() == [1, 3, 0, 2]
    np.testing.assert_allclose(D[0], [expected_E[i] for i in ids[0]])
    # d_LB (eq. 30-33): gamma = (g_k(x) - t_k)^2 where the bits differ; bit 0 differs for y_0 = 0 (0.25),
    # bit 1 differs for y_1 = 1 (1.0)
    D, ids = e.search(x, 4, "lower_bound")
    assert ids[0].tolist() == [1, 0, 3, 2]
    np.testing.assert_allclose(D[0], [0.0, 0.25, 1.0, 1.25])
    # d_E-hat (eq. 27-29): g^2 - 2 g alpha + hat alpha; bit 0: b=0: 0.25 + 3 + 10 = 13.25, b=1: 0.25 - 2 + 5
    # = 3.25; bit 1: b=0: 1 - 4 + 5 = 2, b=1: 1 + 3 + 2.5 = 6.5
    D, ids = e.search(x, 4, "expectation_hat")
    np.testing.assert_allclose(sorted(D[0]), sorted([13.25 + 2, 3.25 + 2, 13.25 + 6.5, 3.25 + 6.5]))
    # Hamming: h(x) = 10
    D, ids = e.search(x, 4, "hamming")
    assert ids[0].tolist() == [1, 0, 3, 2] and D[0].tolist() == [0, 1, 1, 2]


def test_asymmetric_distances_go_through_the_shared_scan(monkeypatch):
    calls = []
    real = scan.lut_scan_topk

    def spy(tables, codes, k, **kw):
        calls.append((tables.shape, codes.shape))
        return real(tables, codes, k, **kw)

    monkeypatch.setattr(scan, "lut_scan_topk", spy)
    e = _two_bit_lsh()
    e.add(np.random.default_rng(0).standard_normal((10, 2)))
    e.search(np.zeros((3, 2)), 2, "expectation")
    e.search(np.zeros((3, 2)), 2, "lower_bound")
    assert calls == [((3, 1, 256), (10, 1))] * 2


def test_lsh_collision_probability_is_one_minus_theta_over_pi():
    rng = np.random.default_rng(3)
    nbits = 8192
    thetas = np.linspace(0.1, 3.0, 8)
    x = np.tile([1.0, 0.0, 0.0], (thetas.size, 1))
    y = np.stack([np.cos(thetas), np.sin(thetas), np.zeros_like(thetas)], axis=1) * 2.5  # norm does not matter
    e = LSH(nbits, center=False, random_state=rng).fit(np.vstack([x, y]))
    bx, by = unpack_bits(e.encode(x), nbits), unpack_bits(e.encode(y), nbits)
    collide = (bx == by).mean(axis=1)
    p = 1 - thetas / np.pi
    sigma = np.sqrt(p * (1 - p) / nbits)
    assert np.all(np.abs(collide - p) < 4 * sigma + 1e-9), (collide, p)


def _synthetic(seed=0, d=32, n=6000):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, d)) * np.exp(-np.arange(d) / 6.0)
    X = (rng.standard_normal((n, d)) @ A.T).astype(np.float32)
    return X[:2000], X[2000:n - 100], X[n - 100:]


def _recall_at(ids, gt):
    return float(np.mean([(gt[i] == ids[i]).any() for i in range(len(gt))]))


@pytest.mark.parametrize("name", list(EMBEDDINGS))
def test_each_embedding_asymmetric_recall_at_least_hamming(name):
    train, base, queries = _synthetic()
    gt = ((queries[:, None, :] - base[None]) ** 2).sum(-1).argmin(1)
    e = make_embedding(name, 32, random_state=0).fit(train)
    e.add(base)
    assert e.ntotal == base.shape[0] and e.codes_.shape == (base.shape[0], 4)
    rec = {dist: _recall_at(e.search(queries, 50, dist)[1], gt) for dist in DISTANCES}
    assert rec["expectation"] >= rec["hamming"], rec
    assert rec["lower_bound"] >= rec["hamming"], rec
    assert rec["hamming"] > 0.05, rec  # better than chance (50 / 3900)


@pytest.mark.parametrize("name", list(EMBEDDINGS))
def test_search_distances_equal_eq_21_to_33_computed_directly(name):
    # end to end: alphas as class-conditional means of g over the training set (eq. 22-23), then d_E (eq. 21)
    # and d_LB (eq. 30) for every (query, database) pair, against the library's table-driven search
    train, base, queries = _synthetic(7, d=16, n=2600)
    base, queries = base[:400], queries[:20]
    e = make_embedding(name, 12, random_state=0).fit(train)
    e.add(base)
    t = e.thresholds_.astype(np.float64)
    Gt, Gb, Gq = (e.project(X).astype(np.float64) for X in (train, base, queries))
    Bt, Bb, Bq = Gt >= t, Gb >= t, Gq >= t
    a1 = np.array([Gt[Bt[:, k], k].mean() if Bt[:, k].any() else t[k] for k in range(12)])
    a0 = np.array([Gt[~Bt[:, k], k].mean() if (~Bt[:, k]).any() else t[k] for k in range(12)])
    A = np.where(Bb, a1, a0)                                                  # (n, nbits)
    d_E = ((Gq[:, None, :] - A[None]) ** 2).sum(-1)
    d_LB = ((Bq[:, None, :] != Bb[None]) * (Gq[:, None, :] - t) ** 2).sum(-1)
    for dist, full in (("expectation", d_E), ("lower_bound", d_LB)):
        D, ids = e.search(queries, 400, dist)
        np.testing.assert_allclose(D, np.sort(full, axis=1), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.take_along_axis(full, ids, 1), D, rtol=1e-4, atol=1e-5)


def test_itq_reduces_the_quantisation_loss_of_its_random_start():
    train, _, _ = _synthetic(1)
    itq = PCAEITQ(16, n_iter=50, random_state=0).fit(train)
    start = PCAEITQ(16, n_iter=0, random_state=0).fit(train)
    assert itq.quantization_loss_ < start.quantization_loss_
    R = itq.rotation_.astype(np.float64)
    np.testing.assert_allclose(R @ R.T, np.eye(16), atol=1e-5)


def test_pcae_rr_rotation_is_orthogonal_and_pcae_uses_principal_axes():
    train, _, _ = _synthetic(2)
    rr = PCAERR(8, random_state=0).fit(train)
    np.testing.assert_allclose(rr.rotation_ @ rr.rotation_.T, np.eye(8), atol=1e-5)
    pc = PCAE(8).fit(train)
    var = (((train - pc.mean_) @ pc.components_) ** 2).mean(axis=0)
    assert np.all(np.diff(var) <= 1e-6 * var[0])  # decreasing variances: principal axes in order


def test_sh_first_bit_splits_the_first_pca_direction_at_mid_range():
    train, _, _ = _synthetic(3)
    sh = SH(8).fit(train)
    # on the training range u = (y - a) / (b - a) is in [0, 1], and the first mode cos(pi u) >= 0 iff u <= 1/2
    y0 = (train - sh.mean_) @ sh.pca_[:, 0]
    bit0 = unpack_bits(sh.encode(train), 8)[:, 0]
    mid = sh.mins_[0] + np.pi / (2 * sh.omegas_[0])
    assert sh.dims_[0] == 0
    np.testing.assert_array_equal(bit0, (y0 <= mid).astype(np.uint8))
    assert np.all(np.abs(sh.project(train)) <= 1.0 + 1e-6)


def test_save_load_round_trip(tmp_path):
    train, base, queries = _synthetic(4)
    for name in ("LSBC", "PCAE-ITQ", "SH"):
        e = make_embedding(name, 24, random_state=1).fit(train)
        e.add(base[:300])
        path = e.save(tmp_path / name)
        f = type(e).load(path)
        for dist in ("hamming", "expectation"):
            np.testing.assert_array_equal(e.search(queries, 5, dist)[1], f.search(queries, 5, dist)[1])


def test_errors_name_the_problem():
    train, _, _ = _synthetic(5, d=8, n=300)
    with pytest.raises(ValueError, match="'nbits' parameter of PCAE must be at most 8"):
        PCAE(16).fit(train)
    e = LSH(8).fit(train)
    with pytest.raises(ValueError, match="'distance' parameter"):
        e.search(train[:2], 3, "euclid")
    with pytest.raises(ValueError, match="must have 8 columns"):
        e.search(train[:2, :4], 3)
    with pytest.raises(NotFittedError):
        SH(8).encode(train)
    with pytest.raises(ValueError, match="must have 1 columns"):
        e.add_codes(np.zeros((2, 3), np.uint8))
    assert binary_search.BIT_ORDER == "little"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(nbits=st.integers(1, 40), n=st.integers(1, 60), k=st.integers(1, 70), seed=st.integers(0, 2**31 - 1))
def test_asymmetric_topk_equals_the_bitwise_sum_property(nbits, n, k, seed):
    rng = np.random.default_rng(seed)
    c0, c1 = rng.random((2, nbits)).astype(np.float32), rng.random((2, nbits)).astype(np.float32)
    bits = rng.integers(0, 2, (n, nbits))
    codes = pack_bits(bits)
    D, ids = binary_search.asymmetric_topk(c0, c1, codes, k)
    direct = np.where(bits[None].astype(bool), c1[:, None, :], c0[:, None, :]).sum(-1)
    kk = min(k, n)
    for q in range(2):
        np.testing.assert_allclose(D[q, :kk], np.sort(direct[q])[:kk], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(direct[q, ids[q, :kk]], D[q, :kk], rtol=1e-5, atol=1e-5)
        assert (ids[q, kk:] == -1).all()


@pytest.mark.parametrize("distance", DISTANCES)
def test_search_pads_an_empty_or_small_database(distance):
    X = _synthetic(6, d=8, n=2200)[0]
    train, base, queries = X[:1000], X[1000:1002], X[1002:1004]
    e = LSH(16, random_state=0).fit(train)
    D, ids = e.search(queries[:2], 3, distance)
    assert (ids == -1).all() and np.isinf(D).all()
    e.add(base)
    D, ids = e.search(queries[:2], 4, distance)
    assert sorted(ids[0, :2].tolist()) == [0, 1] and (ids[:, 2:] == -1).all() and np.isinf(D[:, 2:]).all()
    assert np.all(np.diff(D[:, :2], axis=1) >= 0)
