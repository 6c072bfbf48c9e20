"""ObjectSearcher on synthetic scenes: box selection, exact re-ranking == inverted-file scores, persistence."""

import numpy as np
import pytest

from retrieval.core.persistence import FormatError
from retrieval.engine.hits import Hit
from retrieval.engine.object.searcher import ObjectSearcher
from retrieval.features import LocalFeatures
from retrieval.rerank.boxes import box_iou, project_box
from retrieval.rerank.spatial import distinct_inliers

D = 32


def make_scene(rng, obj_desc, obj_xy, A, t, n_clutter, size=(640, 480), noise=0.02):
    """Object features mapped by x -> A x + t, plus clutter features elsewhere."""
    xy = obj_xy @ A.T + t
    frames_o = np.zeros((len(xy), 6), np.float32)
    frames_o[:, :2] = xy
    M = (A @ np.diag([3.0, 3.0])).ravel()
    frames_o[:, 2:] = M
    frames_c = np.zeros((n_clutter, 6), np.float32)
    frames_c[:, 0] = rng.uniform(0, size[0] - 1, n_clutter)
    frames_c[:, 1] = rng.uniform(0, size[1] - 1, n_clutter)
    frames_c[:, 2:] = [3, 0, 0, 3]
    desc = np.concatenate([obj_desc + noise * rng.normal(size=obj_desc.shape),
                           rng.normal(size=(n_clutter, D))]).astype(np.float32)
    return LocalFeatures(frames=np.concatenate([frames_o, frames_c]), descriptors=desc, image_size=size)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(0)
    objects = [rng.normal(size=(40, D)).astype(np.float32) for _ in range(6)]
    obj_xy = rng.uniform(0, 100, (40, 2))
    db = []
    for j in range(12):
        o = objects[j % 6]
        ang = rng.uniform(-0.3, 0.3)
        s = rng.uniform(0.8, 1.3)
        A = s * np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
        db.append(make_scene(rng, o, obj_xy, A, rng.uniform(100, 300, 2), n_clutter=int(rng.integers(20, 200))))
    # the query: object 2 in a box at (50..150, 50..150), clutter outside the box
    q = make_scene(rng, objects[2], obj_xy, np.eye(2), np.array([50.0, 50.0]), 0)
    clutter = make_scene(rng, objects[3][:0], obj_xy[:0], np.eye(2), np.zeros(2), 300)
    keep = (clutter.frames[:, 0] > 160) | (clutter.frames[:, 1] > 160)
    q = LocalFeatures(frames=np.concatenate([q.frames, clutter.frames[keep]]),
                      descriptors=np.concatenate([q.descriptors, clutter.descriptors[keep]]), image_size=(640, 480))
    s = ObjectSearcher(300, rootsift=False, shortlist=8, vocabulary_params={"n_iter": 3}, random_state=0)
    s.fit(db).add(np.arange(100, 112), db)
    return s, db, q


