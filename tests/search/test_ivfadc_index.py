"""IVFADC (Jegou et al. 2012, sec. VI-C): distances, nprobe/re-ranking monotonicity, removal, persistence, frozen format file."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.core.persistence import FormatError
from retrieval.search import IVFADC
from retrieval.search.index_io import read_header

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 16)).astype(np.float32) * 3
    X = (centers[rng.integers(0, 20, 4000)] + rng.standard_normal((4000, 16))).astype(np.float32)
    Q = (centers[rng.integers(0, 20, 100)] + rng.standard_normal((100, 16))).astype(np.float32)
    ix = IVFADC(16, 4, 5, 2, store_vectors="float32", refine_M=4, refine_nbits=5, n_iter=6,
                random_state=0).fit(X[:2000])
    ix.add(X, batch_size=700)
    gt = ((Q[:, None, :] - X[None]) ** 2).sum(-1).argmin(1)
    return X, Q, ix, gt


def _recall(ids, gt, r):
    return float(np.mean([gt[i] in ids[i, :r] for i in range(len(gt))]))


def test_layout(setup):
    X, Q, ix, gt = setup
    assert ix.ntotal == 4000 and ix.codes_.shape == (4000, 4) and ix.codes_.dtype == np.uint8
    assert ix.offsets_[0] == 0 and ix.offsets_[-1] == 4000 and np.all(np.diff(ix.offsets_) >= 0)
    assert sorted(ix.ids_.tolist()) == list(range(4000))
    assert ix.bytes_per_vector == 4 + 8 + 4 + 16 * 4
    # every stored row sits in the list of its nearest coarse centroid
    lists = np.repeat(np.arange(16), np.diff(ix.offsets_))
    nearest = ((X[ix.ids_][:, None] - ix.centroids_[None]) ** 2).sum(-1).argmin(1)
    assert np.mean(lists == nearest) > 0.999


def test_adc_distance_equals_distance_to_reconstruction(setup):
    X, Q, ix, gt = setup
    for pre in (True, False):
        ix.precompute_table = pre
        D, ids = ix.search(Q[:10], 5, nprobe=3)
        pos = np.argsort(ix.ids_)[ids]
        lists = np.searchsorted(ix.offsets_, pos, side="right") - 1
        rec = ix.centroids_[lists] + ix.pq_.decode(ix.codes_[pos.reshape(-1)]).reshape(10, 5, 16)
        exact = ((Q[:10, None, :] - rec) ** 2).sum(-1)
        np.testing.assert_allclose(D, exact, rtol=1e-4, atol=1e-3)
    ix.precompute_table = "auto"


def test_batched_add_equals_single_add(setup):
    X, Q, ix, gt = setup
    other = IVFADC(16, 4, 5, 2, store_vectors="float32", refine_M=4, refine_nbits=5)
    for name in ("centroids_", "pq_", "refine_pq_", "d_"):
        setattr(other, name, getattr(ix, name))
    other._init_storage()
    other._term2 = other._cnorms = None
    other.add(X)
    np.testing.assert_array_equal(other.ids_, ix.ids_)
    np.testing.assert_array_equal(other.codes_, ix.codes_)


def test_recall_nondecreasing_in_nprobe_and_with_rerank(setup):
    X, Q, ix, gt = setup
    prev = -1.0
    for p in (1, 2, 4, 8, 16):
        r = _recall(ix.search(Q, 10, nprobe=p)[1], gt, 10)
        assert r >= prev
        prev = r
    assert prev >= 0.5  # sanity floor: 20-bit codes of 16-d clustered data
    for p in (1, 4):
        base = ix.search(Q, 10, nprobe=p)[1]
        exact = ix.search(Q, 10, nprobe=p, rerank=50)[1]
        for r in (1, 10):
            assert _recall(exact, gt, r) >= _recall(base, gt, r)
    refined = ix.search(Q, 10, nprobe=16, rerank=50)[1]
    assert _recall(refined, gt, 1) > 0.9


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.integers(1, 15))
def test_candidate_sets_nested_in_nprobe(setup, seed, p):
    # with k = ntotal every scanned entry is returned: the lists visited at nprobe p are a subset of p + 1's
    X, Q, ix, gt = setup
    x = np.random.default_rng(seed).standard_normal((1, 16)).astype(np.float32)
    a = set(ix.search(x, 4000, nprobe=p)[1][0].tolist()) - {-1}
    b = set(ix.search(x, 4000, nprobe=p + 1)[1][0].tolist()) - {-1}
    assert a <= b and len(b) > len(a) - 1


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), frac=st.floats(0.01, 0.6))
def test_removed_ids_never_returned(setup, seed, frac):
    X, Q, ix, gt = setup
    rng = np.random.default_rng(seed)
    other = IVFADC(16, 4, 5, 4, store_vectors="float32", refine_M=4, refine_nbits=5)
    for name in ("centroids_", "pq_", "refine_pq_", "d_"):
        setattr(other, name, getattr(ix, name))
    other._init_storage()
    other._term2 = other._cnorms = None
    other.add(X[:1500])
    gone = rng.choice(1500, int(frac * 1500), replace=False)
    assert other.remove(gone) == len(gone)
    assert other.ntotal == 1500 - len(gone)
    for kwargs in ({}, {"rerank": 30}, {"nprobe": 16}):
        ids = other.search(Q[:20], 50, **kwargs)[1]
        assert not np.isin(ids, gone).any()
    other.compact()
    assert other.ids_.shape[0] == 1500 - len(gone) and not np.isin(other.ids_, gone).any()
    assert not np.isin(other.search(Q[:20], 50, nprobe=16)[1], gone).any()


def test_save_load_roundtrip_memory_mapped(setup, tmp_path):
    X, Q, ix, gt = setup
    ix.save(tmp_path / "idx")
    assert read_header(tmp_path / "idx")["format"] == "retrieval-ivfadc"
    back = IVFADC.load(tmp_path / "idx")
    assert isinstance(back.codes_, np.memmap) and isinstance(back.vectors_, np.memmap)
    for kwargs in ({}, {"rerank": 20}, {"nprobe": 5}):
        a, b = ix.search(Q, 10, **kwargs), back.search(Q, 10, **kwargs)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])
    # adding and removing on a memory-mapped index works on copies, never on the read-only files
    back.remove([0, 1, 2])
    back.add(X[:3], ids=[5000, 5001, 5002])
    assert back.ntotal == 4000
    assert IVFADC.load(tmp_path / "idx").ntotal == 4000
    back.save(tmp_path / "idx")
    again = IVFADC.load(tmp_path / "idx", mmap=False)
    assert not np.isin(again.ids_, [0, 1, 2]).any() and np.isin([5000, 5001, 5002], again.ids_).all()


def test_frozen_v1_folder_keeps_loading():
    ix = IVFADC.load(DATA / "ivfadc_v1")
    exp = np.load(DATA / "ivfadc_v1_expected.npz", allow_pickle=False)
    assert ix.ntotal == 78 and ix.nlist == 4 and ix.M == 2 and ix.nbits == 4
    D, ids = ix.search(exp["queries"], 5)
    np.testing.assert_array_equal(ids, exp["ids"])
    np.testing.assert_allclose(D, exp["D"], rtol=1e-6)
    D, ids = ix.search(exp["queries"], 5, rerank=10)
    np.testing.assert_array_equal(ids, exp["ids_rerank"])
    np.testing.assert_allclose(D, exp["D_rerank"], rtol=1e-6)


def test_bad_folder_and_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no header.json"):
        IVFADC.load(tmp_path)
    (tmp_path / "header.json").write_text('{"format": "other"}')
    with pytest.raises(FormatError, match="expected 'retrieval-ivfadc'"):
        IVFADC.load(tmp_path)
    with pytest.raises(ValueError, match="at least 8 training"):
        IVFADC(8, 2, 2).fit(np.zeros((5, 4)))
    ix = IVFADC(2, 2, 2, n_iter=2, random_state=0).fit(np.random.default_rng(0).standard_normal((50, 4)))
    with pytest.raises(ValueError, match="rerank > 0 needs"):
        ix.search(np.zeros((1, 4)), 3, rerank=5)
    with pytest.raises(ValueError, match="must have 4 columns"):
        ix.add(np.zeros((3, 5)))


def test_recall_close_to_faiss_ivfpq():
    faiss = pytest.importorskip("faiss")
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(7)
    xt = rng.standard_normal((8000, 32)).astype(np.float32)
    xb = rng.standard_normal((10000, 32)).astype(np.float32)
    xq = rng.standard_normal((300, 32)).astype(np.float32)
    gt = faiss.knn(xq, xb, 1)[1][:, 0]
    ours = IVFADC(32, 8, 6, 4, random_state=0).fit(xt)
    ours.add(xb)
    ref = faiss.IndexIVFPQ(faiss.IndexFlatL2(32), 32, 32, 8, 6)
    ref.train(xt)
    ref.add(xb)
    ref.nprobe = 4
    ro = _recall(ours.search(xq, 10)[1], gt, 10)
    rf = _recall(ref.search(xq, 10)[1], gt, 10)
    assert ro >= rf - 0.06, (ro, rf)  # 300 queries; the 0.01 criterion is measured by `retrieval bench ivfadc`


def test_threads_and_uint16_codes(setup):
    X, Q, ix, gt = setup
    a, b = ix.search(Q, 20, nprobe=4), ix.search(Q, 20, nprobe=4, threads=2)
    np.testing.assert_array_equal(a[1], b[1])
    wide = IVFADC(8, 2, 9, 8, n_iter=3, random_state=0).fit(X[:1500])
    wide.add(X[:1000])
    assert wide.codes_.dtype == np.uint16 and wide.codes_.max() < 512
    D, ids = wide.search(Q[:5], 1000)  # nprobe = nlist, k = n: exhaustive ADC over every list
    pos = np.argsort(wide.ids_)[ids]
    lists = np.searchsorted(wide.offsets_, pos, side="right") - 1
    rec = wide.centroids_[lists] + wide.pq_.decode(wide.codes_[pos.reshape(-1)]).reshape(5, 1000, 16)
    np.testing.assert_allclose(D, ((Q[:5, None, :] - rec) ** 2).sum(-1), rtol=1e-4, atol=1e-3)


def test_load_rejects_offsets_that_do_not_match_the_codes(setup, tmp_path):
    _, _, ix, _ = setup
    ix.save(tmp_path / "idx")
    offsets = np.load(tmp_path / "idx" / "offsets.npy")
    offsets[-1] -= 1
    np.save(tmp_path / "idx" / "offsets.npy", offsets)
    with pytest.raises(FormatError, match="offsets do not match the codes"):
        IVFADC.load(tmp_path / "idx")


def test_public_names_stay_importable_from_their_modules():
    from retrieval.search.invfile import METHODS, InvertedFile, histogram_rows, topk_smallest
    from retrieval.search.ivfadc import IVFADC as Direct

    assert Direct is IVFADC and METHODS == ("l1", "l2", "delta1", "delta2") and callable(InvertedFile.search)
    assert [w.tolist() for w, _ in histogram_rows([np.array([3, 1, 3])], 4)] == [[1, 3]]
    np.testing.assert_array_equal(topk_smallest(np.array([3.0, 1.0, 2.0, 1.0]), 3), [1, 3, 2])
