"""Application: the search backends of retrieval.engine (one module per kind) on synthetic vectors (no images).

The global backend switches from exhaustive inner product to IVFADC once the collection reaches
``index.min_images``: with every list probed and a shortlist as long as the collection its ranking must equal
the exhaustive one; with few lists probed recall stays high. State round trip through a generation folder.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import publish_state

from retrieval.engine.backend import write_npy
from retrieval.engine.code_stages import BinaryStage, CodesStage
from retrieval.engine.first_stages import VectorStage
from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.hits import Hit
from retrieval.engine.params import ParamError, SearchContext, SearchParams
from retrieval.engine.pipeline import make_backend
from retrieval.engine.presets import load_preset
from retrieval.rerank.spatial import distinct_inliers, plausible_transform


def backend_with(rows, ids, search=None, **index):
    vectors = rows
    preset = load_preset("default")
    preset["index"] = dict(preset["index"], **index)
    preset["search"] = dict(preset["search"], **(search or {}))
    b = GlobalBackend(preset)
    if len(ids):
        b.add_vectors(np.asarray(ids, np.int64), np.asarray(vectors, np.float32))
    b.encoder.projection = None
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
    b.encoder.local_pca = type("P", (), {"n_components": 4})()  # only .dim is read when saving
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    gen = publish_state(b, tmp_path)
    c = backend_with(np.zeros((0, 32)), [], min_images=1000, nlist=16, M=8, nbits=6, nprobe=16, shortlist=1200)
    c.load_state(gen)
    assert c.stage.ivf is not None and np.array_equal(c.ids, ids)
    for q in Q:
        got = [h.id for h in c.first_stage(q, 10)]
        assert got == exact_top(V, ids, q, 10)


def test_ivfadc_few_probes_keeps_recall(tmp_path, data):
    V, ids, Q = data
    b = backend_with(V, ids, min_images=1000, nlist=16, M=8, nbits=6, nprobe=4, shortlist=100)
    b.encoder.local_pca = type("P", (), {"n_components": 4})()
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    gen = publish_state(b, tmp_path)
    c = backend_with(np.zeros((0, 32)), [], min_images=1000, nlist=16, M=8, nbits=6, nprobe=4, shortlist=100)
    c.load_state(gen)
    recall = np.mean([len(set(h.id for h in c.first_stage(q, 10)) & set(exact_top(V, ids, q, 10))) / 10
                      for q in Q])
    assert recall >= 0.9
    # similarities are exact inner products with the stored (float16) vectors even when the shortlist came from
    # IVFADC, relative to the query's inner product with its own stored vector; float16 storage moves them by
    # less than 1e-3
    q = Q[0]
    own = float(q.astype(np.float16).astype(np.float32) @ q)
    for h in c.first_stage(q, 5):
        row = int(np.flatnonzero(ids == h.id)[0])
        stored = V[row].astype(np.float16).astype(np.float32)
        assert h.similarity == pytest.approx(np.clip(float(stored @ q) / own, 0, 1), abs=1e-5)
        assert h.similarity == pytest.approx(np.clip(float(V[row] @ q), 0, 1), abs=1e-3)
        assert h.score == h.similarity and not h.verified and h.distance is None


def test_below_min_images_is_exhaustive_and_remove_drops_ids(tmp_path, data):
    V, ids, Q = data
    b = backend_with(V[:300], ids[:300], min_images=1000)
    b.encoder.local_pca = type("P", (), {"n_components": 4})()
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    b.remove(ids[:10])
    gen = publish_state(b, tmp_path)
    c = backend_with(np.zeros((0, 32)), [])
    c.load_state(gen)
    assert c.stage.ivf is None
    got = [h.id for h in c.first_stage(Q[0], 300)]
    assert len(got) == 290 and not set(got) & set(ids[:10].tolist())
    stored = V.astype(np.float16).astype(np.float32)   # the vectors as the generation stores them
    assert got == exact_top(stored[10:300], ids[10:300], Q[0], 300)


def test_write_npy_round_trip(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_npy(tmp_path / "a.npy", a)
    assert np.array_equal(np.load(tmp_path / "a.npy", allow_pickle=False), a)




def test_adc_backend_ranks_by_adc_distance_to_decoded_codes(tmp_path, data):
    """index.type 'adc': the ranking and scores are the ADC distances (squared distance of the query to each
    decoded code, Jegou et al. 2012, eq. 21), through a saved and re-loaded generation."""
    from retrieval.codes import ProductQuantizer

    V, ids, Q = data
    preset = load_preset("default")
    preset["index"] = {"type": "adc", "M": 8, "nbits": 6}
    b = make_backend(preset)
    assert isinstance(b.stage.base, CodesStage)
    pq = b.stage.base.pq = ProductQuantizer(M=8, nbits=6, random_state=0).fit(V)
    b.stage.add(ids.copy(), iter([(0, V)]))
    b.remove(ids[:5])
    b.encoder.local_pca = type("P", (), {"n_components": 4})()
    b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    gen = publish_state(b, tmp_path)
    c = make_backend(preset)
    c.stage.base.pq = pq
    c.load_state(gen)
    [segment] = c.stage.segments
    assert np.array_equal(segment.stage.ids, c.ids)
    decoded = pq.decode(np.asarray(segment.stage.row_arrays()["codes"]))
    for q in Q[:5]:
        d = ((decoded - q) ** 2).sum(axis=1)
        order = np.lexsort((c.ids, d))[:10]
        hits = c.first_stage(q, 10)
        assert [h.id for h in hits] == [int(c.ids[o]) for o in order]
        assert np.allclose([h.distance for h in hits], d[order], atol=1e-4)
        own = float(((pq.decode(pq.encode(q[None])) - q) ** 2).sum())   # the query's distance to its own code
        assert np.allclose([h.similarity for h in hits], np.clip(1 - (d[order] - own) / 2, 0, 1), atol=1e-4)


def test_distinct_inliers_and_degenerate_transforms():
    matches = np.array([[0, 5], [1, 5], [2, 5], [3, 6], [4, 7], [4, 8]])
    mask = np.array([True, True, True, True, True, False])
    assert distinct_inliers(matches, mask) == 3  # db features 5, 6, 7 (five query features)
    assert distinct_inliers(matches, np.zeros(6, bool)) == 0
    assert plausible_transform(np.array([[2.0, 0, 3], [0, 0.5, 1], [0, 0, 1]]))
    assert not plausible_transform(np.array([[0.01, 0, 3], [0, 0.01, 1]]))  # collapses areas 10,000x
    assert not plausible_transform(np.array([[20.0, 0, 0], [0, 20.0, 0]]))


def test_make_backend_composes_one_first_stage_per_index_type():
    from retrieval.engine.object.backend import ObjectBackend

    for name, stage, kind in (("default", VectorStage, "global"), ("paper-002-fisher64-adc16x8", CodesStage, "global"),
                              ("paper-002-ivfadc", CodesStage, "global"), ("compact", BinaryStage, "binary")):
        b = make_backend(load_preset(name))
        assert type(b) is GlobalBackend and type(b.stage.base) is stage and b.kind == kind, name
        assert b.encodes_vectors == (stage is VectorStage) and b.shardable == (stage is VectorStage)
    assert type(make_backend(load_preset("object"))) is ObjectBackend


def test_hit_json_keys_and_rounding():
    """The ``retrieval query --json`` object (docs/formats.md): the catalog id, rank, path, score rounded to 6
    decimals, inliers / box (1 decimal) only when set, then similarity and verified always, distance only when
    set."""
    bare = Hit(7, 0.123456789, rank=1, path="/p/a.jpg", similarity=0.123456789)
    assert bare.to_json() == {"id": 7, "rank": 1, "path": "/p/a.jpg", "score": 0.123457, "similarity": 0.123457,
                              "verified": False}
    full = Hit(7, 1.5, inliers=np.int64(12), box=(1.04, 2.06, 30.0, 40.44), rank=3, path="/p/b.png",
               similarity=0.25, verified=True, distance=-3285.2000004)
    js = full.to_json()
    assert js == {"id": 7, "rank": 3, "path": "/p/b.png", "score": 1.5, "inliers": 12, "box": [1.0, 2.1, 30.0, 40.4],
                  "similarity": 0.25, "verified": True, "distance": -3285.2}
    assert list(js) == ["id", "rank", "path", "score", "inliers", "box", "similarity", "verified", "distance"]
    assert type(js["inliers"]) is int and js["verified"] is True


def searched(backend, query, get_features=None, **fields):
    """``backend.search`` as a searcher calls it: the parameters checked against the backend's offer."""
    params = SearchParams.of(**fields).resolve(backend.offer, backend.config.search)
    return backend.search(query, None, params, SearchContext(get_features))


