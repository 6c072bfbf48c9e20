"""``retrieval duplicates`` and ``query --exclude-duplicates`` on a generated folder: real Holidays photos (one
per scene, so unrelated to each other), and for some of them an exact copy, a resized copy and a re-encoded JPEG
copy. Every pair inside a reported group must be two files of one source photo (precision 1 here; the issue's
bar is 0.99), and every exact and resized copy must be found (recall 1.0)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import shutil

import pytest
from cli_world import run
from conftest import shared_path
from PIL import Image


@pytest.fixture(scope="module")
def dup_world(tmp_path_factory, cli_world):
    src = shared_path("real", "holidays805", "jpg")
    by_scene = {}
    for p in sorted(src.glob("*.jpg")):
        by_scene.setdefault(p.name[:4], p)
    originals = list(by_scene.values())[::7][:24]
    d = tmp_path_factory.mktemp("dups")
    photos = d / "photos"
    photos.mkdir()
    source = {}
    for i, p in enumerate(originals):
        dst = photos / f"p{i:02d}.jpg"
        shutil.copy(p, dst)
        source[dst.name] = i
        if i % 3:
            continue
        im = Image.open(p).convert("RGB")
        shutil.copy(p, photos / f"p{i:02d} copy.jpg")
        im.resize((im.width // 2, im.height // 2), Image.LANCZOS).save(photos / f"p{i:02d}_small.png")
        im.save(photos / f"p{i:02d}_q40.jpg", quality=40)
        for name in (f"p{i:02d} copy.jpg", f"p{i:02d}_small.png", f"p{i:02d}_q40.jpg"):
            source[name] = i
    idx = d / "idx"
    res = run(["-q", "index", photos, "--index", idx, "--preset", cli_world["dir"] / "p.json", "--model",
               cli_world["index"], "--workers", "1"])
    assert res.exit_code == 0, res.output
    return {"photos": photos, "index": str(idx), "source": source, "n_sources": len(originals)}


def name(path):
    return path.rsplit("/", 1)[-1]


def test_duplicates_precision_and_recall(dup_world, tmp_path):
    res = run(["duplicates", "--index", dup_world["index"], "--format", "json", "--html", tmp_path / "d.html"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.stdout)
    source = dup_world["source"]
    reported = set()
    for g in groups:
        names = [name(im["path"]) for im in g["images"]]
        reported |= {frozenset(p) for p in itertools.combinations(names, 2)}
        assert {p["a"] for p in g["pairs"]} | {p["b"] for p in g["pairs"]} == {im["id"] for im in g["images"]}
    true = {p for p in reported if len({source[n] for n in p}) == 1}
    assert reported and len(true) / len(reported) >= 0.99, sorted(map(sorted, reported - true))
    wanted = {frozenset((f"p{i:02d}.jpg", f"p{i:02d}{suffix}")) for i in range(0, dup_world["n_sources"], 3)
              for suffix in (" copy.jpg", "_small.png")}
    assert wanted <= reported, sorted(map(sorted, wanted - reported))
    kind = {name(im["path"]): im["kind"] for g in groups for im in g["images"]}
    copies = range(0, dup_world["n_sources"], 3)
    assert all(kind[f"p{i:02d}.jpg"] == kind[f"p{i:02d} copy.jpg"] == "exact" for i in copies)
    assert all(kind[f"p{i:02d}_small.png"] == "near" for i in copies)          # frame mapped onto frame
    page = (tmp_path / "d.html").read_text()
    assert f'data-groups="{len(groups)}"' in page
    assert page.count('<img class="thumb"') == sum(len(g["images"]) for g in groups)


def test_duplicates_formats(dup_world):
    base = ["duplicates", "--index", dup_world["index"], "-q"]
    doc = json.loads(run([*base, "--format", "json"]).stdout)
    assert [json.loads(ln) for ln in run([*base, "--format", "jsonl"]).stdout.splitlines()] == doc
    rows = list(csv.DictReader(io.StringIO(run([*base, "--format", "csv"]).stdout)))
    flat = [(g["group"], im["id"], im["path"], im["kind"]) for g in doc for im in g["images"]]
    assert [(int(r["group"]), int(r["id"]), r["path"], r["kind"]) for r in rows] == flat
    blocks = run([*base, "--format", "paths"]).stdout.split("\n\n")
    assert [b.strip("\n").split("\n") for b in blocks] == [[im["path"] for im in g["images"]] for g in doc]
    records = run([*base, "-0"]).stdout.split("\0")[:-1]
    assert [p for p in records if p] == [im["path"] for g in doc for im in g["images"]]
    assert records.count("") == len(doc) - 1
    table = run([*base]).stdout.splitlines()
    assert table[0].split() == ["group", "kind", "id", "size", "path"]
    assert [ln.split(None, 4)[4] for ln in table[1:]] == [im["path"] for g in doc for im in g["images"]]


def test_query_exclude_duplicates(dup_world):
    photos = dup_world["photos"]
    base = ["query", photos / "p03.jpg", "--index", dup_world["index"], "-k", "5", "--format", "json"]
    plain = [name(h["path"]) for h in json.loads(run(base).stdout)]
    assert {"p03.jpg", "p03 copy.jpg", "p03_small.png", "p03_q40.jpg"} <= set(plain)
    res = run([*base, "--exclude-duplicates"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)
    names = [name(h["path"]) for h in hits]
    assert len(hits) == 5 and [h["rank"] for h in hits] == [1, 2, 3, 4, 5]
    assert not {"p03.jpg", "p03 copy.jpg", "p03_small.png", "p03_q40.jpg"} & set(names)
    assert all(dup_world["source"][n] != 3 for n in names)
