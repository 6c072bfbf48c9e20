"""The same-photograph evidence (:mod:`retrieval.app.duplicates.same_photo`), quarter turns of upright features, candidate
pairs by code and the grouping of :mod:`retrieval.app.duplicates`."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import FEATURE_CACHE, shared_path
from PIL import Image, ImageEnhance

from retrieval.app.duplicates import DuplicatePair, build_groups
from retrieval.app.duplicates.candidates import candidate_pairs
from retrieval.app.duplicates.codes import centred
from retrieval.app.duplicates.same_photo import (
    MIN_AGREEMENT,
    block_agreement,
    grey_thumbnail,
    same_photograph,
    turned,
)
from retrieval.features.types import LocalFeatures

CONFIG = {"detector": "hesaff"}


def _features(points, size, scales=None, seed=0):
    rng = np.random.default_rng(seed)
    n = len(points)
    s = rng.uniform(2, 6, n) if scales is None else scales
    frames = np.c_[points, s, np.zeros(n), np.zeros(n), s].astype(np.float32)
    return LocalFeatures(frames=frames, descriptors=rng.integers(0, 60, (n, 128), dtype=np.uint8),
                         image_size=size, config=CONFIG)


def _scene(n=400, size=(640, 480), seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform([0, 0], size, (n, 2)), rng.uniform(2, 6, n)


def _evidence(pa, sa, pb, sb, size_a, size_b, match):
    fa, fb = _features(pa, size_a, sa), _features(pb, size_b, sb)
    return same_photograph(fa, fb, np.c_[match, match])


def test_a_resized_copy_is_the_same_photograph():
    p, s = _scene()
    rng = np.random.default_rng(1)
    q = 0.5 * p + rng.normal(0, 0.05, p.shape)             # half size, sub-pixel detection noise
    ev = _evidence(p, s, q, 0.5 * s, (640, 480), (320, 240), np.arange(0, 400, 3))
    assert ev.near and abs(ev.scale - 0.5) < 0.01 and ev.deviation < 0.1 and ev.repeatability > 0.95


def test_a_crop_and_a_quarter_turn_are_the_same_photograph():
    p, s = _scene()
    keep = (p[:, 0] > 100) & (p[:, 0] < 600) & (p[:, 1] > 50) & (p[:, 1] < 450)
    crop = p[keep] - [100, 50]
    ev = _evidence(p[keep], s[keep], crop, s[keep], (640, 480), (500, 400), np.arange(0, keep.sum(), 4))
    assert ev.near and ev.contained > 0.99
    turned_pts = np.c_[p[:, 1], 639 - p[:, 0]]             # turned by 90 degrees
    ev = _evidence(p, s, turned_pts, s, (640, 480), (480, 640), np.arange(0, 400, 4))
    assert ev.near and abs(abs(ev.angle) - 90) < 0.01


def test_another_shot_is_not_the_same_photograph():
    p, s = _scene()
    # the camera moved: a perspective change (points move by several pixels across the frame)
    H = np.array([[1.02, 0.01, 3.0], [0.005, 0.99, -2.0], [2e-5, 1e-5, 1.0]])
    ph = np.c_[p, np.ones(len(p))] @ H.T
    q = ph[:, :2] / ph[:, 2:]
    ev = _evidence(p, s, q, s, (640, 480), (640, 480), np.arange(0, 400, 3))
    assert not ev.near
    # or turned by 2 degrees (a hand-held second shot), every point exactly where the similarity puts it
    a = np.radians(2.0)
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    ev = _evidence(p, s, (p - 320) @ R.T + 320, s, (640, 480), (640, 480), np.arange(0, 400, 3))
    assert not ev.near and ev.deviation > 1.9
    # or the same view with different interest points (another exposure): few points repeat
    q2, s2 = _scene(seed=5)
    q2[:60], s2[:60] = p[:60], s[:60]
    ev = _evidence(p, s, q2, s2, (640, 480), (640, 480), np.arange(0, 60))
    assert not ev.near and ev.repeatability < 0.3


def test_turned_features_match_the_turned_photo(features_of, tmp_path):
    from retrieval.rerank.verifier import Verifier

    path = sorted(shared_path("real", "ukbench400").glob("*.jpg"))[12]
    f0 = features_of(path)
    v = Verifier()
    d0 = v.described(f0)
    for k, angle in ((1, 90), (2, 180), (3, 270)):
        p = tmp_path / f"turned{angle}.png"
        Image.open(path).convert("RGB").rotate(angle, expand=True).save(p)
        ft = features_of(p)
        upright = v.check(d0, v.described(ft), (0, 0, 639, 479))
        assert upright.inliers < 20                              # upright features do not match the turned photo
        o = v.check(v.described(turned(f0, k)), v.described(ft), (0, 0, 639, 479))
        assert o.verified and o.inliers > 0.3 * len(f0), (k, o.inliers, len(f0))
        ev = same_photograph(turned(f0, k), ft, o.inlier_pairs)
        assert ev.near and abs((ev.angle + angle + 180) % 360 - 180) < 0.5    # y points down: -angle


def test_candidate_pairs_by_code_with_turns():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(6, 3, 32)).astype(np.float32)
    base[3, 2] = base[0, 0] + 0.01          # photo 3 turned by 180 degrees looks like photo 0 upright
    base[4, 0] = base[1, 0] + 0.01          # photo 4 is photo 1
    codes = centred(base)
    pairs = candidate_pairs(codes, np.ascontiguousarray(codes[:, 0]), k=1, threshold=0.9)
    got = {(a, b): turn for a, b, _, turn, _ in pairs}
    assert got == {(0, 3): 2, (1, 4): 0}    # (3 turned by 180) = 0, so 0 turned by 180 = 3
    assert all(a < b for a, b, _, _, _ in pairs)
    assert candidate_pairs(codes, np.ascontiguousarray(codes[:, 0]), k=1, threshold=1.01) == []


def test_groups_keep_kinds_apart_and_choose_the_largest(tmp_path):
    sizes = {1: (800, 600), 2: (800, 600), 3: (400, 300), 4: (800, 600), 5: (640, 480), 6: (320, 240)}
    rows = {}
    for i, (w, h) in sizes.items():
        p = tmp_path / f"p{i}.jpg"
        Image.new("RGB", (w, h), (i * 30, 80, 90)).save(p)
        rows[i] = {"id": i, "path": str(p), "size": p.stat().st_size}
    pairs = [DuplicatePair(1, 2, "exact"), DuplicatePair(2, 3, "near", 0.9, 50),
             DuplicatePair(1, 3, "near", 0.9, 50), DuplicatePair(3, 4, "scene", 0.5, 30),
             DuplicatePair(5, 6, "near", 0.8, 40)]
    groups = build_groups(pairs, rows)
    kinds = [(g.kind, sorted(im["id"] for im in g.images), g.keeper) for g in groups]
    assert kinds[0][0] == "exact" and kinds[0][1] == [1, 2]
    near = [k for k in kinds if k[0] == "near"]
    assert sorted(k[1] for k in near) == [[1, 3], [5, 6]] or sorted(k[1] for k in near) == [[2, 3], [5, 6]]
    assert all(k[2] in (1, 2, 5) for k in near)            # the largest of each near group is kept
    scene = [k for k in kinds if k[0] == "scene"]
    assert len(scene) == 1 and 4 in scene[0][1] and len(scene[0][1]) == 2
    assert [g.kind for g in groups] == sorted((g.kind for g in groups), key=["exact", "near", "scene"].index)
    for g in groups:
        assert all(p.kind == g.kind for p in g.pairs)


@pytest.mark.parametrize("n", [0, 2])
def test_too_few_inliers_are_not_evidence(n):
    p, s = _scene(10)
    assert not same_photograph(_features(p, (640, 480), s), _features(p, (640, 480), s),
                               np.c_[np.arange(n), np.arange(n)]).near


# ------------------------------------------------------------------------------------- a brightened copy
BRIGHT = "100800.jpg"
"""A Holidays photo with a wide bright sky, and another shot of its scene (``100801.jpg``)."""


def _burnt(src, dst) -> float:
    """Write ``src`` brightened by 80 % (every level above 142 of 255 clipped to white: highlights burnt out);
    the share of its pixels that turned white."""
    im = ImageEnhance.Brightness(Image.open(src).convert("RGB")).enhance(1.8)
    im.save(dst, quality=92)
    return float((np.asarray(im.convert("L")) >= 250).mean())


def test_burnt_highlights_leave_the_pixels_of_a_copy_in_agreement(tmp_path):
    """The pixel test of a near pair (block_agreement) compares grey levels by correlation, which no change of
    brightness or contrast alters; what burnt out to white in one photo is left out instead of disagreeing."""
    src = shared_path("real", "holidays805", "jpg", BRIGHT)
    dst = tmp_path / "bright.jpg"
    assert _burnt(src, dst) > 0.5                   # most of the frame is white
    size = Image.open(src).size
    identity = (1.0, 0.0, 0.0, 0.0)
    assert block_agreement(grey_thumbnail(src), grey_thumbnail(dst), size, size, identity) >= MIN_AGREEMENT
    other = shared_path("real", "holidays805", "jpg", "100801.jpg")   # another shot still disagrees
    assert block_agreement(grey_thumbnail(src), grey_thumbnail(other), size, size, identity) < MIN_AGREEMENT


def test_a_brightened_copy_with_burnt_highlights_is_near_another_shot_is_not(tmp_path, cli_world):
    """Its geometry says the same photograph (a similarity of the whole frame, the interest points repeated):
    the brightness must not overrule it (before, the pixels disagreed where the sky burnt out and the pair was
    called 'scene')."""
    from retrieval.app.duplicates import find_duplicates
    from retrieval.app.index import Index

    photos = tmp_path / "photos"
    photos.mkdir()
    for name in (BRIGHT, "100801.jpg"):
        shutil.copy(shared_path("real", "holidays805", "jpg", name), photos / name)
    _burnt(photos / BRIGHT, photos / "100800 bright.jpg")
    idx = Index.create(tmp_path / "idx", cli_world["dir"] / "p.json", model=cli_world["index"],
                       feature_store=FEATURE_CACHE)
    try:
        idx.sync(photos, workers=1)
        groups = find_duplicates(idx)
    finally:
        idx.close()
    kinds = {g.kind: sorted(Path(im["path"]).name for im in g.images) for g in groups}
    assert kinds.get("near") == ["100800 bright.jpg", BRIGHT], kinds
    pair = next(g for g in groups if g.kind == "near").pairs[0]
    assert pair.evidence.near and pair.evidence.agreement >= MIN_AGREEMENT
    assert all("100801.jpg" not in names for kind, names in kinds.items() if kind in ("exact", "near"))
