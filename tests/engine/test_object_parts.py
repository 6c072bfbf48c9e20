"""The segmented state of the object presets (retrieval.engine.object.parts): any sequence of adds, removes and
saves ranks exactly like one searcher built from the remaining images, for ASMK* and the four BoW scorings (whose
delta_1 / delta_2 weights are sums over the collection); merges copy what they hold; ties are broken by id."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import pattern_images

from retrieval.engine.object.parts import ObjectSegments, Part, merged, topk_by_id, view
from retrieval.engine.object.searcher import ObjectSearcher
from retrieval.features import LocalFeatures

METHODS = ["asmk", "l1", "l2", "delta1", "delta2"]


def images(n, seed=0):
    """``n`` images drawn from 5 shared patterns (each image: 40-90 features, part of a pattern plus noise)."""
    return pattern_images(n, seed)


def fitted(idf: bool):
    feats = images(40)
    return ObjectSearcher(64, rootsift=False, idf=idf, signatures=True, query_words=2, shortlist=12,
                          vocabulary_params={"n_iter": 3}, random_state=0).fit(feats), feats


@pytest.fixture(scope="module")
def model():
    return fitted(idf=False)


@pytest.fixture(scope="module")
def idf_model():
    return fitted(idf=True)


def ranked(searcher, queries, method):
    return [[(h.id, h.score) for h in searcher.search(q, k=10, method=method, alpha=3.0 if method == "asmk" else 0.5,
                                                      rerank="exact" if method != "asmk" else "none")]
            for q in queries]


def write(state, tmp_path, gen):
    folder = tmp_path / "gens" / f"{gen:08d}"
    folder.mkdir(parents=True)
    state.save(folder)
    for tmp in (tmp_path / "segments").glob("*.tmp"):   # what the index folder's publish does
        tmp.rename(tmp.with_suffix(""))
    return folder


@pytest.mark.parametrize("which", ["model", "idf_model"])
def test_syncs_with_adds_and_removes_rank_like_one_build(which, request, tmp_path):
    m, feats = request.getfixturevalue(which)
    state = ObjectSegments(m)
    live = {}
    rng = np.random.default_rng(1)
    next_id, gen = 0, 0
    for step in range(7):                          # each step: add 5, remove 2, save; reopen from disk
        ids = np.arange(next_id, next_id + 5)
        state.add(ids, [feats[i % len(feats)] for i in ids])
        live.update({int(i): feats[i % len(feats)] for i in ids})
        next_id += 5
        if step:
            gone = rng.choice(sorted(live), 2, replace=False)
            state.remove(gone)
            for i in gone:
                live.pop(int(i))
        gen += 1
        folder = write(state, tmp_path, gen)
        state = ObjectSegments(m)
        state.load(folder, lambda p: ObjectSearcher.load(p, vocabulary=m.vocabulary_))
    assert len(state.parts) > 1 and any(len(p.dead) for p in state.parts)
    assert sorted(state.ids.tolist()) == sorted(live)
    one = m.empty_like()
    one.add(np.array(sorted(live)), [live[i] for i in sorted(live)])
    one = ObjectSearcher.load(one.save(tmp_path / "one"))   # read back from disk, as every index's state is
    queries = [feats[3], feats[7], feats[12]]
    segmented, single = state.view(), view(m, [Part(None, one)])
    for method in METHODS:
        assert ranked(segmented, queries, method) == ranked(single, queries, method), method
    # a merge copies the images as they are: the merged searcher ranks the same, through the view or alone
    whole = merged(m, state.parts)
    assert sorted(whole.invfile_.ids_.tolist()) == sorted(live)
    for method in METHODS:
        assert ranked(view(m, [Part(None, whole)]), queries, method) == ranked(single, queries, method)
    header = json.loads((folder / "state.json").read_text())
    assert header["format_version"] == 2 and header["ntotal"] == len(live)
    assert not list((tmp_path / "segments").glob("*/searcher/vocabulary.npz"))   # the model keeps it


def test_with_idf_segments_and_shards_are_scored_under_the_collections_weights(idf_model, tmp_path):
    """idf weighs every image by the whole collection: segments written once and 3 shards rank exactly as one
    build, and differently from any part scored under its own weights alone."""
    m, feats = idf_model
    for n_shards in (1, 3):
        state = ObjectSegments(m, n_shards)
        state.add(np.arange(10), feats[:10])
        write(state, tmp_path / f"s{n_shards}", 1)
        state.add(np.arange(10, 20), feats[10:20])
        state.remove([3])
        folder = write(state, tmp_path / f"s{n_shards}", 2)
        segments = json.loads((folder / "state.json").read_text())["segments"]
        assert sum(s["rows"] - s["deleted"] for s in segments) == 19
        assert len(segments) > n_shards   # the first sync's segments kept: the state is not rewritten per sync
        assert sorted({s["shard"] for s in segments}) == list(range(n_shards))
        one = m.empty_like()
        ids = [i for i in range(20) if i != 3]
        one.add(np.array(ids), [feats[i] for i in ids])
        one = ObjectSearcher.load(one.save(tmp_path / f"one{n_shards}"))
        single = view(m, [Part(None, one)])
        for method in METHODS:
            assert ranked(state.view(), feats[:3], method) == ranked(single, feats[:3], method), (n_shards, method)
        # the newest part alone (its own idf) does not rank as the collection: the weights are the collection's
        last = state.parts[-1]
        alone = [h.score for h in last.searcher.search(feats[12], k=3, method="asmk", alpha=3.0, rerank="none")]
        joint = {h.id: h.score for h in state.view().search(feats[12], k=40, method="asmk", alpha=3.0,
                                                             rerank="none")}
        top = last.searcher.search(feats[12], k=3, method="asmk", alpha=3.0, rerank="none")
        assert [joint[h.id] for h in top] != alone


def test_topk_by_id_breaks_ties_by_id_also_at_the_kth_value():
    d = np.array([0.5, 0.2, 0.5, 0.5, 0.1, 0.5])
    ids = np.array([50, 10, 20, 40, 30, 5])
    top = topk_by_id(d, ids, 3)
    assert ids[top].tolist() == [30, 10, 5]              # 0.1, 0.2, then the smallest id among the 0.5s
    assert ids[topk_by_id(d, ids, 10)].tolist() == [30, 10, 5, 20, 40, 50]
    perm = np.random.default_rng(0).permutation(len(d))
    assert ids[perm][topk_by_id(d[perm], ids[perm], 4)].tolist() == [30, 10, 5, 20]


def test_a_merge_written_block_by_block_equals_the_merge_in_memory(model, tmp_path, monkeypatch):
    """write_merged (saved parts read with pread, one in memory, deleted images, blocks smaller than the data)
    writes exactly the files of merged() + save, array by array."""
    import retrieval.engine.object.merge as om
    from retrieval.engine.object.merge import write_merged

    monkeypatch.setattr(om, "WORD_BLOCK", 7)
    monkeypatch.setattr(om, "IMAGE_BLOCK", 3)
    m, feats = model
    parts = []
    nothing = LocalFeatures(frames=np.zeros((0, 6), np.float32), descriptors=np.zeros((0, 32), np.float32),
                            image_size=(320, 320))
    for j, ids in enumerate(([0, 3, 5, 9, 12], [1, 2, 7, 20], [4, 6, 8, 30, 31])):
        s = m.empty_like().add(np.array(ids), [nothing if i == 7 else feats[i] for i in ids])   # 7: no feature
        s.commit()
        if j < 2:   # two saved parts, read from their files; the third in memory
            path = s.save(tmp_path / f"p{j}", with_vocabulary=False)
            parts.append(Part(f"p{j}", ObjectSearcher.load(path, vocabulary=m.vocabulary_), source=path))
        else:
            parts.append(Part(None, s))
    parts[0].dead = np.array([3, 12])
    parts[2].dead = np.array([30])
    assert write_merged(m, parts, tmp_path / "streamed") == 11
    merged(m, parts).save(tmp_path / "memory", with_vocabulary=False)
    files = sorted(p.relative_to(tmp_path / "memory") for p in (tmp_path / "memory").rglob("*.npy"))
    assert files == sorted(p.relative_to(tmp_path / "streamed") for p in (tmp_path / "streamed").rglob("*.npy"))
    for f in files:
        a, b = np.load(tmp_path / "memory" / f), np.load(tmp_path / "streamed" / f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    for h in ("header.json", "invfile/header.json", "signatures/header.json"):
        want = json.loads((tmp_path / "memory" / h).read_text())
        got = json.loads((tmp_path / "streamed" / h).read_text())
        assert got == want, h
    back = ObjectSearcher.load(tmp_path / "streamed", vocabulary=m.vocabulary_)
    assert ranked(back, feats[:2], "asmk") == ranked(view(m, parts), feats[:2], "asmk")