def test_object_backend_passes_the_searchers_ranked_hits_through():
    """The object backend returns the searcher's hits as they are (ranking key in ``score``, normalised
    ``similarity``, raw dissimilarity in ``distance``); query expansion is asked only with spatial re-ranking;
    its verifier is built once with the model, from the preset's ratio and verify_query_features."""
    from retrieval.engine.object.backend import ObjectBackend

    class Searcher:
        asked = []
        ntotal = 2

        def verifier(self, ratio, cells=None, query_features=0):
            return ("verifier", ratio, query_features)

        def run(self, features, box, params, context, *, verifier, n_verify):
            assert verifier == ("verifier", 0.85, 1000)   # the preset's search.ratio and verify_query_features
            self.asked.append((params.rerank, params.query_expansion))
            self.verify_top = n_verify
            self.features = context.get_features
            v = params.rerank == "spatial"
            return [Hit(3, 1.5 if v else 0.8, 10 if v else None, (1.0, 2.0, 3.0, 4.0) if v else None,
                        similarity=0.8, verified=v, distance=0.25),
                    Hit(5, 0.6, similarity=0.6, distance=0.5)]

    b = ObjectBackend(load_preset("object"))
    b.model = b.searcher = Searcher()
    b._settle()
    assert b.verifier is b.verifier == ("verifier", 0.85, 1000)
    for rerank in ("none", "exact", "spatial"):
        hits = searched(b, None, k=2, rerank=rerank)
        assert [(h.id, h.distance, h.similarity) for h in hits] == [(3, 0.25, 0.8), (5, 0.5, 0.6)]
        assert [h.verified for h in hits] == [rerank == "spatial", False]
        assert hits[0].score >= hits[1].score
    assert [a for a, _ in Searcher.asked] == ["none", "exact", "spatial"]  # an explicit "none" is not "exact"
    def stored(i):
        return None

    searched(b, None, stored, k=2)
    assert Searcher.asked[-1] == ("spatial", 0)  # the preset's search.rerank; query expansion off by default
    assert b.searcher.features is stored  # verification reads the stored features (ratio-test matches)
    searched(b, None, k=2, query_expansion=3)
    assert Searcher.asked[-1] == ("spatial", 3)
    # images verified: the preset's search.verify_top (object: 50; accurate: 30), or the caller's
    assert b.searcher.verify_top == 50
    searched(b, None, k=2, shortlist=10)
    assert b.searcher.verify_top == 10
    a = ObjectBackend(load_preset("accurate"))
    a.model = a.searcher = Searcher()
    a._settle()
    searched(a, None, k=2)
    assert a.searcher.verify_top == 30
    with pytest.raises(ParamError, match="needs spatial re-ranking") as refused:
        searched(b, None, k=2, rerank="exact", query_expansion=2)
    assert (refused.value.param, refused.value.value) == ("query_expansion", 2)
    with pytest.raises(ParamError, match="expected one of none, exact, spatial") as refused:
        searched(b, None, k=2, rerank="geometric")
    assert (refused.value.param, refused.value.value) == ("rerank", "geometric")