@pytest.mark.parametrize("method", ["l1", "l2", "delta1", "delta2"])
def test_exact_rerank_reproduces_inverted_file_scores(world, method):
    s, _, q = world
    none = s.search(q, bbox=(50, 50, 150, 150), k=8, method=method, rerank="none")
    exact = s.search(q, bbox=(50, 50, 150, 150), k=8, method=method, rerank="exact")
    a = {h.id: h.distance for h in none}
    b = {h.id: h.distance for h in exact}
    # not spatially verified: no inliers, no box; score = similarity in [0, 1], decreasing with the dissimilarity
    assert all(type(h) is Hit and h.inliers is None and h.box is None and not h.verified for h in none + exact)
    for hits in (none, exact):
        assert all(0.0 <= h.similarity <= 1.0 and h.score == h.similarity for h in hits)
        assert [h.distance for h in hits] == sorted(h.distance for h in hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert set(a) == set(b)
    # eq. 10 takes square roots of |Q|^2 - 2 Q.m + |m|^2, a difference that nearly cancels when the object is
    # contained in T_j: summing the same terms in another order (postings vs full histogram) moves the result
    # by ~eps * |Q|^2 / sqrt(...), i.e. ~1e-8 here; l1, l2 and delta1 have no such cancellation.
    tol = 1e-6 if method == "delta2" else 1e-9
    for i in a:
        assert a[i] == pytest.approx(b[i], rel=tol, abs=tol)
    # images 102 and 108 hold object 2
    assert {none[0].id, none[1].id} == {102, 108}


def test_box_restricts_query_features(world):
    s, _, q = world
    boxed = s.search(q, bbox=(50, 50, 150, 150), k=12, method="delta1", rerank="none")
    full = s.search(q, bbox=None, k=12, method="delta1", rerank="none")
    assert [h.distance for h in boxed] != [h.distance for h in full]
    assert {boxed[0].id, boxed[1].id} == {102, 108}


def test_exclude_remove_and_persistence(world, tmp_path):
    s, db, q = world
    hits = s.search(q, bbox=(50, 50, 150, 150), k=5, rerank="exact", exclude=[102])
    assert 102 not in [h.id for h in hits] and hits[0].id == 108
    s.save(tmp_path / "os")
    back = ObjectSearcher.load(tmp_path / "os")
    for method in ("l1", "delta1"):
        a = s.search(q, bbox=(50, 50, 150, 150), k=5, method=method, rerank="exact")
        b = back.search(q, bbox=(50, 50, 150, 150), k=5, method=method, rerank="exact")
        assert [(h.id, h.score, h.distance) for h in a] == [(h.id, h.score, h.distance) for h in b]
    assert back.remove([108, 999]) == 1
    assert back.ntotal == 11
    assert back.search(q, bbox=(50, 50, 150, 150), k=1, rerank="exact")[0].id == 102
    with pytest.raises(ValueError, match="already indexed"):
        back.add([102], [db[0]])
    with pytest.raises(ValueError, match="rerank='geometric': expected one of none, exact, spatial"):
        back.search(q, rerank="geometric")


def test_forward_entries_of_a_loaded_searcher_are_read_from_its_arrays(world, tmp_path):
    """A loaded searcher finds each image's forward entry in its saved arrays (ids in any order); entries added
    and removed after loading are seen at once, and a second save writes exactly the live ones."""
    s, db, q = world
    back = ObjectSearcher.load(s.save(tmp_path / "a"))
    for i in range(100, 112):
        for x, y in zip(s.forward(i)[:3], back.forward(i)[:3], strict=True):
            np.testing.assert_array_equal(x, y)
        assert s.forward(i)[3] == back.forward(i)[3]
    back.remove([104, 100])
    back.add(np.array([7, 300]), [db[4], db[0]])   # smaller and larger ids than the saved ones
    back.commit()
    with pytest.raises(KeyError):
        back.forward(104)
    np.testing.assert_array_equal(back.forward(7)[2], s.forward(104)[2])
    again = ObjectSearcher.load(back.save(tmp_path / "b"))
    assert sorted(again.invfile_.ids_.tolist()) == sorted([7, 300] + [i for i in range(100, 112) if i not in (100, 104)])
    for i in again.invfile_.ids_.tolist():
        np.testing.assert_array_equal(again.forward(i)[0], back.forward(i)[0])
    with pytest.raises(KeyError):
        again.forward(100)


def test_spatial_rerank_boxes_and_query_expansion(world):
    s, db, q = world
    box = (50, 50, 150, 150)
    # ground truth: scene j maps the object by x -> A_j x + t_j; recover it from the stored object frames
    for qe in (False, True, 0, 1):
        hits = s.search(q, bbox=box, k=6, method="l1", rerank="spatial", query_expansion=qe)
        assert {hits[0].id, hits[1].id} == {102, 108}
        assert hits[0].inliers >= 20 and hits[1].inliers >= 20 and hits[0].verified and hits[1].verified
        assert all(not h.verified and h.inliers is None and h.box is None for h in hits[2:])
        assert hits[0].score >= hits[1].score > 1.0 > hits[2].score
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        for h in hits[:2]:
            f = db[h.id - 100].frames[:40]
            src = q.frames[:40, :2].astype(np.float64)
            A, *_ = np.linalg.lstsq(np.c_[src, np.ones(40)], f[:, :2].astype(np.float64), rcond=None)
            true = project_box(box, A.T, db[h.id - 100].image_size)
            assert box_iou(h.box, true) > 0.9, (h, true)
    with pytest.raises(ValueError, match="query_expansion"):
        s.search(q, bbox=box, rerank="exact", query_expansion=True)


def test_inliers_are_counted_one_to_one():
    # query feature 0 matched to db features 0, 1, 2 (same word, all consistent); query 1 -> db 3; query 2 -> db 3
    matches = np.array([[0, 0], [0, 1], [0, 2], [1, 3], [2, 3], [3, 4]])
    mask = np.array([True, True, True, True, True, False])
    # 5 inlier pairs, but only 3 distinct query features and 4 distinct database features support the transform
    assert distinct_inliers(matches, mask) == 3
    assert distinct_inliers(matches, np.zeros(6, bool)) == 0
    assert distinct_inliers(np.array([[0, 0], [1, 1]]), np.array([True, True])) == 2


@pytest.mark.parametrize("method", ["l1", "l2", "delta1", "delta2"])
def test_object_similarity_matches_its_formula_and_keeps_the_order(method):
    """object_similarity against the dense dissimilarities of Zhu et al. 2013 (retrieval.search.dissimilarities):
    within [0, 1], 1 for a copy of the query, strictly decreasing in the dissimilarity."""
    from retrieval.engine.object.scores import object_similarity
    from retrieval.search import dissimilarities as dis

    rng = np.random.default_rng(1)
    Q = rng.random(30) * (rng.random(30) < 0.5)
    T = np.vstack([Q, rng.random((40, 30)) * (rng.random((40, 30)) < 0.5) * rng.uniform(0.2, 5, (40, 1))])
    if method in ("l1", "l2"):
        d, weight = dis.dissimilarity(Q, T, method), float("nan")
    elif method == "delta1":
        weight = dis.delta1_wbar(Q, T, 0.5)
        d = dis.delta1(Q, T, weight)
    else:
        weight = dis.delta2_w(Q, T, 0.5)
        d = dis.delta2(Q, T, weight)
    sim = object_similarity(d, method, Q[Q > 0], weight)
    assert np.all((sim >= 0) & (sim <= 1))
    assert sim[0] == pytest.approx(1.0)  # T_0 = Q
    order = np.argsort(d, kind="stable")
    assert np.all(np.diff(sim[order]) <= 1e-12)
    if method == "delta1" and weight >= 1:
        n1 = Q.sum()
        excess = np.maximum(T - Q, 0).sum(1) + (weight - 1) * np.maximum(Q - T, 0).sum(1)
        np.testing.assert_allclose(sim, n1 / (n1 + excess), rtol=1e-9)
    with pytest.raises(ValueError, match="method must be one of"):
        object_similarity(d, "cosine", Q, weight)


def test_query_expansion_skips_the_query_own_image(world):
    """With the query's own image indexed (a whole-image query in its own collection), expansion by 1 must
    use the best verified *other* image: averaging the query with itself would change nothing."""
    s, db, q = world
    s.add([200], [q])
    feats = {100 + j: f for j, f in enumerate(db)} | {200: q}
    kw = {"bbox": None, "k": 8, "method": "l1", "rerank": "spatial", "get_features": feats.__getitem__}
    try:
        def dist(hits):
            return {h.id: h.distance for h in hits}

        plain = dist(s.search(q, exclude=[200], **kw))
        other = dist(s.search(q, query_expansion=1, exclude=[200], **kw))
        hits = s.search(q, query_expansion=1, **kw)
        assert hits[0].id == 200 and hits[0].verified  # the copy: first and verified
        got = dist(hits)
        assert any(abs(other[i] - plain[i]) > 1e-9 for i in set(other) & set(plain))  # expansion matters here
        for i in set(got) & set(other):
            assert got[i] == pytest.approx(other[i], abs=1e-12)  # the same expanded query: the copy skipped
    finally:
        s.remove([200])


@pytest.fixture(scope="module")
def asmk_world(world):
    _, db, q = world
    s = ObjectSearcher(300, rootsift=False, shortlist=8, vocabulary_params={"n_iter": 3}, signatures=True,
                       query_words=3, random_state=0)
    s.fit(db).add(np.arange(100, 112), db)
    return s, db, q


def test_asmk_finds_the_object_and_survives_save_remove(asmk_world, tmp_path):
    s, db, q = asmk_world
    box = (50, 50, 150, 150)
    hits = s.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="none")
    assert {hits[0].id, hits[1].id} == {102, 108}
    assert all(0.0 <= h.similarity <= 1.0 for h in hits)
    # distance = 1 - K(Q, T), similarity = (K(Q, T) / K(Q, own encoding of Q)) ** (1 / alpha): similarity ** alpha
    # is K times one positive factor per query
    factors = [h.similarity ** 3.0 / (1.0 - h.distance) for h in hits if 0.0 < h.similarity < 1.0]
    assert len(factors) >= 3 and np.allclose(factors, factors[0], rtol=1e-9) and factors[0] > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # the box matters: the clutter outside it shares no object with 102 / 108
    whole = s.search(q, bbox=None, k=12, method="asmk", alpha=3.0, rerank="none")
    assert {h.id: h.similarity for h in whole}[102] < {h.id: h.similarity for h in hits}[102]
    back = ObjectSearcher.load(s.save(tmp_path / "os"))
    again = back.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="none")
    assert [(h.id, h.score) for h in again] == [(h.id, h.score) for h in hits]
    assert back.remove([102]) == 1
    assert back.search(q, bbox=box, k=1, method="asmk", alpha=3.0, rerank="none")[0].id == 108
    with pytest.raises(ValueError, match="signatures=True"):
        world_plain = ObjectSearcher(300, rootsift=False, vocabulary_params={"n_iter": 1}, random_state=0)
        world_plain.fit(db).add([1], [db[0]]).search(q, method="asmk")


