"""Rotated whole-image queries (``search.rotation_fallback``): a sideways photo finds its upright match only with
the fallback, a query that verified a match is answered as before, and the merge keeps one hit per image."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import make_pool, small_preset

from retrieval.app.index import Index
from retrieval.app.rotations import merge_rotated, needs_rotation
from retrieval.engine.hits import Hit


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from PIL import Image

    tmp = tmp_path_factory.mktemp("rot")
    pool = make_pool(tmp / "pool", side=480)
    photos = tmp / "photos"
    photos.mkdir()
    for p in pool[:10] + pool[17:19]:    # ten distinct photos, and two generated views of the first
        shutil.copy(p, photos)
    src = Image.open(pool[0]).convert("RGB")
    w, h = src.size
    view = src.crop((w // 12, h // 12, w - w // 12, h - h // 12)).resize((int(w * 0.8), int(h * 0.8)))
    view.transpose(Image.Transpose.ROTATE_90).save(photos / "sideways.jpg", quality=92)  # no EXIF orientation
    indexes = {}
    for fallback in (False, True):
        preset = small_preset(f"test-rot-{int(fallback)}")
        preset["search"] = dict(preset["search"], rerank="spatial", query_expansion=0, rotation_fallback=fallback)
        idx = Index.create(tmp / f"idx{int(fallback)}", preset=preset, feature_store=tmp / "features")
        idx.sync(photos, workers=1)
        indexes[fallback] = idx
    yield photos, pool[0].name, pool[17].name, indexes
    for idx in indexes.values():
        idx.close()


def _verified(hits):
    return [Path(h.path).name for h in hits if h.verified]


def test_a_sideways_photo_finds_its_upright_match_with_the_fallback(world):
    photos, target, _, indexes = world
    q = str(photos / "sideways.jpg")
    plain = indexes[False].search(q, k=5)
    assert _verified(plain) == ["sideways.jpg"]            # only itself: upright features miss the turned view
    turned = indexes[True].search(q, k=5)
    assert _verified(turned)[0] == "sideways.jpg" and target in _verified(turned), \
        [(h.path, h.verified, h.inliers) for h in turned]
    assert [h.rank for h in turned] == list(range(1, 6)) and len({h.id for h in turned}) == 5
    assert all(a.score >= b.score for a, b in zip(turned, turned[1:], strict=False))


def test_a_query_that_verified_a_match_is_answered_as_before(world):
    photos, target, view, indexes = world
    plain = indexes[False].search(str(photos / view), k=5)
    assert target in _verified(plain)          # a generated view of the photo verifies it: no rotation needed
    fallback = indexes[True].search(str(photos / view), k=5)
    assert [(h.id, h.score, h.verified) for h in fallback] == [(h.id, h.score, h.verified) for h in plain]


def test_merge_puts_rotated_verified_hits_first_once_and_skips_copies():
    def hit(i, sim, verified=False, inliers=None):
        return Hit(i, sim, inliers=inliers, similarity=sim, verified=verified)

    upright = [hit(7, 0.9, True, 50), hit(1, 0.8), hit(2, 0.7), hit(3, 0.6)]
    is_copy = {7}.__contains__
    assert needs_rotation(upright, is_copy)
    assert not needs_rotation([hit(2, 0.7, True, 12)], is_copy)
    r90 = [hit(3, 0.5, True, 20), hit(7, 0.4, True, 30)]
    r270 = [hit(3, 0.5, True, 25), hit(2, 0.3, True, 10)]
    out = merge_rotated(upright, [r90, r270], is_copy, k=4)
    assert [(h.id, h.inliers) for h in out] == [(7, 50), (3, 25), (2, 10), (1, None)]
    assert merge_rotated(upright, [[hit(7, 0.4, True, 30)]], is_copy, k=4) is upright


def test_turned_features_live_in_the_turned_image(world):
    """Features of the image turned by 90 degrees counter-clockwise: the size is swapped, and mapped back to the
    upright image (x, y) = (w - 1 - y', x') their centres land on the upright features (the detector sees the same
    structures)."""
    import numpy as np
    from scipy.spatial import cKDTree

    from retrieval.app.rotations import rotated_features

    photos, target, _, indexes = world
    ex = indexes[False].extractor
    upright = ex(photos / target)
    turned = rotated_features(ex, photos / target, 1)
    w, h = upright.image_size
    assert turned.image_size == (h, w)
    back = np.c_[w - 1 - turned.xy[:, 1], turned.xy[:, 0]]
    d, _ = cKDTree(upright.xy).query(back)
    assert len(turned) > 50 and np.median(d) < 1.0, np.median(d)


def test_turns_extracted_side_by_side_equal_one_by_one(world):
    """The fallback extracts its two turns on two threads: the same features, bit for bit, as one after the other
    (the detector shares no state between calls)."""
    import numpy as np

    from retrieval.app.rotations import QUARTER_TURNS, rotated_features, turned_features

    photos, target, _, indexes = world
    ex = indexes[False].extractor
    loaded = ex.load(photos / target)
    together = turned_features(ex, loaded)
    assert len(together) == len(QUARTER_TURNS)
    for t, f in zip(QUARTER_TURNS, together, strict=True):
        alone = rotated_features(ex, loaded, t)
        assert len(f) > 50 and f.image_size == alone.image_size
        np.testing.assert_array_equal(f.frames, alone.frames)
        np.testing.assert_array_equal(f.descriptors, alone.descriptors)
