"""The duplicate finder's kept codes (:mod:`retrieval.app.duplicates.codes`): a sync encodes the photos it adds as one
new part, a duplicates run after it encodes nothing, parts are written once and merged past ``MAX_PARTS`` (dropping
photos no longer indexed), a part of another model is ignored, the single file of earlier versions is read."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import shared_path

from retrieval.app.duplicates import codes as dc
from retrieval.app.duplicates import find_duplicates
from retrieval.app.index import Index
from retrieval.core.threads import single_threaded_blas


@pytest.fixture(scope="module")
def generic_key():
    try:
        return dc.codes_key()
    except ValueError as exc:
        pytest.fail(f"set-up makes the generic models ('make setup'): {exc}")


def photos_of(n, start=0):
    src = sorted(shared_path("real", "holidays805", "jpg").glob("*.jpg"))
    return src[start:start + n]


def fill(folder, paths):
    folder.mkdir(parents=True, exist_ok=True)
    for p in paths:
        shutil.copy(p, folder / p.name)


def kept_hashes(index_path, key):
    return set(dc.CodeParts(index_path, key).load())


def test_a_sync_keeps_the_codes_of_what_it_adds_and_a_run_encodes_nothing(tmp_path, generic_key, monkeypatch):
    photos = tmp_path / "photos"
    fill(photos, photos_of(6))
    idx = Index.create(tmp_path / "idx", preset="default")
    idx.sync(photos, workers=1)
    hashes = {r["hash"] for r in idx.catalog.snapshot()[1] if r["status"] == "indexed"}
    assert kept_hashes(idx.path, generic_key) == hashes
    parts = dc.CodeParts(idx.path, generic_key).parts()
    assert len(parts) == 1
    before = {p: p.stat().st_mtime_ns for p in parts}

    fill(photos, photos_of(1, start=6))
    report = idx.sync(photos, workers=1)
    assert report.added == 1
    parts = dc.CodeParts(idx.path, generic_key).parts()
    assert len(parts) == 2
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())     # written once, never again
    new = [p for p in parts if p not in before]
    with np.load(new[0]) as z:
        assert len(z["hashes"]) == 1

    encoded = []
    original = dc.CodeSpace.turned_codes
    monkeypatch.setattr(dc.CodeSpace, "turned_codes", lambda self, f, *a: encoded.append(1) or original(self, f, *a))
    find_duplicates(idx)
    assert encoded == []                                                  # the run read every code
    idx.close()


def test_kept_codes_are_the_codes_a_run_computes(tmp_path, generic_key):
    photos = tmp_path / "photos"
    fill(photos, photos_of(3, start=20))
    idx = Index.create(tmp_path / "idx", preset="default")
    idx.sync(photos, workers=1)
    rows = [r for r in idx.catalog.snapshot()[1] if r["status"] == "indexed"]
    kept = dc.CodeParts(idx.path, generic_key).load()
    space = dc.CodeSpace(idx.searcher(), idx.path)
    with single_threaded_blas():   # as a run computes them (duplicate_codes: one BLAS thread, whose sums differ in
        for r in rows:             # the last bits from a multi-threaded BLAS's on small products)
            fresh = space.turned_codes(idx.searcher().features_of(r["id"])).astype(np.float16)
            np.testing.assert_array_equal(kept[r["hash"]][0], fresh)
    idx.close()


def code(v):
    return (np.full((len(dc.QUERY_TURNS), 4), v, np.float16), (10, 20))


def test_parts_merge_past_the_limit_dropping_what_is_no_longer_indexed(tmp_path, monkeypatch):
    monkeypatch.setattr(dc, "MAX_PARTS", 3)
    parts = dc.CodeParts(tmp_path, "k1")
    for i in range(3):
        parts.add({f"{i:032x}": code(i)})
    assert len(parts.parts()) == 3
    live = {f"{i:032x}" for i in (0, 2, 3)}
    parts.add({f"{3:032x}": code(3)}, live=live)
    assert len(parts.parts()) == 1                                        # merged
    kept = parts.load()
    assert set(kept) == live
    assert all(float(kept[f"{i:032x}"][0][0, 0]) == i for i in (0, 2, 3))
    assert kept[f"{0:032x}"][1] == (10, 20)


def test_a_later_part_wins_and_another_models_part_is_ignored(tmp_path):
    parts = dc.CodeParts(tmp_path, "k1")
    h = "ab" * 16
    parts.add({h: code(1)})
    parts.add({h: code(2)})
    assert float(parts.load()[h][0][0, 0]) == 2
    other = dc.CodeParts(tmp_path, "k2")
    assert other.load() == {}
    (parts.parts()[0]).write_bytes(b"not a zip")                          # damaged: skipped, the rest is read
    assert float(parts.load()[h][0][0, 0]) == 2


def test_the_single_file_of_earlier_versions_is_read_and_dropped_by_the_next_merge(tmp_path, monkeypatch):
    h = "cd" * 16
    header = json.dumps({"format": "retrieval-duplicate-codes", "version": 1, "model_key": "k1",
                         "turns": list(dc.QUERY_TURNS)})
    np.savez(tmp_path / dc.LEGACY_FILE, hashes=np.array([h], dtype="U32"), codes=code(5)[0][None],
             sizes=np.array([[3, 4]], np.int64), header=np.frombuffer(header.encode(), np.uint8))
    parts = dc.CodeParts(tmp_path, "k1")
    assert parts.load()[h][1] == (3, 4)
    monkeypatch.setattr(dc, "MAX_PARTS", 1)
    parts.add({"ef" * 16: code(6)})
    assert not (tmp_path / dc.LEGACY_FILE).exists()
    assert set(parts.load()) == {h, "ef" * 16}


def test_a_sync_whose_codes_cannot_be_written_still_indexes(tmp_path, generic_key, monkeypatch, caplog):
    photos = tmp_path / "photos"
    fill(photos, photos_of(3, start=40))

    def full(self, codes):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dc.CodeParts, "_write", full)
    idx = Index.create(tmp_path / "idx", preset="default")
    report = idx.sync(photos, workers=1)
    assert report.added == 3 and idx.catalog.count("indexed") == 3
    assert "duplicate codes of the photos added were not kept" in caplog.text
    monkeypatch.undo()
    assert find_duplicates(idx) == [] and len(kept_hashes(idx.path, generic_key)) == 3   # the run computed them
    idx.close()