def test_average_query_expansion_against_a_numpy_oracle(data):
    """average_query_expansion: the query plus the vectors of the best verified hits (the query's own image
    skipped), normalised, searched again; first-round verification outcomes are kept, new shortlist entries are
    verified, and the list follows the one ordering key."""
    from retrieval.engine.hits import finish_ranking
    from retrieval.engine.query_expansion import average_query_expansion

    def expand(q, hits, checked, n_qe, depth, verify):
        return average_query_expansion(q, hits, checked, n_qe, first_stage=b.first_stage, verify=verify,
                                       vectors_of=lambda ids: b.vectors_of(ids, None), depth=depth, shortlist=50)

    V, ids, _ = data
    b = backend_with(V[:200], ids[:200], search={"shortlist": 50}, vectors="float32")
    q = V[0].copy()  # the query is indexed image ids[0]
    first = finish_ranking(b.first_stage(q, 60), reranked=False)
    assert first[0].id == ids[0]
    good = {int(ids[0]), int(first[5].id), int(first[9].id), int(first[30].id)}
    asked = []

    def verify(candidates):
        asked.extend(h.id for h in candidates)
        for h in candidates:
            if h.id in good:
                h.verified, h.inliers = True, 100 - len(asked)
        return candidates

    checked = verify(first[:50])
    hits = finish_ranking(first, reranked=True)
    assert [h.id for h in hits[:4]] == [int(ids[0]), first[5].id, first[9].id, first[30].id]
    asked.clear()
    out = expand(q, hits, {h.id: h for h in checked}, 2, 60, verify)
    row = {int(i): r for r, i in enumerate(ids[:200])}
    q2 = q + V[row[first[5].id]] + V[row[first[9].id]]  # ids[0] is the query itself: skipped
    q2 /= np.linalg.norm(q2)
    oracle = exact_top(V[:200], ids[:200], q2, 60)
    assert set(asked) == set(oracle[:50]) - {h.id for h in checked}  # only new shortlist entries verified
    assert [h.id for h in out if h.verified][:4] == [int(ids[0]), first[5].id, first[9].id, first[30].id]
    rest = [h.id for h in out if not h.verified]
    assert rest == [i for i in oracle if i not in good][:len(rest)]
    for h in out:   # verified: the similarity to the query; the others: to the expanded query, relative to its
        # score of the query's own vector (the query photo stays at 1)
        want = float(V[row[h.id]] @ q) if h.verified else float(V[row[h.id]] @ q2) / float(q2 @ q)
        assert h.similarity == pytest.approx(np.clip(want, 0, 1), abs=1e-5)
    assert out[0].id == ids[0] and out[0].similarity == pytest.approx(1.0, abs=1e-6)
    scores = [h.score for h in out]
    assert scores == sorted(scores, reverse=True)
    # nothing verified but the query itself: no second search
    only_self = finish_ranking(b.first_stage(q, 60), reranked=False)
    only_self[0].verified, only_self[0].inliers = True, 50
    only_self = finish_ranking(only_self, reranked=True)
    assert expand(q, only_self, {}, 3, 60, verify) is only_self


