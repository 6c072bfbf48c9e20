"""Trust on real photos (UKBench): a query whose object is not in the index gets no verified hit, and a
90-degree-rotated copy of an indexed photo (no EXIF tag) never has an unrelated image verified or boxed.

The index holds UKBench groups 0-8 (36 photos); group 9 is kept out. Hits must satisfy: ``box`` only on verified
hits, ``score`` non-increasing with rank, and every verified hit in the query's own group.
"""

from __future__ import annotations

import pytest
from conftest import FEATURE_CACHE, shared_path
from PIL import Image

from retrieval.app.index import Index
from retrieval.engine.presets import load_preset

N_GROUPS = 9


def _ukb(i):
    return shared_path("real", "ukbench400", f"ukbench{i:05d}.jpg")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    p = load_preset("default")
    p.update(name="trust-test", version=1)
    p["features"] = dict(p["features"], max_side=480)
    p["aggregation"] = dict(p["aggregation"], n_components=16)
    p["search"] = dict(p["search"], rerank="spatial")
    folder = tmp_path_factory.mktemp("trust")
    idx = Index.create(folder / "idx", preset=p, feature_store=FEATURE_CACHE)
    idx.sync([str(_ukb(i)) for i in range(4 * N_GROUPS)])
    yield idx
    idx.close()


def _check_hits(hits, group):
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        assert h.box is None or h.verified
        assert (h.inliers is not None) == h.verified  # unverified hits carry no inlier count
        if h.verified:
            assert int(h.path[-9:-4]) // 4 == group, f"{h.path} verified for a query of group {group}"


def test_verified_hits_are_right_and_an_absent_object_gets_none(index):
    hits = index.search(str(_ukb(16)), k=12)  # group 4, indexed
    _check_hits(hits, 4)
    assert hits[0].verified and int(hits[0].path[-9:-4]) == 16
    assert sum(h.verified for h in hits) >= 3  # the query itself and at least two of its 3 group mates
    absent = index.search(str(_ukb(4 * N_GROUPS + 1)), k=12)  # group 9: not in the index
    _check_hits(absent, N_GROUPS)
    assert absent and not any(h.verified for h in absent)
    assert all(h.box is None for h in absent)


@pytest.mark.parametrize("angle", [90, 270])
def test_rotated_copy_never_verifies_an_unrelated_photo(index, tmp_path, angle):
    src = _ukb(24)  # group 6
    rot = tmp_path / f"rot{angle}.png"
    Image.open(src).rotate(angle, expand=True).save(rot)  # PNG: no EXIF orientation to undo it
    hits = index.search(str(rot), k=12)
    _check_hits(hits, 6)