def test_asmk_spatial_verification_and_query_expansion(asmk_world):
    s, db, q = asmk_world
    box = (50, 50, 150, 150)
    feats = {100 + j: f for j, f in enumerate(db)}
    for qe in (0, 1):
        hits = s.search(q, bbox=box, k=6, method="asmk", alpha=3.0, rerank="spatial", query_expansion=qe,
                        get_features=feats.__getitem__)
        assert {hits[0].id, hits[1].id} == {102, 108}
        assert all(h.verified and h.inliers >= 20 and h.box is not None for h in hits[:2])
        assert all(not h.verified for h in hits[2:])
    # expansion by the verified 102 changes the other images' similarities (it is applied)
    plain = {h.id: h.similarity for h in s.search(q, bbox=box, k=12, method="asmk", rerank="spatial",
                                                   get_features=feats.__getitem__)}
    qe = {h.id: h.similarity for h in s.search(q, bbox=box, k=12, method="asmk", rerank="spatial",
                                                query_expansion=1, get_features=feats.__getitem__)}
    assert any(abs(plain[i] - qe[i]) > 1e-9 for i in set(plain) & set(qe))


def test_verify_top_limits_the_images_verified(asmk_world):
    """``verify_top`` = n: only the first n images of the first stage are matched (the sideways fallback's turned
    searches verify 10); the images verified are the same as without the limit when they rank within it."""
    s, db, q = asmk_world
    box = (50, 50, 150, 150)
    feats = {100 + j: f for j, f in enumerate(db)}
    asked = []

    def counted(i):
        asked.append(int(i))
        return feats[int(i)]

    first = [h.id for h in s.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="none")]
    for n in (1, 2, 5):
        asked.clear()
        hits = s.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="spatial", get_features=counted,
                        verify_top=n)
        assert sorted(asked) == sorted(first[:n])
        assert {h.id for h in hits if h.verified} == {102, 108} & set(first[:n])
    asked.clear()
    s.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="spatial", get_features=counted)
    assert len(asked) == min(len(first), 50)   # the default: VERIFY_SHORTLIST


