"""Actions on duplicate groups (retrieval.app.duplicates.actions) on a small real index: 8 Holidays photos (one per
scene) with byte copies of three in a subfolder, one copy with the same pixels but other bytes, and a resized one.
A plan changes nothing; move, trash and link do what they say on the files and the index (a later sync keeps the
moved files out) and are undone exactly; a file changed after the plan is never touched."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import FEATURE_CACHE, shared_path
from PIL import Image

from retrieval.app import safe_files
from retrieval.app.duplicates import actions as da
from retrieval.app.duplicates.actions import apply_plan, dry_run_text, plan_actions
from retrieval.app.duplicates.plan_file import load_plan
from retrieval.app.duplicates.undo import undo_plan
from retrieval.app.index import Index

COPIED = (0, 3, 5)   # photos with a byte copy in photos/copies


@pytest.fixture(scope="module")
def sources():
    by_scene = {}
    for p in sorted(shared_path("real", "holidays805", "jpg").glob("*.jpg")):
        by_scene.setdefault(p.name[:4], p)
    return list(by_scene.values())[::9][:8]


def make_photos(d: Path, sources) -> Path:
    photos = d / "photos"
    (photos / "copies").mkdir(parents=True)
    for i, p in enumerate(sources):
        shutil.copy(p, photos / f"p{i}.jpg")
    for i in COPIED:
        shutil.copy(sources[i], photos / "copies" / f"p{i}.jpg")
    (photos / "copies" / "p0 meta.jpg").write_bytes(sources[0].read_bytes() + b"\0trailing metadata")
    im = Image.open(sources[1]).convert("RGB")
    im.resize((im.width // 2, im.height // 2)).save(photos / "copies" / "p1 small.jpg")
    return photos


@pytest.fixture
def world(tmp_path, sources, cli_world):
    photos = make_photos(tmp_path, sources)
    idx = Index.create(tmp_path / "idx", cli_world["dir"] / "p.json", model=cli_world["index"],
                       feature_store=FEATURE_CACHE)
    idx.sync(photos, workers=1)
    yield {"dir": tmp_path, "photos": photos, "idx": idx}
    idx.close()


def groups_of(photos: Path) -> list[dict]:
    """Groups as the duplicates finder gives them: exact (byte or pixel copies), one near."""
    def im(i, p):
        return {"id": i, "path": str(p)}
    groups = [{"group": n + 1, "kind": "exact", "keeper": str(photos / f"p{i}.jpg"),
               "images": [im(10 * i, photos / f"p{i}.jpg"), im(10 * i + 1, photos / "copies" / f"p{i}.jpg")]}
              for n, i in enumerate(COPIED)]
    groups[0]["images"].append(im(2, photos / "copies" / "p0 meta.jpg"))
    groups.append({"group": 4, "kind": "near", "keeper": str(photos / "p1.jpg"),
                   "images": [im(1, photos / "p1.jpg"), im(11, photos / "copies" / "p1 small.jpg")]})
    return groups


def hashes(folder: Path) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def indexed(idx) -> set:
    return {r["path"] for r in idx.catalog.snapshot()[1] if r["status"] == "indexed"}


def found(idx, photos, i=0) -> set:
    return {h.path for h in idx.search(str(photos / f"p{i}.jpg"), k=20)}


# ------------------------------------------------------------------------------------------------ plans
def test_a_plan_changes_nothing(world, tmp_path):
    photos, idx = world["photos"], world["idx"]
    before = (hashes(photos), hashes(idx.path), idx.info()["images"])
    groups = groups_of(photos)
    plans = {a: plan_actions(groups, a, to=tmp_path / "dups", index_path=idx.path, roots=idx.roots,
                             kinds=("exact",) if a == "link" else ("exact", "near")) for a in da.ACTIONS}
    lines = {a: dry_run_text(p) for a, p in plans.items()}
    assert (hashes(photos), hashes(idx.path), idx.info()["images"]) == before
    assert not (tmp_path / "dups").exists()

    move = plans["move"]
    assert move["format"] == "retrieval-duplicates-plan" and move["version"] == 1 and move["action"] == "move"
    assert move["index"] == str(idx.path.resolve()) and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", move["created"])
    moved = {s["path"] for s in move["steps"]}
    assert moved == {str(photos / "copies" / f"p{i}.jpg") for i in COPIED} | {
        str(photos / "copies" / n) for n in ("p0 meta.jpg", "p1 small.jpg")}
    for s in move["steps"]:
        assert s["dest"] == str(tmp_path / "dups" / os.path.relpath(s["path"], photos))   # folder structure kept
        assert s["size"] == os.path.getsize(s["path"]) and s["status"] == "planned"
        assert s["sha"] == da.file_hash(s["path"]) and s["keeper"] != s["path"]
    assert json.loads(json.dumps(move)) == move
    step = next(s for s in move["steps"] if s["path"].endswith("copies/p3.jpg"))
    size = f"{step['size'] / 1e3:.1f} kB"
    assert f"move  {step['path']} -> {step['dest']}  (exact copy of {photos / 'p3.jpg'}, {size})" in lines["move"]
    assert any(ln.startswith("trash ") and "near duplicate of" in ln for ln in lines["trash"])

    link = plans["link"]   # exact copies only; the copy with other bytes is skipped, with the reason
    assert {s["path"] for s in link["steps"]} == {str(photos / "copies" / f"p{i}.jpg") for i in COPIED}
    [skip] = link["skipped"]
    assert skip["path"].endswith("p0 meta.jpg") and "other bytes" in skip["reason"]
    assert lines["link"][-1].startswith(f"skip  {skip['path']}  (same pixels")

    outside = plan_actions(groups, "move", to=tmp_path / "dups")   # no roots: the absolute path below DIR
    assert outside["steps"][0]["dest"] == str(tmp_path / "dups") + outside["steps"][0]["path"]


def test_plan_refusals_and_scene_groups(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.jpg", "b.jpg", "c.jpg"))
    for p in (a, b, c):
        p.write_bytes(b"x" * 10)
    groups = [{"group": 1, "kind": "near", "keeper": str(a), "images": [{"id": 1, "path": str(a)},
                                                                      {"id": 2, "path": str(b)}]},
              {"group": 2, "kind": "scene", "keeper": str(a), "images": [{"id": 1, "path": str(a)},
                                                                       {"id": 3, "path": str(c)}]}]
    with pytest.raises(ValueError) as err:
        plan_actions(groups, "link")
    assert err.value.param == "action" and "\n" not in str(err.value)
    assert str(err.value) == ("action link replaces a file by a hard link to its keeper: only for exact copies "
                              "(kinds exact).")   # the library's words; the command line says --action, --kinds
    assert err.value.worded(lambda name: "--" + name).startswith("--action link replaces")
    with pytest.raises(ValueError, match=r"^scene groups .*\(groups with their numbers\)"):
        plan_actions(groups, "trash", kinds=("near", "scene"))
    with pytest.raises(ValueError, match="action move needs to DIR"):
        plan_actions(groups, "move")
    with pytest.raises(ValueError, match="unknown action"):
        plan_actions(groups, "delete")
    both = plan_actions(groups, "trash", kinds=("exact", "near", "scene"), groups_named=[1, 2])
    assert [s["path"] for s in both["steps"]] == [str(b), str(c)]
    trash = plan_actions(groups, "trash", kinds=("near", "scene"), groups_named={2})
    assert [s["path"] for s in trash["steps"]] == [str(c)] and trash["groups_named"] == [2]
    trash = plan_actions(groups, "trash", kinds=("near", "scene"), groups_named={1})   # scene group 2 not named
    assert [s["path"] for s in trash["steps"]] == [str(b)]
    assert [s["path"] for s in plan_actions(groups, "trash")["steps"]] == [str(b)]   # default kinds: no scene


# ------------------------------------------------------------------------------------------------ move
@pytest.mark.parametrize("inside", [False, True], ids=["dir-outside", "dir-inside-indexed-folder"])
def test_move_then_undo(world, inside):
    photos, idx = world["photos"], world["idx"]
    to = photos / "dups" if inside else world["dir"] / "dups"
    files, n_before, answer = hashes(photos), idx.info()["images"], found(idx, photos)
    paths_before = indexed(idx)
    plan = plan_actions(groups_of(photos), "move", to=to, roots=idx.roots)
    moved = {s["path"]: s["dest"] for s in plan["steps"]}
    assert str(photos / "copies" / "p0.jpg") in answer and len(moved) == 5
    plan_path = world["dir"] / "plan.json"
    summary = apply_plan(idx, plan, plan_path=plan_path)
    moved_bytes = sum(s["size"] for s in plan["steps"])          # moved on the same disk: nothing freed
    assert summary == {"done": 5, "skipped": 0, "failed": 0, "plan": str(plan_path), "bytes_freed": 0,
                       "bytes_not_freed": moved_bytes, "freed": da.freed_text("move", 0, moved_bytes, str(to))}
    for src, dest in moved.items():
        assert not os.path.exists(src) and files[src] == hashes(Path(dest).parent)[dest]
        assert dest == str(to / os.path.relpath(src, photos))
    saved = load_plan(plan_path)
    assert [s["status"] for s in saved["steps"]] == ["done"] * 5 and saved["applied"] and saved["index_updated"]
    assert idx.info()["images"] == n_before - 5 and indexed(idx) == paths_before - set(moved)
    assert not found(idx, photos) & set(moved)
    assert set(moved) <= set(idx.excluded)
    assert (set(moved.values()) <= set(idx.excluded)) == inside   # new places excluded only inside the folder
    rep = idx.sync(photos, workers=1)
    assert rep.added == 0 and indexed(idx) == paths_before - set(moved)

    undone = undo_plan(idx, plan_path)
    assert undone == {"restored": 5, "skipped": 0, "failed": 0, "plan": str(plan_path)}
    assert hashes(photos) == files and not any(p.is_file() for p in to.rglob("*"))
    assert indexed(idx) == paths_before and idx.info()["images"] == n_before
    assert found(idx, photos) == answer and not set(idx.excluded) & (set(moved) | set(moved.values()))
    assert idx.sync(photos, workers=1).added == 0 and load_plan(plan_path)["undone"]
    with pytest.raises(ValueError, match="was undone"):
        undo_plan(idx, plan_path)


def test_move_never_overwrites_and_skips_changed_files(world):
    photos, idx = world["photos"], world["idx"]
    to = world["dir"] / "dups"
    plan = plan_actions(groups_of(photos), "move", to=to, roots=idx.roots)
    changed, taken = photos / "copies" / "p3.jpg", to / "copies" / "p5.jpg"
    with open(changed, "ab") as fh:
        fh.write(b"edited")
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"someone else's file")
    content = changed.read_bytes()
    summary = apply_plan(idx, plan, plan_path=world["dir"] / "plan.json")
    status = {Path(s["path"]).name: s["status"] for s in plan["steps"]}
    assert status == {"p0.jpg": "done", "p0 meta.jpg": "done", "p3.jpg": "changed", "p5.jpg": "exists",
                      "p1 small.jpg": "done"}
    assert summary["done"] == 3 and summary["skipped"] == 2
    assert changed.read_bytes() == content and taken.read_bytes() == b"someone else's file"
    assert (photos / "copies" / "p5.jpg").exists()
    assert {str(changed), str(photos / "copies" / "p5.jpg")} <= indexed(idx)


def test_an_interrupted_run_can_be_undone(world, monkeypatch):
    photos, idx = world["photos"], world["idx"]
    files, paths_before = hashes(photos), indexed(idx)
    plan = plan_actions(groups_of(photos), "move", to=world["dir"] / "dups", roots=idx.roots)
    real, calls = da.move_file, []

    def killed_on_third(*args):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(da, "move_file", killed_on_third)
    plan_path = world["dir"] / "plan.json"
    with pytest.raises(KeyboardInterrupt):
        apply_plan(idx, plan, plan_path=plan_path)
    monkeypatch.setattr(da, "move_file", real)
    saved = load_plan(plan_path)
    assert [s["status"] for s in saved["steps"]] == ["done", "done", "started", "planned", "planned"]
    undo_plan(idx, plan_path)
    assert hashes(photos) == files and indexed(idx) == paths_before


# ------------------------------------------------------------------------------------------------ trash
def test_trash_then_undo(world, monkeypatch):
    photos, idx = world["photos"], world["idx"]
    monkeypatch.setenv("XDG_DATA_HOME", str(world["dir"] / "data"))
    trash = world["dir"] / "data" / "Trash"
    (trash / "info").mkdir(parents=True)
    (trash / "info" / "p0.jpg.trashinfo").write_text("[Trash Info]\nPath=/elsewhere/p0.jpg\n")   # name taken
    files, paths_before, answer = hashes(photos), indexed(idx), found(idx, photos)
    plan = plan_actions(groups_of(photos), "trash", kinds=("exact",))
    apply_plan(idx, plan, plan_path=world["dir"] / "plan.json")
    assert [s["status"] for s in plan["steps"]] == ["done"] * 4
    names = {Path(s["path"]).name: Path(s["trash_file"]).name for s in plan["steps"]}
    assert names == {"p0.jpg": "p0.2.jpg", "p0 meta.jpg": "p0 meta.jpg", "p3.jpg": "p3.jpg", "p5.jpg": "p5.jpg"}
    for s in plan["steps"]:
        assert not os.path.exists(s["path"]) and Path(s["trash_file"]).parent == trash / "files"
        assert hashlib.sha256(Path(s["trash_file"]).read_bytes()).hexdigest() == files[s["path"]]
        assert s["trash_info"] == str(trash / "info" / (Path(s["trash_file"]).name + ".trashinfo"))
        head, path, date = Path(s["trash_info"]).read_text().splitlines()
        assert head == "[Trash Info]" and unquote(path.removeprefix("Path=")) == s["path"]
        assert re.fullmatch(r"DeletionDate=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", date)
    assert "p0%20meta.jpg" in Path(plan["steps"][1]["trash_info"]).read_text()
    assert indexed(idx) == paths_before - {s["path"] for s in plan["steps"]}
    assert not found(idx, photos) & {s["path"] for s in plan["steps"]}

    undo_plan(idx, world["dir"] / "plan.json")
    assert hashes(photos) == files and indexed(idx) == paths_before and found(idx, photos) == answer
    assert sorted(p.name for p in (trash / "info").iterdir()) == ["p0.jpg.trashinfo"]
    assert not any((trash / "files").iterdir())


class Catalog:
    def row_by_path(self, path):
        return None


class NoIndex:
    """What apply_plan needs of an index, for the cases about files only."""

    def __init__(self, path):
        self.path, self.roots, self.catalog = path, [], Catalog()

    def writer(self):
        return self

    def include(self, paths):
        return []

    def exclude(self, paths):
        return []

    def add(self, paths):
        raise AssertionError("nothing was indexed")


def test_trash_on_another_filesystem(tmp_path, monkeypatch):
    disk = tmp_path / "disk"
    (disk / "photos").mkdir(parents=True)
    a, b = disk / "photos" / "a.jpg", disk / "photos" / "b.jpg"
    a.write_bytes(b"same")
    b.write_bytes(b"same")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(safe_files, "_same_device", lambda path, folder: False)   # as if on a USB disk
    monkeypatch.setattr(safe_files, "_mount_point", lambda path: str(disk))
    group = [{"group": 1, "kind": "exact", "keeper": str(a), "images": [{"path": str(a)}, {"path": str(b)}]}]
    top = disk / f".Trash-{os.getuid()}"
    plan = plan_actions(group, "trash")
    apply_plan(NoIndex(tmp_path), plan, plan_path=tmp_path / "plan.json")
    assert plan["steps"][0]["status"] == "done" and (top / "files" / "b.jpg").read_bytes() == b"same"
    assert top.stat().st_mode & 0o777 == 0o700 and not (tmp_path / "home").exists()
    assert "Path=photos/b.jpg\n" in (top / "info" / "b.jpg.trashinfo").read_text()   # relative to $topdir
    undo_plan(NoIndex(tmp_path), tmp_path / "plan.json")
    assert b.read_bytes() == b"same" and not any((top / "info").iterdir())

    shutil.rmtree(top)
    top.write_text("not a folder")   # the trash cannot be made: the step fails, the file stays
    plan = plan_actions(group, "trash")
    summary = apply_plan(NoIndex(tmp_path), plan, plan_path=tmp_path / "plan2.json")
    assert summary["failed"] == 1 and plan["steps"][0]["status"] == "failed" and b.read_bytes() == b"same"
    assert "trash folder" in plan["steps"][0]["reason"]


# ------------------------------------------------------------------------------------------------ link
def test_link_then_undo(world):
    photos, idx = world["photos"], world["idx"]
    info, files = idx.info(), hashes(photos)
    plan = plan_actions(groups_of(photos), "link", kinds=("exact",))
    copies = [photos / "copies" / f"p{i}.jpg" for i in COPIED]
    mtimes = [p.stat().st_mtime_ns for p in copies]
    summary = apply_plan(idx, plan, plan_path=world["dir"] / "plan.json")
    assert summary["done"] == 3 and summary["skipped"] == 1   # the copy with other bytes
    for i, p in zip(COPIED, copies, strict=True):
        assert p.stat().st_ino == (photos / f"p{i}.jpg").stat().st_ino and not p.is_symlink()
    assert {s["link"] for s in plan["steps"]} == {"hard"} and hashes(photos) == files
    assert idx.info()["images"] == info["images"] and idx.info()["generation"] == info["generation"]
    assert not list(photos.rglob(".*.tmp"))

    undo_plan(idx, world["dir"] / "plan.json")
    for i, p, mtime in zip(COPIED, copies, mtimes, strict=True):
        assert p.stat().st_ino != (photos / f"p{i}.jpg").stat().st_ino and p.stat().st_nlink == 1
        assert p.stat().st_mtime_ns == mtime
    assert hashes(photos) == files and not list(photos.rglob(".*.tmp"))


def test_link_skips_a_changed_keeper(tmp_path):
    a, b = tmp_path / "a.jpg", tmp_path / "b.jpg"
    a.write_bytes(b"same")
    b.write_bytes(b"same")
    plan = plan_actions([{"group": 1, "kind": "exact", "keeper": str(a),
                          "images": [{"path": str(a)}, {"path": str(b)}]}], "link", kinds=("exact",))
    a.write_bytes(b"edited")
    apply_plan(NoIndex(tmp_path), plan, plan_path=tmp_path / "plan.json")
    assert plan["steps"][0]["status"] == "changed" and "keeper" in plan["steps"][0]["reason"]
    assert b.read_bytes() == b"same" and b.stat().st_nlink == 1


# ------------------------------------------------------------------------------------------------ bad files
@pytest.mark.parametrize("content", ["not json {", "[1, 2]", json.dumps({"format": "something-else"}),
                                     json.dumps({"format": "retrieval-duplicates-plan", "version": 9})])
def test_a_bad_plan_file_is_one_line_error(tmp_path, content):
    p = tmp_path / "plan.json"
    p.write_text(content)
    with pytest.raises(ValueError) as err:
        undo_plan(NoIndex(tmp_path), p)
    assert str(err.value).startswith(f"{p}: ") and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="cannot read the plan file"):
        load_plan(tmp_path / "missing.json")


def test_link_falls_back_to_a_symbolic_link(tmp_path, monkeypatch):
    a, b = tmp_path / "a.jpg", tmp_path / "b.jpg"
    a.write_bytes(b"same")
    b.write_bytes(b"same")
    plan = plan_actions([{"group": 1, "kind": "exact", "keeper": str(a),
                          "images": [{"path": str(a)}, {"path": str(b)}]}], "link", kinds=("exact",))

    def no_hard_link(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_hard_link)
    apply_plan(NoIndex(tmp_path), plan, plan_path=tmp_path / "plan.json")
    assert plan["steps"][0]["link"] == "symbolic" and os.readlink(b) == str(a)
    monkeypatch.undo()
    undo_plan(NoIndex(tmp_path), tmp_path / "plan.json")
    assert not b.is_symlink() and b.read_bytes() == b"same"


def test_move_to_another_filesystem(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    a, b = tmp_path / "a.jpg", tmp_path / "b.jpg"
    a.write_bytes(b"same")
    b.write_bytes(b"same")
    os.utime(b, ns=(10**18, 10**18))
    to = Path(tempfile.mkdtemp(dir=shm))
    try:
        plan = plan_actions([{"group": 1, "kind": "exact", "keeper": str(a),
                              "images": [{"path": str(a)}, {"path": str(b)}]}], "move", to=to)
        summary = apply_plan(NoIndex(tmp_path), plan, plan_path=tmp_path / "plan.json")
        dest = Path(plan["steps"][0]["dest"])
        assert plan["steps"][0]["status"] == "done" and not b.exists() and dest.read_bytes() == b"same"
        assert summary["bytes_freed"] == 4 and summary["bytes_not_freed"] == 0 and summary["freed"] == "4 bytes freed"
        assert dest.stat().st_mtime_ns == 10**18 and not list(dest.parent.glob(".*.part"))   # copy2: times kept
        undo_plan(NoIndex(tmp_path), tmp_path / "plan.json")
        assert b.read_bytes() == b"same" and not dest.exists()
    finally:
        shutil.rmtree(to)


# ------------------------------------------------------------------------------------------------ space freed
def test_space_freed_is_what_the_disk_gets_back(tmp_path, monkeypatch):
    """A move on the same disk frees nothing (the bytes are at the new place), nor does the trash (until it is
    emptied); a move to another disk frees the file's bytes, and so does a link replacing a copy, unless the copy
    has another hard link (its bytes stay with it). Once every move reported the moved bytes as freed."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home"))
    photos = tmp_path / "photos"

    def run(action, name, **kw):
        shutil.rmtree(photos, ignore_errors=True)
        photos.mkdir()
        (photos / "keep.jpg").write_bytes(b"x" * 5000)
        (photos / "copy.jpg").write_bytes(b"x" * 5000)
        group = [{"group": 1, "kind": "exact", "keeper": str(photos / "keep.jpg"),
                  "images": [{"path": str(photos / "keep.jpg")}, {"path": str(photos / "copy.jpg")}]}]
        if name == "linked elsewhere":
            os.link(photos / "copy.jpg", tmp_path / f"elsewhere-{action}.jpg")
        plan = plan_actions(group, action, kinds=("exact",), **kw)
        summary = apply_plan(NoIndex(tmp_path), plan, plan_path=tmp_path / f"plan-{action}-{len(name)}.json")
        assert summary["done"] == 1, plan
        return summary["bytes_freed"], summary["bytes_not_freed"], summary["freed"]

    to = tmp_path / "extra"
    assert run("move", "same disk", to=to) == (0, 5000, f"nothing freed: the 5.0 kB moved stay on the same disk "
                                                        f"(deleting them from {to} frees it)")
    assert run("trash", "trash") == (0, 5000, "nothing freed; 5.0 kB in the trash, freed when it is emptied")
    assert run("link", "link") == (5000, 0, "5.0 kB freed")
    assert run("link", "linked elsewhere") == (0, 0, "nothing freed")
    monkeypatch.setattr(safe_files, "_same_device", lambda path, folder: False)   # --to on a USB disk
    assert run("move", "another disk", to=tmp_path / "usb") == (5000, 0, "5.0 kB freed")


