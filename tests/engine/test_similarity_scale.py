"""The similarity scale of every first stage (retrieval.engine.hits, docs/formats.md "Scores"): a hit's first-stage
score relative to the score of the query photo's own stored encoding, clipped to [0, 1].

On synthetic global vectors (each stage: the exact inner product in float32 and float16, the IVFADC shortlist
re-scored exactly, PQ codes by ADC, IVFADC codes, binary codes with each distance) and synthetic object scenes (BoW
l1 / l2 / delta_1 / delta_2 with and without idf, ASMK*): the query photo scores 1, whether it is stored or not;
every similarity lies in [0, 1] and never increases down the first-stage list; with a reference (query expansion)
the reference's own encoding scores 1. The same on real photos, indexed and as outside copies, for every user
preset: tests/cli/test_query_scores.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import publish_state

from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.object.searcher import ObjectSearcher
from retrieval.engine.pipeline import make_backend
from retrieval.engine.presets import load_preset
from retrieval.features import LocalFeatures

D_GLOBAL = 32
TOL = 1e-3


def unit_rows(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(12, d))   # clustered, like global image vectors
    X = centers[rng.integers(0, 12, n)] + 0.7 * rng.normal(size=(n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def vectors():
    V = unit_rows(600, D_GLOBAL, 0)
    ids = np.arange(600, dtype=np.int64) * 2 + 5   # ids are not row numbers
    return V, ids


def global_backend(V, ids, tmp_path, kind):
    """A backend of ``kind`` holding ``V`` under ``ids`` (codes trained on ``V``)."""
    from retrieval.codes import PCAEITQ, ProductQuantizer
    from retrieval.search import IVFADC

    if kind.startswith("flat") or kind == "ivfadc-shortlist":
        preset = load_preset("default")
        preset["index"] = dict(preset["index"], vectors="float16" if kind == "flat16" else "float32")
        if kind == "ivfadc-shortlist":   # the IVFADC shortlist, built when the state is saved
            preset["index"].update(min_images=100, nlist=8, M=8, nbits=5, nprobe=2, shortlist=50)
        b = GlobalBackend(preset)
        b.add_vectors(ids, V)
        if kind == "ivfadc-shortlist":
            b.encoder.local_pca = type("P", (), {"n_components": 4})()  # only .dim is read when saving
            b.preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
            gen = publish_state(b, tmp_path)
            b = GlobalBackend(preset)
            b.load_state(gen)
            assert b.stage.segment_info()["quantizer_nlist"] == 8
        return b
    if kind in ("adc", "ivfadc_adc"):
        preset = load_preset("default")
        preset["index"] = {"type": kind, "M": 8, "nbits": 5, "nlist": 8, "nprobe": 8}
        b = make_backend(preset)
        if kind == "adc":
            b.stage.base.pq = ProductQuantizer(M=8, nbits=5, random_state=0).fit(V)
        else:
            b.stage.base.ivf = IVFADC(nlist=8, M=8, nbits=5, nprobe=8, random_state=0).fit(V)
    else:
        preset = load_preset("compact")
        b = make_backend(preset)
        b.stage.base.embedding = PCAEITQ(nbits=32, random_state=0).fit(V)
    b.stage.add(ids, iter([(0, V)]))
    return b


GLOBAL_STAGES = [("flat32", {}), ("flat16", {}), ("ivfadc-shortlist", {}), ("adc", {}), ("ivfadc_adc", {}),
                 *[("binary", {"distance": d}) for d in ("hamming", "expectation", "expectation_hat", "lower_bound")]]


def check_scale(hits):
    sims = [h.similarity for h in hits]
    assert all(0.0 <= s <= 1.0 for s in sims), sims
    assert all(a >= b for a, b in zip(sims, sims[1:], strict=False)), sims   # never increases down the list
    assert all(h.score == h.similarity for h in hits)


@pytest.mark.parametrize(("kind", "options"), GLOBAL_STAGES, ids=[k + "-" + "".join(o.values()) for k, o in
                                                                   GLOBAL_STAGES])
def test_global_stages_give_the_query_photo_one(vectors, tmp_path, kind, options):
    V, ids = vectors
    b = global_backend(V, ids, tmp_path, kind)
    exact_order = kind in ("flat32", "flat16", "ivfadc-shortlist", "adc") or options.get("distance") in (
        "hamming", "lower_bound")   # the query's own code has the smallest distance of any code
    for row in (0, 17, 333):
        q = V[row].copy()   # the stored photo's vector: an indexed query and an outside copy give the same one
        hits = b.first_stage(q, len(ids), **options)
        check_scale(hits)
        own = {h.id: h.similarity for h in hits}
        assert own[int(ids[row])] == pytest.approx(1.0, abs=TOL)
        assert hits[0].similarity == pytest.approx(1.0, abs=TOL)
        if exact_order:
            assert int(ids[row]) in [h.id for h in hits if h.similarity >= 1.0 - TOL]
        # the least similar photos are far below 1: the scale is not (1 + cos) / 2
        assert hits[-1].similarity < 0.2
    # a query without features (a zero vector) scores 0 against every photo (a binary embedding centres its input:
    # the zero vector projects to a point like any other)
    if kind != "binary":
        assert all(h.similarity == 0.0 for h in b.first_stage(np.zeros(D_GLOBAL, np.float32), 10, **options))
    # exact inner products: the similarity is the cosine (float32 rows) or within 1e-3 of it (float16)
    if kind in ("flat32", "flat16", "ivfadc-shortlist"):
        q = unit_rows(1, D_GLOBAL, 9)[0]
        row_of = {int(i): r for r, i in enumerate(ids)}
        for h in b.first_stage(q, 20):
            assert h.similarity == pytest.approx(np.clip(float(V[row_of[h.id]] @ q), 0, 1), abs=TOL)


@pytest.mark.parametrize(("kind", "options"), GLOBAL_STAGES, ids=[k + "-" + "".join(o.values()) for k, o in
                                                                   GLOBAL_STAGES])
def test_a_reference_scores_one_and_keeps_the_order(vectors, tmp_path, kind, options):
    """Query expansion searches with an expanded vector and passes the query's as ``reference``: the query photo
    still scores 1 and the expanded search's order is unchanged."""
    V, ids = vectors
    b = global_backend(V, ids, tmp_path, kind)
    q = V[40]
    q2 = q + V[41] + V[42]
    q2 = (q2 / np.linalg.norm(q2)).astype(np.float32)
    plain = b.first_stage(q2, 60, **options)
    expanded = b.first_stage(q2, 60, reference=q, **options)
    assert [h.id for h in expanded] == [h.id for h in plain]
    check_scale(expanded)
    sims = {h.id: h.similarity for h in expanded}
    if int(ids[40]) in sims:
        assert sims[int(ids[40])] == pytest.approx(1.0, abs=TOL)