def test_a_searcher_saved_without_its_vocabulary_opens_only_with_the_one_it_was_built_with(asmk_world, tmp_path):
    """An index's generations leave the vocabulary to the model: the folder holds no copy, records the digest, and
    opens with the same vocabulary (same answers), never with another one or none."""
    s, db, q = asmk_world
    box = (50, 50, 150, 150)
    folder = s.save(tmp_path / "gen", with_vocabulary=False)
    assert not (folder / "vocabulary.npz").exists()
    with pytest.raises(FormatError, match="kept by the index's model"):
        ObjectSearcher.load(folder)
    other = ObjectSearcher(300, rootsift=False, vocabulary_params={"n_iter": 3}, signatures=True,
                           random_state=1).fit(db)
    with pytest.raises(FormatError, match="another vocabulary"):
        ObjectSearcher.load(folder, vocabulary=other.vocabulary_)
    back = ObjectSearcher.load(folder, vocabulary=s.vocabulary_)
    want = s.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="none")
    got = back.search(q, bbox=box, k=12, method="asmk", alpha=3.0, rerank="none")
    assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in want]
    # a folder that holds its vocabulary ignores the one given
    full = ObjectSearcher.load(s.save(tmp_path / "full"), vocabulary=other.vocabulary_)
    assert np.array_equal(full.vocabulary_.cluster_centers_, s.vocabulary_.cluster_centers_)


