"""Application: the search backends of retrieval.engine (one module per kind) on synthetic vectors (no images).

The global backend switches from exhaustive inner product to IVFADC once the collection reaches
``index.min_images``: with every list probed and a shortlist as long as the collection its ranking must equal
the exhaustive one; with few lists probed recall stays high. State round trip through a generation folder.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrieval.rerank.spatial as spatial
from retrieval.engine.backend import write_npy
from retrieval.engine.codes_backend import CodesBackend
from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.hits import Hit
from retrieval.engine.pipeline import make_backend
from retrieval.engine.presets import load_preset
from retrieval.features import LocalFeatures
from retrieval.rerank.spatial import distinct_inliers, plausible_transform, spatial_rerank


def backend_with(vectors, ids, **index):
    preset = load_preset("default")
    preset["index"] = dict(preset["index"], **index)
    b = GlobalBackend(preset)
    b._ids = np.asarray(ids, np.int64)
    b._vectors = np.asarray(vectors, np.float32)
    b.projection = None
    return b


def unit_rows(n, d, seed):
    rng = np.random.default_rng(seed)
    # clustered data, like global image vectors
    centers = rng.normal(size=(20, d))
    X = centers[rng.integers(0, 20, n)] + 0.6 * rng.normal(size=(n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def exact_top(V, ids, q, k):
    s = V @ q
    order = np.lexsort((ids, -s))[:k]
    return [int(ids[i]) for i in order]


@pytest.fixture(scope="module")
def data():
    V = unit_rows(1200, 32, 0)
    ids = np.arange(1200, dtype=np.int64) * 3 + 7  # ids are not row numbers
    Q = unit_rows(30, 32, 1)
    return V, ids, Q


def test_ivfadc_with_all_lists_and_full_shortlist_equals_exhaustive(tmp_path, data):
    V, ids, Q = data
    b = backend_with(V, ids, min_images=1000, nlist=16, M=8, nbits=6, nprobe=16, shortlist=1200)
    b.local_pca = type("P", (), {"n_components": 4})()  # only .dim is read when saving
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    b.save_state(tmp_path)
    assert (tmp_path / "ivfadc").is_dir()
    c = backend_with(np.zeros((0, 32)), [], min_images=1000, nlist=16, M=8, nbits=6, nprobe=16, shortlist=1200)
    c.load_state(tmp_path)
    assert c.ivf is not None and np.array_equal(c.ids, ids)
    for q in Q:
        got = [h.id for h in c.first_stage(q, 10)]
        assert got == exact_top(V, ids, q, 10)


def test_ivfadc_few_probes_keeps_recall(tmp_path, data):
    V, ids, Q = data
    b = backend_with(V, ids, min_images=1000, nlist=16, M=8, nbits=6, nprobe=4, shortlist=100)
    b.local_pca = type("P", (), {"n_components": 4})()
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    b.save_state(tmp_path)
    c = backend_with(np.zeros((0, 32)), [], min_images=1000, nlist=16, M=8, nbits=6, nprobe=4, shortlist=100)
    c.load_state(tmp_path)
    recall = np.mean([len(set(h.id for h in c.first_stage(q, 10)) & set(exact_top(V, ids, q, 10))) / 10
                      for q in Q])
    assert recall >= 0.9
    # scores are exact inner products even when the shortlist came from IVFADC
    q = Q[0]
    for h in c.first_stage(q, 5):
        row = int(np.flatnonzero(ids == h.id)[0])
        assert h.score == pytest.approx(float(V[row] @ q), abs=1e-5)


def test_below_min_images_is_exhaustive_and_remove_drops_ids(tmp_path, data):
    V, ids, Q = data
    b = backend_with(V[:300], ids[:300], min_images=1000)
    b.local_pca = type("P", (), {"n_components": 4})()
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    b.remove(ids[:10])
    b.save_state(tmp_path)
    assert not (tmp_path / "ivfadc").exists()
    c = backend_with(np.zeros((0, 32)), [])
    c.load_state(tmp_path)
    got = [h.id for h in c.first_stage(Q[0], 300)]
    assert len(got) == 290 and not set(got) & set(ids[:10].tolist())
    assert got == exact_top(V[10:300], ids[10:300], Q[0], 300)


def test_write_npy_round_trip(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_npy(tmp_path / "a.npy", a)
    assert np.array_equal(np.load(tmp_path / "a.npy", allow_pickle=False), a)


def test_spatial_rerank_orders_verified_first(monkeypatch):
    """With a stub verifier: verified hits (>= min_inliers) first by inliers, the rest in first-stage order."""
    rng = np.random.default_rng(0)
    desc = (rng.random((40, 128)) * 255).astype(np.uint8)
    frames = np.zeros((40, 6), np.float32)
    frames[:, 0] = rng.random(40) * 100
    frames[:, 1] = rng.random(40) * 100
    frames[:, 2] = frames[:, 5] = 3
    query = LocalFeatures(frames, desc, (100, 100))
    n_in = {1: 2, 2: 30, 3: 8, 4: 0}

    def fake_verify(fq, fdb, matches, **kw):
        mask = np.zeros(len(matches), bool)
        mask[:n_in[current[0]]] = True
        return mask, np.array([[1.0, 0, 0], [0, 1.0, 0]])

    current = [0]

    def get_features(i):
        current[0] = i
        return query  # identical features: every descriptor matches itself

    monkeypatch.setattr(spatial, "verify_affine", fake_verify)
    hits = [Hit(1, 0.9), Hit(2, 0.8), Hit(3, 0.7), Hit(4, 0.6), Hit(5, 0.5)]
    out = spatial_rerank(hits, query, (0, 0, 99, 99), get_features, shortlist=4, min_inliers=6, ratio=0.85)
    assert [h.id for h in out] == [2, 3, 1, 4, 5]
    assert [h.inliers for h in out] == [30, 8, 2, 0, None]
    assert out[0].box == (0.0, 0.0, 99.0, 99.0) and out[2].box is None


def test_adc_backend_ranks_by_adc_distance_to_decoded_codes(tmp_path, data):
    """index.type 'adc': the ranking and scores are the ADC distances (squared distance of the query to each
    decoded code, Jegou et al. 2012, eq. 21), through a saved and re-loaded generation."""
    from retrieval.codes import ProductQuantizer

    V, ids, Q = data
    preset = load_preset("default")
    preset["index"] = {"type": "adc", "M": 8, "nbits": 6}
    b = make_backend(preset)
    assert isinstance(b, CodesBackend)
    b.pq = ProductQuantizer(M=8, nbits=6, random_state=0).fit(V)
    b._ids = ids.copy()
    b._codes = b.pq.encode(V)
    b.remove(ids[:5])
    b.save_state(tmp_path)
    c = make_backend(preset)
    c.pq = b.pq
    c.load_state(tmp_path)
    decoded = b.pq.decode(np.asarray(c._codes))
    for q in Q[:5]:
        d = ((decoded - q) ** 2).sum(axis=1)
        order = np.lexsort((c.ids, d))[:10]
        hits = c.first_stage(q, 10)
        assert [h.id for h in hits] == [int(c.ids[o]) for o in order]
        assert np.allclose([-h.score for h in hits], d[order], atol=1e-4)


def test_distinct_inliers_and_degenerate_transforms():
    matches = np.array([[0, 5], [1, 5], [2, 5], [3, 6], [4, 7], [4, 8]])
    mask = np.array([True, True, True, True, True, False])
    assert distinct_inliers(matches, mask) == 3  # db features 5, 6, 7 (five query features)
    assert distinct_inliers(matches, np.zeros(6, bool)) == 0
    assert plausible_transform(np.array([[2.0, 0, 3], [0, 0.5, 1], [0, 0, 1]]))
    assert not plausible_transform(np.array([[0.01, 0, 3], [0, 0.01, 1]]))  # collapses areas 10,000x
    assert not plausible_transform(np.array([[20.0, 0, 0], [0, 20.0, 0]]))


def test_make_backend_picks_one_class_per_kind_and_index_type():
    from retrieval.engine.binary_backend import BinaryBackend
    from retrieval.engine.object_backend import ObjectBackend

    assert type(make_backend(load_preset("default"))) is GlobalBackend
    assert type(make_backend(load_preset("paper-002-fisher64-adc16x8"))) is CodesBackend
    assert type(make_backend(load_preset("paper-002-ivfadc"))) is CodesBackend
    assert type(make_backend(load_preset("compact"))) is BinaryBackend
    assert type(make_backend(load_preset("object"))) is ObjectBackend


def test_hit_json_keys_and_rounding():
    """The ``retrieval query --json`` object (docs/formats.md): rank, path, score rounded to 6 decimals, and
    inliers / box (1 decimal) only when set; the catalog id is not part of it."""
    bare = Hit(7, 0.123456789, rank=1, path="/p/a.jpg")
    assert bare.to_json() == {"rank": 1, "path": "/p/a.jpg", "score": 0.123457}
    full = Hit(7, -2.0, inliers=np.int64(12), box=(1.04, 2.06, 30.0, 40.44), rank=3, path="/p/b.png")
    js = full.to_json()
    assert js == {"rank": 3, "path": "/p/b.png", "score": -2.0, "inliers": 12, "box": [1.0, 2.1, 30.0, 40.4]}
    assert list(js) == ["rank", "path", "score", "inliers", "box"] and type(js["inliers"]) is int
    assert Hit(1, 0.5, inliers=0, rank=1, path="x").to_json()["inliers"] == 0  # verified with 0 inliers: kept


def test_object_backend_reports_negated_dissimilarity_and_inliers_only_when_spatial():
    """The object backend turns the searcher's hits (dissimilarity, smaller is better) into higher-is-better
    scores; inliers are set only by spatial re-ranking."""
    from retrieval.engine.object_backend import ObjectBackend

    class Searcher:
        asked = []

        def search(self, query, *, bbox, k, method, alpha, rerank):
            self.asked.append(rerank)
            inl = 9 if rerank == "spatial" else None
            return [Hit(3, 0.25, inl, (1.0, 2.0, 3.0, 4.0) if inl else None), Hit(5, 0.5, 0 if inl else None)]

    b = ObjectBackend(load_preset("object"))
    b.searcher, b._ids = Searcher(), np.array([3, 5])
    for rerank in ("none", "exact", "spatial"):
        hits = b.search(None, k=2, query_box=None, rerank=rerank)
        assert [(h.id, h.score) for h in hits] == [(3, -0.25), (5, -0.5)]
        if rerank == "spatial":
            assert [(h.inliers, h.box) for h in hits] == [(9, (1.0, 2.0, 3.0, 4.0)), (0, None)]
        else:
            assert [(h.inliers, h.box) for h in hits] == [(None, None), (None, None)]
    assert Searcher.asked == ["none", "exact", "spatial"]  # an explicit "none" is not turned into "exact"
    b.search(None, k=2, query_box=None)
    assert Searcher.asked[-1] == "spatial"  # the preset's search.rerank
    with pytest.raises(ValueError, match="--rerank must be none, exact or spatial"):
        b.search(None, k=2, query_box=None, rerank="geometric")