# ---------------------------------------------------------------------------------------------- object stages
D_LOCAL = 32


def scene(rng, obj, xy, shift, n_clutter, size=(640, 480)):
    """An object's features (``obj`` descriptors at ``xy + shift``) plus clutter."""
    frames = np.zeros((len(xy) + n_clutter, 6), np.float32)
    frames[:len(xy), :2] = xy + shift
    frames[len(xy):, 0] = rng.uniform(0, size[0] - 1, n_clutter)
    frames[len(xy):, 1] = rng.uniform(0, size[1] - 1, n_clutter)
    frames[:, 2:] = [3, 0, 0, 3]
    desc = np.concatenate([obj + 0.03 * rng.normal(size=obj.shape), rng.normal(size=(n_clutter, D_LOCAL))])
    return LocalFeatures(frames=frames, descriptors=desc.astype(np.float32), image_size=size)


@pytest.fixture(scope="module")
def scenes():
    rng = np.random.default_rng(3)
    objects = [rng.normal(size=(40, D_LOCAL)).astype(np.float32) for _ in range(5)]
    xy = rng.uniform(0, 100, (40, 2))
    db = [scene(rng, objects[j % 5], xy, rng.uniform(100, 300, 2), int(rng.integers(20, 150))) for j in range(15)]
    return db, objects, xy


