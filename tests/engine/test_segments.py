"""Incremental generations (retrieval.engine.segments) on synthetic vectors: a state grown by many saves with adds
and removes ranks exactly like one segment holding the same rows with the same trained quantiser, segments are
written once and shared, merges keep the lists, and the IVFADC quantiser is trained once."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import publish_state

from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.presets import load_preset
from retrieval.engine.segments import MAX_SEGMENTS, quantizer_outgrown


def unit_rows(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(30, d))
    X = centers[rng.integers(0, 30, n)] + 0.5 * rng.normal(size=(n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def make(preset_name="default", **index):
    preset = load_preset(preset_name)
    preset["index"] = dict(preset["index"], **index)
    preset["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    b = GlobalBackend(preset)
    b.encoder.projection = None
    b.encoder.local_pca = type("P", (), {"n_components": 4})()   # only .dim is read when saving
    return b


def reopen(gen_folder, **index):
    b = make(**index)
    b.load_state(gen_folder)
    return b


def ranked(backend, Q, k=20):
    return [[(h.id, round(h.similarity, 6)) for h in backend.first_stage(q, k)] for q in Q]


IVF = dict(min_images=600, nlist=16, M=8, nbits=6, nprobe=4, shortlist=60)


@pytest.fixture(scope="module")
def data():
    return unit_rows(3000, 32, 0), unit_rows(12, 32, 1)


def grow(tmp_path, V, rounds=10, per_round=250, remove_per_round=40, **index):
    """A state grown over ``rounds`` saves, each adding ``per_round`` vectors (ids increasing) and removing
    ``remove_per_round`` earlier ones; returns (last generation folder, live ids)."""
    rng = np.random.default_rng(5)
    live, next_id, gen = [], 0, None
    for r in range(rounds):
        b = make(**index) if gen is None else reopen(gen, **index)
        ids = np.arange(next_id, next_id + per_round, dtype=np.int64)
        b.add_vectors(ids, V[ids])
        next_id += per_round
        if live:
            gone = rng.choice(live, remove_per_round, replace=False)
            b.remove(gone)
            live = [i for i in live if i not in set(gone.tolist())]
        live += ids.tolist()
        gen = publish_state(b, tmp_path, r + 1)
    return gen, np.array(sorted(live))


@pytest.mark.parametrize("index", [dict(), IVF], ids=["flat", "ivfadc"])
def test_ten_incremental_saves_rank_like_one_segment_of_the_same_rows(tmp_path, data, index):
    V, Q = data
    gen, live = grow(tmp_path, V, **index)
    grown = reopen(gen, **index)
    assert np.array_equal(grown.ids, live)
    header = json.loads((gen / "state.json").read_text())
    assert len(header["segments"]) > 1 and header["format_version"] == 2
    # the same rows compacted into one segment (the same quantiser when there is one)
    grown.stage.plan_compaction(merge_all=True, retrain=False)
    one_gen = publish_state(grown, tmp_path, 100)
    one = reopen(one_gen, **index)
    assert len(json.loads((one_gen / "state.json").read_text())["segments"]) == 1
    assert ranked(reopen(gen, **index), Q) == ranked(one, Q)
    if index:   # IVFADC: trained once, when the collection first reached min_images
        assert header["quantizer"] == json.loads((one_gen / "state.json").read_text())["quantizer"]
        assert header["quantizer_nlist"] == 16   # min(index.nlist, n // 39) at the save that reached 600: 670 // 39


def test_flat_segments_equal_exhaustive_search(tmp_path, data):
    V, Q = data
    gen, live = grow(tmp_path, V, rounds=6)
    b = reopen(gen)
    stored = V.astype(np.float16).astype(np.float32)
    for q in Q:
        s = stored[live] @ q
        order = np.lexsort((live, -s))[:15]
        assert [h.id for h in b.first_stage(q, 15)] == live[order].tolist()


def test_ivfadc_with_every_list_probed_equals_exhaustive(tmp_path, data):
    V, Q = data
    index = dict(IVF, nprobe=16, shortlist=3000)
    gen, live = grow(tmp_path, V, **index)
    b = reopen(gen, **index)
    stored = V.astype(np.float16).astype(np.float32)
    for q in Q:
        s = stored[live] @ q
        assert [h.id for h in b.first_stage(q, 10)] == live[np.lexsort((live, -s))[:10]].tolist()


def test_a_save_writes_only_what_changed_and_segments_are_shared(tmp_path, data):
    V, _ = data
    gen, _ = grow(tmp_path, V, rounds=3)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "segments").iterdir()}
    b = reopen(gen)
    b.add_vectors(np.array([5000]), V[:1])
    new_gen = publish_state(b, tmp_path, 4)
    after = {p.name for p in (tmp_path / "segments").iterdir()}
    assert set(before) < after and len(after - set(before)) == 1   # one new segment, of one row
    new = (after - set(before)).pop()
    assert np.load(tmp_path / "segments" / new / "ids.npy").tolist() == [5000]
    assert all((tmp_path / "segments" / n).stat().st_mtime_ns == t for n, t in before.items())
    names = [s["name"] for s in json.loads((new_gen / "state.json").read_text())["segments"]]
    assert set(names) - {new} <= set(before)


def test_segments_are_merged_smallest_first_beyond_the_limit(tmp_path, data):
    V, Q = data
    gen = None
    for r in range(MAX_SEGMENTS + 4):
        b = make() if gen is None else reopen(gen)
        ids = np.arange(r * 10, r * 10 + 10 + 90 * (r == 0))   # a large first segment, then small ones
        b.add_vectors(ids, V[ids])
        gen = publish_state(b, tmp_path, r + 1)
        names = [s["name"] for s in json.loads((gen / "state.json").read_text())["segments"]]
        assert len(names) <= MAX_SEGMENTS
    header = json.loads((gen / "state.json").read_text())
    assert max(s["rows"] for s in header["segments"]) == 100   # the large segment was never rewritten


def test_removed_rows_are_never_returned_and_a_mostly_dead_segment_is_rewritten(tmp_path, data):
    V, Q = data
    b = make()
    b.add_vectors(np.arange(400), V[:400])
    gen = publish_state(b, tmp_path, 1)
    b = reopen(gen)
    b.remove(np.arange(0, 400, 3))   # a third: above the dead fraction
    gen = publish_state(b, tmp_path, 2)
    header = json.loads((gen / "state.json").read_text())
    assert [s["rows"] for s in header["segments"]] == [400 - len(range(0, 400, 3))]
    b = reopen(gen)
    b.remove(np.arange(1, 40, 3))    # a few: kept as a deletion list
    gen = publish_state(b, tmp_path, 3)
    header = json.loads((gen / "state.json").read_text())
    assert header["segments"][0]["deleted"] == len(range(1, 40, 3))
    b = reopen(gen)
    gone = set(range(0, 400, 3)) | set(range(1, 40, 3))
    for q in Q:
        got = [h.id for h in b.first_stage(q, 300)]
        assert not gone & set(got) and len(got) == 400 - len(gone)


def test_a_quantizer_is_retrained_only_when_asked_or_outgrown(tmp_path, data):
    V, _ = data
    gen, _ = grow(tmp_path, V, rounds=4, remove_per_round=0, **IVF)   # 1,000 rows: trained at 750
    first = json.loads((gen / "state.json").read_text())["quantizer"]
    b = reopen(gen, **IVF)
    b.add_vectors(np.arange(5000, 5010), V[:10])
    gen = publish_state(b, tmp_path, 10)
    assert json.loads((gen / "state.json").read_text())["quantizer"] == first
    b = reopen(gen, **IVF)
    b.stage.plan_compaction(merge_all=True, retrain=True)
    gen = publish_state(b, tmp_path, 11)
    assert json.loads((gen / "state.json").read_text())["quantizer"] != first
    assert not quantizer_outgrown(16, 1024, 1000) and quantizer_outgrown(16, 1024, 39 * 32)