def test_a_searcher_folder_of_the_previous_format_still_opens(asmk_world, tmp_path):
    """Version 1 folders (every index written before the vocabulary moved to the model) hold their vocabulary."""
    import json
    s, _, q = asmk_world
    folder = s.save(tmp_path / "v1")
    header = json.loads((folder / "header.json").read_text())
    header["format_version"] = 1
    for key in ("vocabulary", "vocabulary_digest"):
        header.pop(key)
    (folder / "header.json").write_text(json.dumps(header))
    back = ObjectSearcher.load(folder)
    assert [h.id for h in back.search(q, k=5, method="asmk", rerank="none")] == \
        [h.id for h in s.search(q, k=5, method="asmk", rerank="none")]


@pytest.mark.parametrize("method", ["asmk", "delta1"])
def test_a_searcher_without_frames_reads_them_from_the_stored_features(asmk_world, tmp_path, method):
    """keep_frames=False (an index's segments): no frame saved, hard weights and uint16 words not stored wide;
    query expansion finds the verified images' frames in their stored features: the same lists as with frames."""
    s, db, q = asmk_world
    feats = {100 + j: f for j, f in enumerate(db)}
    lean = s.empty_like()
    lean.keep_frames = False
    lean.add(np.arange(100, 112), db)
    lean.commit()
    folder = lean.save(tmp_path / "lean", with_vocabulary=False)
    assert not (folder / "fwd_frames.npy").exists() and not (folder / "fwd_weights.npy").exists()
    assert np.load(folder / "fwd_words.npy").dtype == np.uint16
    back = ObjectSearcher.load(folder, vocabulary=s.vocabulary_)
    full = ObjectSearcher.load(s.save(tmp_path / "full"))
    box = (50, 50, 150, 150)
    for qe in (0, 1):
        kw = {"bbox": box, "k": 8, "method": method, "rerank": "spatial", "query_expansion": qe,
              "get_features": feats.__getitem__}
        got = [(h.id, h.score, h.inliers) for h in back.search(q, **kw)]
        assert got == [(h.id, h.score, h.inliers) for h in full.search(q, **kw)]
    with pytest.raises(ValueError, match="keeps no frames"):
        back.search(q, bbox=box, k=8, method=method, rerank="spatial", query_expansion=1)
