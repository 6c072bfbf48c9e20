"""Incremental generations in the application: ten syncs with adds and removes rank like one build of the same
images with the same trained model (every bundled preset), a sync that changes nothing writes nothing, `retrieval
compact` merges the segments without changing a list, and an index of the previous format (one complete state in
the generation folder) opens, searches and is converted by its next sync."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from conftest import FEATURE_CACHE
from helpers import make_pool

from retrieval.app.index import Index
from retrieval.app.integrity import write_manifest
from retrieval.cli.main import main


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("pool"), side=120)


def ranked(idx, queries, k=8):
    return [[(h.path, round(h.score, 5)) for h in idx.search(str(q), k=k)] for q in queries]


def grow(idx, photos, pool, rounds=10):
    """``rounds`` syncs of ``photos``: the first with 6 photos of ``pool``, then each adding two and deleting one
    (the oldest still there)."""
    present = []
    for p in pool[:6]:
        shutil.copy(p, photos / p.name)
        present.append(p.name)
    idx.sync(photos)
    nxt = 6
    for _ in range(rounds - 1):
        for p in pool[nxt:nxt + 2]:
            shutil.copy(p, photos / p.name)
            present.append(p.name)
        nxt += 2
        (photos / present.pop(0)).unlink()
        idx.sync(photos)
    return [photos / n for n in present]


@pytest.mark.parametrize("preset", ["default", "compact", "accurate", "object"])
def test_ten_incremental_syncs_rank_like_one_build_with_the_same_model(tmp_path, pool, preset):
    photos = tmp_path / "photos"
    photos.mkdir()
    inc = Index.create(tmp_path / "inc", preset, feature_store=FEATURE_CACHE, train_on="generic")
    present = grow(inc, photos, pool)
    assert inc.catalog.count("indexed") == len(present) == 6 + 9
    one = Index.create(tmp_path / "one", preset, feature_store=FEATURE_CACHE, model=tmp_path / "inc")
    one.sync(photos)
    queries = present[::3]
    got = ranked(inc, queries)
    assert all(row and row[0][0] == str(q) for row, q in zip(got, queries, strict=True))   # each finds itself first
    assert got == ranked(one, queries)
    info = inc.searcher().backend.segment_info()
    assert info["live"] == len(present)
    # more than one segment kept: with idf (`object`) too, scored under the weights of all of them
    assert info["segments"] > 1


def test_a_sync_that_changes_nothing_writes_nothing(tmp_path, pool):
    photos = tmp_path / "photos"
    photos.mkdir()
    idx = Index.create(tmp_path / "i", "default", feature_store=FEATURE_CACHE, train_on="generic")
    grow(idx, photos, pool, rounds=2)
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "i").rglob("*") if p.is_file()
             and "catalog" not in p.name and p.name != ".lock"}
    gen = idx.catalog.generation()
    report = idx.sync(photos)
    assert report.added == report.removed == report.moved == 0 and report.generation == gen
    assert idx.catalog.generation() == gen
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "i").rglob("*") if p.is_file()
             and "catalog" not in p.name and p.name != ".lock"}
    assert after == files
    assert idx.catalog.runs()[-1]["status"] == "done"


@pytest.mark.parametrize("preset", ["default", "accurate"])
def test_compact_merges_the_segments_and_keeps_every_list(tmp_path, pool, preset):
    photos = tmp_path / "photos"
    photos.mkdir()
    idx = Index.create(tmp_path / "i", preset, feature_store=FEATURE_CACHE, train_on="generic")
    present = grow(idx, photos, pool, rounds=5)
    want = ranked(idx, present)
    assert idx.searcher().backend.segment_info()["segments"] > 1
    res = CliRunner().invoke(main, ["compact", "--index", str(tmp_path / "i"), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["segments_before"] > 1 and out["segments_after"] == 1 and out["images"] == len(present)
    again = Index.open(tmp_path / "i")
    assert again.searcher().backend.segment_info()["segments"] == 1
    assert ranked(again, present) == want
    assert len(list((tmp_path / "i" / "segments").iterdir())) <= 1 + out["segments_before"]   # the old ones: for
    # the previous generation only, removed by the next writer
    if preset == "accurate":   # its vocabulary is the model's: retraining it means a new index
        res = CliRunner().invoke(main, ["-q", "index", str(photos), "--index", str(tmp_path / "i"), "--retrain"])
        assert res.exit_code != 0 and "no trained part kept with the collection" in res.output
        return
    # 'retrieval index --retrain' on an unchanged folder: a new generation (the trained parts again, every segment
    # rewritten), the same lists
    gen = again.catalog.generation()
    res = CliRunner().invoke(main, ["-q", "index", str(photos), "--index", str(tmp_path / "i"), "--retrain"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    retrained = Index.open(tmp_path / "i")
    assert retrained.catalog.generation() == gen + 1 and ranked(retrained, present) == want


def to_previous_format(index_dir):
    """Rewrite the committed generation of a one-segment index as the previous format wrote it: the segment's
    files (a complete state of format version 1) in the generation folder, no ``segments/``."""
    idx = Index.open(index_dir)
    gen = idx.folder.gen_dir(idx.catalog.generation())
    [seg] = idx.folder.segment_dirs(idx.catalog.generation())
    idx.close()
    for p in gen.iterdir():
        p.unlink()
    for p in seg.iterdir():
        shutil.move(str(p), gen / p.name)
    shutil.rmtree(index_dir / "segments")
    for other in (index_dir / "gens").iterdir():
        if other != gen:
            shutil.rmtree(other)
    write_manifest(gen)
    assert json.loads((gen / "state.json").read_text())["format_version"] == 1


def object_to_previous_format(index_dir):
    """The committed generation of a one-segment `accurate` index as the previous format wrote it: ``ids.npy`` and
    the searcher (with its own copy of the vocabulary, searcher format version 1) in the generation folder."""
    import numpy as np

    idx = Index.open(index_dir)
    gen = idx.folder.gen_dir(idx.catalog.generation())
    [seg] = idx.folder.segment_dirs(idx.catalog.generation())
    idx.close()
    for p in gen.iterdir():
        p.unlink()
    shutil.move(str(seg / "searcher"), gen / "searcher")
    shutil.copy(index_dir / "model" / "searcher" / "vocabulary.npz", gen / "searcher" / "vocabulary.npz")
    header = json.loads((gen / "searcher" / "header.json").read_text())
    header["format_version"] = 1
    for key in ("vocabulary", "vocabulary_digest"):
        header.pop(key)
    (gen / "searcher" / "header.json").write_text(json.dumps(header))
    np.save(gen / "ids.npy", np.load(gen / "searcher" / "fwd_ids.npy"))
    (gen / "state.json").write_text(json.dumps({"format": "retrieval-index-state", "format_version": 1,
                                                "kind": "object", "ntotal": header["ntotal"]}))
    shutil.rmtree(index_dir / "segments")
    for other in (index_dir / "gens").iterdir():
        if other != gen:
            shutil.rmtree(other)
    write_manifest(gen)


@pytest.mark.parametrize("preset", ["default", "accurate"])
def test_an_index_of_the_previous_format_opens_and_its_next_sync_converts_it(tmp_path, pool, preset):
    photos = tmp_path / "photos"
    photos.mkdir()
    idx = Index.create(tmp_path / "i", preset, feature_store=FEATURE_CACHE, train_on="generic")
    present = grow(idx, photos, pool, rounds=3)
    idx.compact()
    want = ranked(idx, present)
    idx.close()
    (object_to_previous_format if preset == "accurate" else to_previous_format)(tmp_path / "i")
    old = Index.open(tmp_path / "i")
    assert ranked(old, present) == want
    res = CliRunner().invoke(main, ["check", "--index", str(tmp_path / "i")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    shutil.copy(pool[-1], photos / pool[-1].name)
    old.sync(photos)
    state = json.loads((old.folder.gen_dir(old.catalog.generation()) / "state.json").read_text())
    assert state["format_version"] == 2 and [s["rows"] for s in state["segments"]] == [len(present) + 1]
    assert ranked(Index.open(tmp_path / "i"), present)[0][0] == want[0][0]


def test_adding_files_looks_up_only_those_files(tmp_path, pool, monkeypatch):
    """Index.add (the server's upload): the given files are indexed without a walk of the followed folders or a read
    of every catalog row; an unchanged file writes nothing; ``root`` is followed by later folder syncs."""
    from retrieval.app import index_roots
    from retrieval.app.catalog import Catalog

    photos = tmp_path / "photos"
    photos.mkdir()
    idx = Index.create(tmp_path / "i", "default", feature_store=FEATURE_CACHE, train_on="generic")
    present = grow(idx, photos, pool, rounds=2)
    drop = tmp_path / "drop"
    drop.mkdir()
    new = drop / pool[-1].name
    shutil.copy(pool[-1], new)

    def refuse(*args, **kwargs):
        raise AssertionError("a walk or a read of every row")

    monkeypatch.setattr(index_roots, "walk_photos", refuse)
    monkeypatch.setattr(Catalog, "scan", refuse)
    monkeypatch.setattr(Catalog, "snapshot", refuse)
    gen = idx.catalog.generation()
    report = idx.add([new], root=drop)
    assert report.added == 1 and idx.catalog.generation() == gen + 1
    assert idx.catalog.row_by_path(str(new))["status"] == "indexed" and str(drop.resolve()) in idx.roots
    assert [h.path for h in idx.search(str(new), k=1)] == [str(new)]
    again = idx.add([new])                       # unchanged: nothing written but the run
    assert again.added == 0 and again.unchanged == 1 and idx.catalog.generation() == gen + 1
    monkeypatch.undo()
    report = idx.sync(photos)                    # the dropped file's folder is followed: kept
    assert report.removed == 0 and idx.catalog.count("indexed") == len(present) + 1


@pytest.mark.parametrize("preset", ["accurate", "object"])
def test_a_sharded_object_index_ranks_like_the_unsharded_one(tmp_path, pool, preset):
    """`accurate` and `object` (idf) with --shards 3: every segment holds one shard's images (its own postings,
    signatures and forward index), and after syncs with adds and removes the lists are those of one unsharded index,
    for ASMK* and for the BoW scorings whose weights are sums over the collection (with idf, the document
    frequencies of every shard's images)."""
    photos = tmp_path / "photos"
    photos.mkdir()
    three = Index.create(tmp_path / "s3", preset, feature_store=FEATURE_CACHE, train_on="generic", shards=3)
    present = grow(three, photos, pool, rounds=4)
    one = Index.create(tmp_path / "s1", preset, feature_store=FEATURE_CACHE, model=tmp_path / "s3")
    one.sync(photos)
    state = json.loads((three.folder.gen_dir(three.catalog.generation()) / "state.json").read_text())
    assert state["shards"] == 3 and {s["shard"] for s in state["segments"]} == {0, 1, 2}
    queries = present[::2]
    three, one = Index.open(tmp_path / "s3"), Index.open(tmp_path / "s1")
    assert three.info()["shards"] == 3 and one.info()["shards"] == 1
    res = CliRunner().invoke(main, ["info", "--index", str(tmp_path / "s3")], catch_exceptions=False)
    assert "3 shard(s); features in full" in res.output
    assert ranked(three, queries) == ranked(one, queries)
    for method in ("delta1", "delta2", "l2"):
        got = [[h.path for h in three.search(str(q), k=8, method=method, rerank="exact")] for q in queries]
        assert got == [[h.path for h in one.search(str(q), k=8, method=method, rerank="exact")] for q in queries]


def test_shards_are_refused_where_the_backend_cannot_split(tmp_path):
    with pytest.raises(ValueError, match="preset 'compact' .*cannot be sharded"):
        Index.create(tmp_path / "idx", "compact", shards=2)