@pytest.fixture(scope="module", params=[False, True], ids=["no-idf", "idf"])
def searcher(request, scenes):
    db, _, _ = scenes
    s = ObjectSearcher(300, rootsift=False, idf=request.param, shortlist=10, vocabulary_params={"n_iter": 3},
                       signatures=True, query_words=3, random_state=0)
    s.fit(db).add(np.arange(100, 100 + len(db)), db)
    s.commit()
    return s


OBJECT_STAGES = [(m, r) for m in ("l1", "l2", "delta1", "delta2") for r in ("none", "exact")] + [("asmk", "none")]


@pytest.mark.parametrize(("method", "rerank"), OBJECT_STAGES, ids=[f"{m}-{r}" for m, r in OBJECT_STAGES])
def test_object_stages_give_the_query_photo_one(searcher, scenes, method, rerank):
    """BoW dissimilarities (inverted-file scores, or exact re-scoring) and ASMK* (whose inverted-file score is
    exact): the query photo scores 1."""
    db, _, _ = scenes
    for j in (0, 4, 9):
        hits = searcher.search(db[j], k=10, method=method, alpha=3.0 if method == "asmk" else 0.5, rerank=rerank)
        check_scale(hits)
        own = {h.id: h.similarity for h in hits}
        assert own[100 + j] == pytest.approx(1.0, abs=TOL)
        assert hits[0].similarity == pytest.approx(1.0, abs=TOL)
        # the other views of the same object (j +- 5) score below the photo itself (their clutter differs); with
        # the selective kernel the unrelated scenes score below them
        same = [own[100 + i] for i in range(j % 5, len(db), 5) if i != j and 100 + i in own]
        assert same and all(s < 1.0 - TOL for s in same)
        others = [s for i, s in own.items() if (i - 100) % 5 != j % 5]
        if method == "asmk":
            assert not others or max(others) < min(same)


@pytest.mark.parametrize("method", ["l1", "l2", "delta1", "delta2", "asmk"])
def test_a_query_without_features_scores_zero(searcher, method):
    empty = LocalFeatures(frames=np.zeros((0, 6), np.float32), descriptors=np.zeros((0, D_LOCAL), np.float32),
                          image_size=(640, 480))
    hits = searcher.search(empty, k=5, method=method, rerank="none")
    assert len(hits) == 5 and all(h.similarity == 0.0 for h in hits)


@pytest.mark.parametrize("method", ["l1", "asmk"])
def test_object_query_expansion_keeps_the_query_photo_at_one(searcher, scenes, method):
    """After query expansion the query photo still scores 1; a verified hit keeps its similarity to the query
    (the first round's), not its score under the expanded query."""
    db, _, _ = scenes
    feats = {100 + i: f for i, f in enumerate(db)}
    kw = {"k": 10, "method": method, "alpha": 3.0 if method == "asmk" else 0.5, "rerank": "spatial",
          "get_features": feats.__getitem__}
    plain = searcher.search(db[2], **kw)
    expanded = searcher.search(db[2], query_expansion=2, **kw)
    assert expanded[0].id == 102 and expanded[0].verified
    assert expanded[0].similarity == pytest.approx(1.0, abs=TOL)
    first = {h.id: h.similarity for h in plain}
    verified = [h for h in expanded if h.verified]
    assert len(verified) >= 3   # the query and the other views of its object
    for h in verified:
        assert h.similarity == pytest.approx(first[h.id], abs=1e-9)
    assert all(0.0 <= h.similarity <= 1.0 for h in expanded)
    rest = [h for h in expanded if not h.verified]
    assert all(a.similarity >= b.similarity for a, b in zip(rest, rest[1:], strict=False))
    # the expansion is applied: the unverified hits are scored by the expanded query
    assert any(abs(h.similarity - first[h.id]) > 1e-6 for h in rest if h.id in first)
