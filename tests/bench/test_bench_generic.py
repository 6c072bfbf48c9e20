"""``retrieval bench generic`` (retrieval.bench.generic_threshold): the first N photos of a set as whole groups, the
mAP of a subset, the crossover read from the rows, the overlap with the generic models' training photos, and one
tiny run end to end on generated groups."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FEATURE_CACHE, shared_path

from retrieval.bench.generic_threshold import (
    Subset,
    bench_generic,
    crossover,
    first_photos,
    set_groups,
    subset_map,
    training_overlap,
)
from retrieval.evaluation.groups import load_groups_spec

GROUPS = [("a0", ["a1", "a2"]), ("b0", ["b1"]), ("c0", ["c1", "c2", "c3"])]
DISTRACTORS = ["x", "y"]


def test_first_photos_keeps_groups_whole_then_fills_with_distractors():
    s = first_photos(GROUPS, DISTRACTORS, 6)   # a (3) + b (2) fit, c (4) does not: one distractor fills
    assert s.images == ("a0", "a1", "a2", "b0", "b1", "x")
    assert s.groups == (("a0", frozenset({"a1", "a2"})), ("b0", frozenset({"b1"})))
    assert first_photos(GROUPS, DISTRACTORS, 9).images == ("a0", "a1", "a2", "b0", "b1", "c0", "c1", "c2", "c3")
    assert len(first_photos(GROUPS, DISTRACTORS, 11).images) == 11
    assert first_photos(GROUPS, DISTRACTORS, 12) is None    # more photos than the set holds
    assert first_photos(GROUPS, DISTRACTORS, 2) is None     # no group fits whole


def test_set_groups_reads_a_spec_in_its_order(tmp_path):
    spec = {"groups": [{"name": "g1", "images": ["q1.jpg", "p1b.jpg", "p1a.jpg"]},
                       {"name": "g2", "images": ["q2.jpg", "p2.jpg"]}], "distractors": ["d.jpg"]}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    groups, distractors = set_groups(load_groups_spec(tmp_path / "s.json"))
    assert groups == [("q1.jpg", ["p1b.jpg", "p1a.jpg"]), ("q2.jpg", ["p2.jpg"])]
    assert distractors == ["d.jpg"]


def test_subset_map_leaves_the_query_out_and_averages_by_hand():
    subset = Subset(images=("q", "p", "n", "r", "s"), groups=(("q", frozenset({"p"})), ("r", frozenset({"s", "n"}))))
    lists = {"q": ["q", "n", "p", "r", "s"], "r": ["r", "s", "p", "n", "q"]}
    # trapezoidal AP, query removed: q -> p 2nd: (0 + 1/2) / 2 = 0.25; r -> s 1st: (1 + 1) / 4 = 0.5, n 3rd:
    # (1/2 + 2/3) / 4 = 0.2917; mean (0.25 + 0.7917) / 2
    assert subset_map(lambda q, k: lists[q][:k], subset) == pytest.approx((0.25 + 0.5 + 7 / 24) / 2)
    assert subset_map(lambda q, k: [q, *sorted(dict(subset.groups)[q])], subset) == pytest.approx(1.0)


def test_crossover_is_the_largest_size_won_everywhere_up_to_it():
    def row(n, s, g, f, preset="default"):
        return {"preset": preset, "set": s, "size": n, "n": n - 2, "map_generic": g, "map_folder": f}

    rows = [row(50, "h", 0.8, 0.7), row(50, "u", 0.9, 0.9), row(100, "h", 0.8, 0.7), row(100, "u", 0.9, 0.8),
            row(200, "h", 0.7, 0.75), row(200, "u", 0.9, 0.8), row(400, "h", 0.9, 0.8), row(400, "u", 0.9, 0.8),
            row(50, "h", 0.5, 0.6, "accurate")]
    assert crossover(rows, "default") == 100       # lost on h at 200: 400 does not count though won
    assert crossover(rows, "accurate") is None
    assert crossover(rows[:8] + [row(800, "h", 0.8, 0.8)], "default") == 100
    assert crossover([r for r in rows if r["size"] != 200], "default") == 400


def test_training_overlap_counts_photos_by_content(tmp_path):
    from PIL import Image

    folder = tmp_path / "data" / "real" / "holidays805" / "jpg"
    folder.mkdir(parents=True)
    photos = []
    for i in range(3):
        p = tmp_path / f"p{i}.png"
        Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(p)
        photos.append(p)
    shutil.copy(photos[0], folder / "renamed.png")
    assert training_overlap(photos, tmp_path / "data") == 1
    assert training_overlap(photos, tmp_path / "nowhere") == 0


def test_bench_generic_end_to_end_on_generated_groups(tmp_path):
    """Three generated scenes of four views as a 'ukbench400' spec: both models index the photos and rank them."""
    shared_path("real", "holidays805", "jpg")     # the generic models are learnt from these photos by make setup
    from retrieval.bench.app import make_synthetic_folder

    real = tmp_path / "data" / "real"
    paths = make_synthetic_folder(real / "photos", 12, side=128)
    groups = [{"name": f"g{i}", "images": [p.split("/real/")[1] for p in paths[4 * i:4 * i + 4]]} for i in range(3)]
    (real / "ukbench400.json").write_text(json.dumps({"groups": groups}))
    rows = list(bench_generic(tmp_path / "data", tmp_path / "work", presets=("default",), sets=("ukbench400",),
                              sizes=(12, 50), feature_store=FEATURE_CACHE))
    assert [(r["size"], r["n"], r["groups"]) for r in rows] == [(12, 12, 3)]      # 50: more than the set holds
    for r in rows:
        assert r["overlap"] == 0 and r["map_other_sets"] is None and r["map_generic"] == r["map_shipped"]
        assert 0 < r["map_shipped"] <= 1 and 0 < r["map_folder"] <= 1 and r["train_s"] > 0
    assert not (tmp_path / "work" / "index").exists()      # each index is removed once measured
    with pytest.raises(ValueError, match="unknown set 'oxford'"):
        list(bench_generic(tmp_path / "data", tmp_path / "work", sets=("oxford",)))
