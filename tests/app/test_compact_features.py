"""An index that keeps its features in compact form (retrieval.app.store_forms): the encodings are those of the full
features, the verification reads the compact form, the full form is dropped from the index's own store (kept in a
shared one), the converter of an existing index, and what reads full features later gets them again exactly."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import make_pool, small_preset

from retrieval.app.index import Index
from retrieval.cli.main import main
from retrieval.features import compact


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("pool"), side=240)


@pytest.fixture(autouse=True)
def small_codebook_sample(monkeypatch):
    """The pool's 240-pixel photos hold a few thousand descriptors: a codebook is learnt from 1,000 here."""
    monkeypatch.setattr(compact, "MIN_TRAINING_DESCRIPTORS", 1000)


def ranked(idx, q, rerank="none"):
    return [(h.path, round(h.score, 6), h.verified, h.inliers) for h in idx.search(str(q), k=8, rerank=rerank)]


def forms(idx):
    """(photos with a compact entry, photos with a full entry) of the index's indexed photos."""
    store, key = idx.store, idx.extractor.config_key
    rows = [r for r in idx.catalog.rows() if r["status"] == "indexed"]
    return (sum(store.compact_path(r["hash"], key).is_file() for r in rows),
            sum(store.has_full(r["hash"], key) for r in rows), len(rows))


def photos_folder(tmp_path, pool, n):
    folder = tmp_path / "photos"
    folder.mkdir(exist_ok=True)
    for p in pool[:n]:
        shutil.copy(p, folder)
    return folder


def test_compact_index_ranks_as_the_full_one_and_keeps_only_the_compact_form(tmp_path, pool):
    photos = photos_folder(tmp_path, pool, 10)
    full = Index.create(tmp_path / "full", small_preset())
    full.sync(photos)
    idx = Index.create(tmp_path / "c", small_preset(), compact_features=16)
    idx.sync(photos)
    assert idx.compact_features == 16 and forms(idx) == (10, 0, 10)
    assert forms(full) == (0, 10, 10)
    for q in (photos / pool[1].name, photos / pool[7].name):
        assert ranked(idx, q) == ranked(full, q)          # the compact form changes no encoding
    for p in pool[10:14]:                                 # a second sync: its photos compacted too
        shutil.copy(p, photos)
    idx.sync(photos)
    assert forms(idx) == (14, 0, 14)


def test_verification_reads_the_compact_form(tmp_path, pool):
    photos = photos_folder(tmp_path, pool, 10)
    idx = Index.create(tmp_path / "c", small_preset(), compact_features=16)
    idx.sync(photos)
    row = idx.catalog.row_by_path(str(photos / pool[2].name))
    m = idx.match(str(photos / pool[2].name), row["id"])
    decoded = idx.store.get(row["hash"], idx.extractor.config_key, prefer="compact")
    np.testing.assert_array_equal(m.features_b.descriptors, decoded.descriptors)
    np.testing.assert_array_equal(m.features_b.frames, decoded.frames)
    assert m.outcome.verified                            # a photo against its own compact form
    hits = idx.search(str(photos / pool[2].name), k=5, rerank="spatial")
    assert hits[0].path == str(photos / pool[2].name) and hits[0].verified


def test_a_shared_store_keeps_both_forms(tmp_path, pool):
    photos = photos_folder(tmp_path, pool, 10)
    idx = Index.create(tmp_path / "c", small_preset(), compact_features=16, feature_store=tmp_path / "shared")
    idx.sync(photos)
    assert forms(idx) == (10, 10, 10)


def test_converter_of_an_existing_index_and_its_command(tmp_path, pool):
    photos = photos_folder(tmp_path, pool, 10)
    idx = Index.create(tmp_path / "i", small_preset())
    idx.sync(photos)
    q = photos / pool[4].name
    want = ranked(idx, q)
    assert forms(idx) == (0, 10, 10)
    res = CliRunner().invoke(main, ["compact", "--index", str(tmp_path / "i"), "--compact-features", "16"],
                             catch_exceptions=False)
    assert res.exit_code == 0 and "10 photo(s) in compact form, 10 full removed" in res.output
    again = Index.open(tmp_path / "i")
    assert again.compact_features == 16 and forms(again) == (10, 0, 10)
    assert ranked(again, q) == want
    assert again.searcher().features_form == "compact"
    res = CliRunner().invoke(main, ["compact", "--index", str(tmp_path / "i"), "--compact-features", "8"])
    assert res.exit_code == 2 and "'8' is not one of" in res.output
    with pytest.raises(ValueError, match="compact_features must be one of 0, 16, 32"):
        Index.create(tmp_path / "bad", small_preset(), compact_features=8)
    with pytest.raises(ValueError, match="keeps compact_features=16 \\(got 32\\)"):
        Index.create(tmp_path / "i", small_preset(), exist_ok=True, compact_features=32)
    assert Index.create(tmp_path / "i", small_preset(), exist_ok=True, compact_features=16).compact_features == 16
    photos2 = tmp_path / "other"
    photos2.mkdir()
    shutil.copy(pool[12], photos2)
    res = CliRunner().invoke(main, ["index", str(photos2), "--index", str(tmp_path / "i"), "--compact-features", "0"])
    assert res.exit_code == 1 and "this index keeps 16" in res.output


def test_what_needs_full_features_gets_them_again_exactly(tmp_path, pool):
    """A query by an indexed photo (its file described again), a re-added photo (extracted again) and
    ``check --repair`` (extracted again before it encodes) rank as the full index does."""
    photos = photos_folder(tmp_path, pool, 10)
    full = Index.create(tmp_path / "full", small_preset())
    full.sync(photos)
    idx = Index.create(tmp_path / "c", small_preset(), compact_features=16)
    idx.sync(photos)
    row = idx.catalog.row_by_path(str(photos / pool[3].name))
    want = [(h.path, round(h.score, 6)) for h in full.search(str(photos / pool[3].name), k=8, rerank="none")]
    by_id = [(h.path, round(h.score, 6)) for h in idx.search(row["id"], k=8, rerank="none")]
    assert by_id == want
    assert not idx.store.has_full(row["hash"], idx.extractor.config_key)   # described again, not stored again
    shutil.move(photos / pool[3].name, tmp_path / "aside.jpg")
    idx.sync(photos)
    shutil.move(tmp_path / "aside.jpg", photos / pool[3].name)
    idx.sync(photos)                                        # re-added: extracted again, encoded exactly
    assert ranked(idx, photos / pool[3].name) == ranked(full, photos / pool[3].name)
    from retrieval.app.integrity import repair_index

    state = sorted((tmp_path / "c" / "segments").rglob("vectors.npy"))[-1]
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    out = repair_index(Index.open(tmp_path / "c"))
    assert any("rebuilt" in line for line in out["repaired"]) and not out["could_not"]
    repaired = Index.open(tmp_path / "c")
    assert forms(repaired) == (10, 0, 10)
    for q in (photos / pool[1].name, photos / pool[3].name):
        assert ranked(repaired, q) == ranked(full, q)