def test_shortlist_override_verifies_only_the_first_results(data, monkeypatch):
    """``search(..., shortlist=n)`` verifies the first n results of the first stage instead of the preset's
    ``search.shortlist`` (the sideways fallback's turned searches); None keeps the preset's."""
    from retrieval.rerank.verifier import Verifier

    V, ids, _ = data
    b = backend_with(V[:200], ids[:200], search={"shortlist": 50, "rerank": "spatial", "query_expansion": 0})
    monkeypatch.setattr(b, "encode", lambda queries: np.asarray(queries, np.float32))  # the query is a vector
    asked = []

    def fake_rerank(self, candidates, *args, **kwargs):
        asked.append([h.id for h in candidates])
        return candidates

    monkeypatch.setattr(Verifier, "rerank", fake_rerank)
    monkeypatch.setattr(b, "verifier", Verifier())   # the model's, built when it is trained or loaded
    q = V[3].copy()
    first = [h.id for h in searched(b, q, k=60, rerank="none")]
    assert first == exact_top(V[:200], ids[:200], q, 60)
    for n, expected in ((7, 7), (None, 50)):
        asked.clear()
        hits = searched(b, q, lambda i: None, k=60, shortlist=n)
        assert asked == [first[:expected]]
        assert [h.id for h in hits] == first   # nothing verified: the first stage's order