# ------------------------------------------------------------------------------------------------ hard links
def test_hard_links_of_the_keeper_are_not_extra_copies(world):
    """A hard link of a photo (another name of the same file, as --action link leaves them) takes no space of its
    own: its exact group marks it (``hard_link``), it is not listed as an extra copy, and no plan acts on it (once
    it was listed, moved and reported as freeing its size)."""
    from cli_world import run as cli

    from retrieval.app.duplicates import find_duplicates

    photos, idx = world["photos"], world["idx"]
    link = photos / "p1 link.jpg"
    os.link(photos / "p1.jpg", link)
    idx.sync(photos, workers=1)
    docs = [g.to_json() for g in find_duplicates(idx)]
    group = next(g for g in docs if g["kind"] == "exact" and str(link) in {im["path"] for im in g["images"]})
    flags = {Path(im["path"]).name: (im["keeper"], im["hard_link"]) for im in group["images"]}
    assert flags == {"p1.jpg": (True, False), "p1 link.jpg": (False, True)}
    others = [im for g in docs for im in g["images"] if im["path"] != str(link)]
    assert not any(im["hard_link"] for im in others)             # byte copies are copies
    listed = cli(["duplicates", "--index", idx.path, "--format", "paths", "-q"]).stdout.splitlines()
    assert str(link) not in listed and str(photos / "copies" / "p0.jpg") in listed
    res = cli(["duplicates", "--index", idx.path, "--kinds", "exact"])
    assert "1 hard link of a keeper (no space of its own)" in res.stderr
    assert next(ln for ln in res.stdout.splitlines() if ln.endswith("(a hard link of the keeper: no space of its own)"))
    for d in docs:
        d["keeper"] = d["keeper_path"]
    for action in ("move", "trash", "link"):
        plan = plan_actions(docs, action, kinds=("exact",), to=world["dir"] / "dups", roots=idx.roots)
        assert str(link) not in {s["path"] for s in plan["steps"]}
        assert {"path": str(link), "reason": da.LINKED}.items() <= next(
            s for s in plan["skipped"] if s["path"] == str(link)).items()
