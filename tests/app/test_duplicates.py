"""``retrieval duplicates`` (groups, formats, HTML, actions through the CLI, ``--against``) and ``query
--exclude-duplicates`` on a generated folder: real Holidays photos (one per scene, so unrelated to each other), and
for some of them an exact copy, a half-size PNG and a re-encoded JPEG. The kinds' accuracy on real photos at scale
is tests/app/test_duplicates_labelled.py."""

from __future__ import annotations

import csv
import gc
import io
import json
import shutil
from pathlib import Path

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
    return {"photos": photos, "index": str(idx), "source": source, "n_sources": len(originals),
            "scene_of": {f"p{i:02d}.jpg": p.name[:4] for i, p in enumerate(originals)}}


def name(path):
    return path.rsplit("/", 1)[-1]


def test_groups_are_of_one_kind_with_the_right_members(dup_world, tmp_path):
    res = run(["duplicates", "--index", dup_world["index"], "--format", "json", "--html", tmp_path / "d.html"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.stdout)
    source = dup_world["source"]
    copies = range(0, dup_world["n_sources"], 3)
    by_kind = {k: [{name(im["path"]) for im in g["images"]} for g in groups if g["kind"] == k]
               for k in ("exact", "near", "scene")}
    for g in groups:                            # one source photo per group, one keeper, pairs inside the group
        names = [name(im["path"]) for im in g["images"]]
        assert len({source[n] for n in names}) == 1, names
        assert [im["keeper"] for im in g["images"]].count(True) == 1
        assert g["keeper"] in {im["id"] for im in g["images"]}
        assert all(p["kind"] == g["kind"] for p in g["pairs"])
    assert sorted(map(sorted, by_kind["exact"])) == sorted([f"p{i:02d} copy.jpg", f"p{i:02d}.jpg"] for i in copies)
    assert not by_kind["scene"]
    # each near group: the exact pair's keeper, the half-size PNG and the JPEG at quality 40; a half-size copy
    # with fewer than 20 features (a 162-pixel thumbnail of a plain scene) is too imprecise for the same-photograph
    # test (docs/user-guide.md, "Duplicates", limits): it may be left out, never put in another group
    from retrieval.app.index import Index

    idx = Index.open(dup_world["index"])
    searcher = idx.searcher()
    n_features = {name(r["path"]): len(searcher.features_of(r["id"])) for r in idx.catalog.snapshot()[1]}
    idx.close()
    left_out = 0
    for i in copies:
        small = f"p{i:02d}_small.png"
        group = next((g for g in by_kind["near"] if f"p{i:02d}_q40.jpg" in g), None)
        assert group is not None
        assert len(group & {f"p{i:02d}.jpg", f"p{i:02d} copy.jpg"}) == 1
        if small in group:
            assert group - {f"p{i:02d}.jpg", f"p{i:02d} copy.jpg"} == {small, f"p{i:02d}_q40.jpg"}
        else:
            assert n_features[small] < 20, (small, n_features[small])
            assert not any(small in g for kind in by_kind.values() for g in kind)
            left_out += 1
    assert left_out <= 1
    for g in groups:                            # the half-size copy is never the keeper (largest resolution first)
        keeper = next(im for im in g["images"] if im["keeper"])
        assert keeper["width"] * keeper["height"] == max(im["width"] * im["height"] for im in g["images"])
        assert not name(keeper["path"]).endswith("_small.png")
    page = (tmp_path / "d.html").read_text()
    assert f'data-groups="{len(groups)}"' in page
    assert page.count('<img class="thumb"') == sum(len(g["images"]) for g in groups)
    assert page.count('class="badge">keep<') == len(groups)


def test_duplicates_formats(dup_world):
    base = ["duplicates", "--index", dup_world["index"], "-q"]
    doc = json.loads(run([*base, "--format", "json"]).stdout)
    assert [json.loads(ln) for ln in run([*base, "--format", "jsonl"]).stdout.splitlines()] == doc
    rows = list(csv.DictReader(io.StringIO(run([*base, "--format", "csv"]).stdout)))
    flat = [(g["group"], g["kind"], im["id"], im["path"]) for g in doc for im in g["images"]]
    assert [(int(r["group"]), r["kind"], int(r["id"]), r["path"]) for r in rows] == flat
    extras = [im["path"] for g in doc if g["kind"] in ("exact", "near") for im in g["images"] if not im["keeper"]]
    assert run([*base, "--format", "paths"]).stdout.splitlines() == extras
    assert run([*base, "-0"]).stdout.split("\0")[:-1] == extras
    table = run([*base]).stdout.splitlines()
    assert table[0].split()[:4] == ["group", "kind", "keep", "id"]
    assert [ln.split("   (kept: ")[0].rsplit("  ", 1)[-1] for ln in table[1:]] == [
        im["path"] for g in doc for im in g["images"]]
    reasons = [ln.split("   (kept: ")[1] for ln in table[1:] if "   (kept: " in ln]   # the rule that decided
    assert reasons == [g["keeper_reason"] + ")" for g in doc]
    assert [ln.split()[2] == "*" for ln in table[1:]] == [im["keeper"] for g in doc for im in g["images"]]
    near_only = json.loads(run([*base, "--format", "json", "--kinds", "near"]).stdout)
    assert near_only and {g["kind"] for g in near_only} == {"near"}
    bad = run([*base, "--kinds", "copies"])
    assert bad.exit_code != 0 and "exact, formats, near, scene" in bad.output


def _tree_digest(*folders) -> dict:
    """Every file's digest. The commands run in this process (CliRunner) leave their catalog connections to the
    garbage collector, and closing the last one checkpoints the WAL into catalog.db: they are collected first, so
    that the bytes compared do not depend on when that happens."""
    import gc
    import hashlib

    gc.collect()
    out = {}
    for folder in folders:
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file():
                out[str(p)] = hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
    return out


def test_action_dry_run_move_and_undo(dup_world, cli_world, tmp_path):
    photos = tmp_path / "photos"
    shutil.copytree(dup_world["photos"], photos)
    idx = tmp_path / "idx"
    res = run(["-q", "index", photos, "--index", idx, "--preset", cli_world["dir"] / "p.json", "--model",
               cli_world["index"], "--workers", "1"])
    assert res.exit_code == 0, res.output
    groups = json.loads(run(["duplicates", "--index", idx, "-q", "--format", "json"]).stdout)
    extras = {im["path"] for g in groups for im in g["images"] if not im["keeper"]}
    assert extras
    before = _tree_digest(photos, idx)
    dry = run(["duplicates", "--index", idx, "--action", "move", "--to", tmp_path / "extra"])
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and len([ln for ln in dry.stdout.splitlines() if ln.startswith("move")]) == \
        len(extras)
    assert _tree_digest(photos, idx) == before and not (tmp_path / "extra").exists()
    done = run(["duplicates", "--index", idx, "--action", "move", "--to", tmp_path / "extra", "--yes"])
    assert done.exit_code == 0, done.output
    assert not any(Path(p).exists() for p in extras)
    moved = {p.name for p in (tmp_path / "extra").rglob("*") if p.is_file()}
    assert moved == {Path(p).name for p in extras}
    keeper = next(im["path"] for g in groups for im in g["images"] if im["keeper"])
    hits = json.loads(run(["query", keeper, "--index", idx, "-k", "30", "--format", "json"]).stdout)
    assert not {h["path"] for h in hits} & extras
    assert not json.loads(run(["duplicates", "--index", idx, "-q", "--format", "json", "--kinds",
                               "exact,near"]).stdout)
    plan = done.output.rsplit("--undo ", 1)[1].split()[0]
    undone = run(["duplicates", "--index", idx, "--undo", plan])
    assert undone.exit_code == 0, undone.output
    assert _tree_digest(photos) == {k: v for k, v in before.items() if k.startswith(str(photos))}
    back = json.loads(run(["duplicates", "--index", idx, "-q", "--format", "json"]).stdout)
    assert {im["path"] for g in back for im in g["images"] if not im["keeper"]} == extras


def test_against_reports_exactly_the_photos_already_indexed(dup_world, tmp_path):
    from PIL import Image

    new = tmp_path / "new"
    new.mkdir()
    photos = dup_world["photos"]
    indexed = sorted(p for p in photos.glob("p??.jpg"))
    expected = set()
    for n, p in enumerate(indexed[:8]):           # 8 copies of indexed photos, 4 kinds of edits
        im = Image.open(p).convert("RGB")
        dst = new / f"copy{n}.jpg"
        if n % 4 == 0:
            shutil.copy(p, dst)
        elif n % 4 == 1:
            im.resize((im.width * 3 // 4, im.height * 3 // 4), Image.LANCZOS).save(dst, quality=90)
        elif n % 4 == 2:
            im.rotate(90, expand=True).save(dst, quality=90)
        else:
            im.crop((0, 0, im.width * 9 // 10, im.height * 9 // 10)).save(dst, quality=85)
        expected.add(dst.name)
    src = shared_path("real", "holidays805", "jpg")
    used = {dup_world["scene_of"][n] for n in dup_world["scene_of"]}
    others = [p for p in sorted(src.glob("*.jpg")) if p.name[:4] not in used and p.name.endswith("00.jpg")]
    for p in others[:12]:                          # 12 photos of scenes the index does not have
        shutil.copy(p, new / p.name)
    gc.collect()            # an index another test left open closes its catalog now, not during this run
    before = _tree_digest(dup_world["index"])
    res = run(["duplicates", "--index", dup_world["index"], "--against", new, "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc) == 20
    found = {name(d["path"]) for d in doc if d["kind"] is not None}
    assert found == expected
    for d in doc:
        if d["kind"] is not None:
            assert d["matches"] and all(m["kind"] in ("exact", "near") for m in d["matches"])
    assert next(d for d in doc if name(d["path"]) == "copy0.jpg")["kind"] == "exact"
    listed = run(["duplicates", "--index", dup_world["index"], "--against", new, "--format", "paths", "-q"])
    assert {name(p) for p in listed.stdout.splitlines()} == expected
    after = _tree_digest(dup_world["index"])
    assert {k: v for k, v in after.items() if "duplicate-codes" not in k} == \
        {k: v for k, v in before.items() if "duplicate-codes" not in k}


def test_against_lists_every_match_it_counts_and_never_the_photo_itself(dup_world, tmp_path):
    """The table's count of each kind is the number of paths listed for it (once, 'exact 2' listed one path); a
    photo that is itself indexed is not its own copy (once, it counted as one)."""
    photos, index = dup_world["photos"], dup_world["index"]
    new = tmp_path / "new"
    new.mkdir()
    shutil.copy(photos / "p00.jpg", new / "p00.jpg")             # the index has it twice: p00.jpg, p00 copy.jpg
    table = run(["duplicates", "--index", index, "--against", new, "-q"]).stdout.splitlines()
    assert table[0].split() == ["kind", "matches", "path"]
    assert table[1].split()[:3] == ["exact", "2", str(new / "p00.jpg")]
    assert [ln.split("  ->  ")[1] for ln in table[1:]] == [str(photos / "p00 copy.jpg"), str(photos / "p00.jpg")]
    assert table[2].split() == ["->", str(photos / "p00.jpg")]

    def against(path):
        doc = json.loads(run(["duplicates", "--index", index, "--against", path, "--format", "json"]).stdout)
        return doc[0]["kind"], [name(m["path"]) for m in doc[0]["matches"]]

    assert against(photos / "p03.jpg") == ("exact", ["p03 copy.jpg"])     # indexed itself, one other copy
    assert against(photos / "p01.jpg") == (None, [])                     # indexed itself, no copy
    table = run(["duplicates", "--index", index, "--against", photos / "p01.jpg", "-q"]).stdout.splitlines()
    assert table[1].split() == ["-", "0", str(photos / "p01.jpg")]


def test_query_exclude_duplicates(dup_world, tmp_path):
    """The query's own photo stays first (it was once dropped as a copy of itself), its copies go, and of the other
    hits one photo of each photograph is kept (their copies collapsed); a query from outside the index drops every
    copy of itself."""
    photos, source = dup_world["photos"], dup_world["source"]
    copies = {"p03 copy.jpg", "p03_small.png", "p03_q40.jpg"}
    base = ["query", photos / "p03.jpg", "--index", dup_world["index"], "--format", "json"]
    plain = [name(h["path"]) for h in json.loads(run([*base, "-k", "40"]).stdout)]
    assert "p03.jpg" in plain[:2] and copies <= set(plain)              # an exact copy may rank first
    assert {source[n] for n in plain if n not in copies and [source[m] for m in plain].count(source[n]) > 1}
    res = run([*base, "-k", "12", "--exclude-duplicates"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)
    names = [name(h["path"]) for h in hits]
    assert len(hits) == 12 and [h["rank"] for h in hits] == list(range(1, 13))
    assert names[0] == "p03.jpg" and not copies & set(names)
    assert len({source[n] for n in names}) == len(names), names       # one photo of each photograph
    assert names[1:] == [n for n in plain if n in names[1:]]          # in the order of the plain search
    outside = tmp_path / "p03 outside.jpg"
    im = Image.open(photos / "p03.jpg").convert("RGB")
    im.crop((0, 0, im.width * 19 // 20, im.height * 19 // 20)).save(outside, quality=90)
    res = run(["query", outside, "--index", dup_world["index"], "-k", "8", "--format", "json",
               "--exclude-duplicates"])
    names = [name(h["path"]) for h in json.loads(res.stdout)]
    assert len(names) == 8 and all(source[n] != 3 for n in names) and len({source[n] for n in names}) == 8


def test_the_inverted_file_over_the_codes_finds_the_same_groups(dup_world, monkeypatch):
    """Above the size limit the candidates come through the inverted file over the codes
    (retrieval.app.duplicates.candidates): on this folder it gives the groups of every code compared, and the bench's
    report of the search says what it did."""
    from retrieval.app.duplicates import candidates as duplicate_candidates
    from retrieval.app.duplicates import find_duplicates
    from retrieval.app.index import Index
    from retrieval.bench.duplicates import candidate_search

    def summary(groups):
        return sorted((g.kind, sorted(im["id"] for im in g.images)) for g in groups)

    idx = Index.open(dup_world["index"])
    try:
        every = find_duplicates(idx)
        assert candidate_search(idx)["inverted_file"] is False
        monkeypatch.setattr(duplicate_candidates, "EXACT_BELOW", 0)
        report = candidate_search(idx, sample=100)
        assert report["inverted_file"] and report["cells"] >= 2 and report["sampled_pairs"] > 0 < report["pairs"]
        assert report["recall"] == 1.0 and report["sampled"] > 0    # fewer cells than probes: every cell probed
        assert summary(find_duplicates(idx)) == summary(every) and any(g.kind == "near" for g in every)
    finally:
        idx.close()


def test_cheap_sides_kept_for_a_run_are_the_checks_own_and_a_full_disk_only_slows_it(dup_world, monkeypatch, caplog):
    """The cheap sides read once per run (retrieval.app.duplicates.sides) hold exactly what the check computes from
    the stored features; when their temporary file cannot be reserved (a full disk), the run says so and finds
    the same groups by reading the features again."""
    import errno
    import os

    import numpy as np

    from retrieval.app.duplicates import find_duplicates
    from retrieval.app.duplicates import sides as duplicate_sides
    from retrieval.app.duplicates.pair_verifier import CHEAP_FEATURES, PairVerifier
    from retrieval.app.index import Index
    from retrieval.features.frames import largest

    idx = Index.open(dup_world["index"])
    try:
        searcher = idx.searcher()
        ids = sorted(r["id"] for r in idx.catalog.snapshot()[1] if r["status"] == "indexed")
        verifier = PairVerifier(searcher)
        verifier.prepare(ids, threads=2, folder=idx.path)
        assert not [p for p in os.listdir(idx.path) if p.startswith("duplicates-")]   # unnamed temporary file
        kept = 0
        for i in ids:
            f = searcher.features_of(i)
            assert verifier.sides.count(i) == len(f)
            side = verifier.sides.side(i)
            if len(f) <= CHEAP_FEATURES:
                assert side is None
                continue
            want = verifier.verifier.described(largest(f, CHEAP_FEATURES), roles=())
            np.testing.assert_array_equal(side.frames, want.frames)
            np.testing.assert_array_equal(side.descriptors, want.descriptors)
            assert side.image_size == want.image_size
            kept += 1
        assert kept >= len(ids) // 2
        verifier.close()
        groups = find_duplicates(idx)

        def full_disk(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(duplicate_sides.os, "posix_fallocate", full_disk, raising=False)
        with caplog.at_level("WARNING", logger="retrieval.app.duplicates"):
            again = find_duplicates(idx)
        assert "cannot be kept for this run" in caplog.text and "No space left" in caplog.text
        assert [(g.kind, sorted(im["id"] for im in g.images)) for g in again] == \
            [(g.kind, sorted(im["id"] for im in g.images)) for g in groups]
    finally:
        idx.close()
