"""A photographer's folder on the command line: RAW + JPEG pairs of the same shots (DNG files made from real photos,
tests/raw_photos.py; with and without an embedded preview, one turned by its EXIF orientation), other photos, files
that are not photos and a broken NEF. ``retrieval index`` indexes every RAW file, names the broken one in one line,
and counts what it leaves out by reason, in its text and its JSON; a search by a RAW file finds its JPEG and one by
the JPEG finds the RAW; ``retrieval duplicates`` reports each pair as the same photograph in two formats, keeps both
by default and acts on a pair only when it is named; the photos' facts are the RAW files' own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_world import run
from raw_photos import DATE, MODEL, raw_library


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("raw-library")
    lib = raw_library(d / "photos")
    res = run(["index", d / "photos", "--index", d / "idx", "--workers", "1"])
    assert res.exit_code == 0, res.output
    return {**lib, "photos": d / "photos", "index": str(d / "idx"), "run": res}


def test_every_raw_file_is_indexed_and_the_broken_one_named_once(world):
    res = world["run"]
    n = 2 * len(world["pairs"]) + len(world["others"])
    assert f"{n} images indexed" in res.stdout and "1 unreadable" in res.stdout
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {world['broken']}: not a camera RAW file LibRaw reads (Unsupported file format or not "
                      f"RAW file)"]
    assert world["broken"] not in res.stderr.replace(errors[0], "")   # named once


def test_the_files_left_out_are_counted_by_reason(world):
    res = world["run"]
    assert "3 skipped: 2 not images (.txt), 1 unsupported (.xyz)" in res.stdout.splitlines()
    again = run(["index", world["photos"], "--index", world["index"], "--json", "-q"])
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["skipped"]["count"] == 3
    assert [(r["reason"], r["count"], r["extensions"], r["paths"]) for r in doc["skipped"]["reasons"]] == [
        ("not an image", 2, [".txt"], sorted(p for p, r in world["skipped"].items() if r == "not an image")),
        ("unsupported", 1, [".xyz"], [p for p, r in world["skipped"].items() if r == "unsupported"])]


def test_a_folder_of_no_photo_says_what_it_holds(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "notes.txt").write_text("x")
    res = run(["index", tmp_path / "photos", "--index", tmp_path / "idx"])
    assert res.exit_code != 0
    assert "holds no images" in res.stderr and "1 skipped: 1 not an image (.txt)" in res.stderr


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_a_raw_file_finds_its_jpeg_and_the_jpeg_its_raw(world, which):
    raw, jpeg = world["pairs"][which]
    for query, other in ((raw, jpeg), (jpeg, raw)):
        res = run(["query", query, "--index", world["index"], "--top", "3", "--format", "json"])
        assert res.exit_code == 0, res.output
        hits = json.loads(res.stdout)
        assert [h["path"] for h in hits[:2]] == [query, other], (query, hits)
        assert hits[1]["verified"]


def test_each_pair_is_one_photograph_in_two_formats_kept_together(world):
    res = run(["duplicates", "--index", world["index"], "--format", "json"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.stdout)
    formats = [g for g in groups if g["kind"] == "formats"]
    assert sorted(tuple(sorted(im["path"] for im in g["images"])) for g in formats) == sorted(
        tuple(sorted(p)) for p in world["pairs"])
    for g in formats:
        assert g["keeper_path"].endswith(".DNG") and g["keeper_reason"].startswith("the RAW original")
    assert "4 the same photograph in two formats (kept together)" in res.stderr
    # the extra copies and the default actions leave both formats alone
    paths = run(["duplicates", "--index", world["index"], "--format", "paths"])
    assert not any(p.endswith((".DNG", ".JPG")) for p in paths.stdout.splitlines())
    plan = run(["duplicates", "--index", world["index"], "--action", "trash"])
    assert plan.exit_code == 0 and "0 files would be acted on" in plan.stdout + plan.stderr
    refused = run(["duplicates", "--index", world["index"], "--kinds", "formats", "--action", "trash"])
    assert refused.exit_code != 0 and "acted on only when named" in refused.stderr
    named = [g["group"] for g in formats][:1]
    one = run(["duplicates", "--index", world["index"], "--kinds", "formats", "--groups", named[0], "--action",
               "trash"])
    assert one.exit_code == 0 and "1 files would be acted on" in one.stdout + one.stderr
    assert "other format of" in one.stdout + one.stderr
    for raw, jpeg in world["pairs"]:   # a dry run: nothing was touched
        assert Path(raw).is_file() and Path(jpeg).is_file()


def test_the_facts_of_a_raw_file_are_its_own(world):
    from retrieval.app.photo_facts import photo_facts

    raw, jpeg = world["pairs"][0]                       # 3424 x 2736 photosites, orientation 6
    f, j = photo_facts(raw), photo_facts(jpeg)
    assert f["format"] == "DNG" and f["camera"] == MODEL and f["date"] == DATE.replace(":", "-", 2).replace(" ", "T")
    assert (f["width"], f["height"]) == (2 * j["width"], 2 * j["height"]) == (2736, 3424)
    assert f["error"] is None
