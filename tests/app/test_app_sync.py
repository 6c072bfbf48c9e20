"""Application: folder walk, catalog, incremental sync, remove/info, bad input, preset versions.

Real photos (scikit-image's bundled ones and views of them) downscaled to 200 px so that extraction is cheap;
a small variant of the default preset (8 Gaussians) keeps training fast. Features are shared through one
session feature store.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import assert_same_results, catalog_view, make_pool, results_view, small_preset

from retrieval.app.index import Index, walk_photos
from retrieval.rerank.verification import DEFAULT_MIN_INLIERS


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("pool"))


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, pool, store_dir):
    """A model trained once on 12 pool images; reused by the indexes that must be comparable."""
    d = tmp_path_factory.mktemp("modelidx") / "idx"
    idx = Index.create(d, preset=small_preset(), train_images=[str(p) for p in pool[:12]], feature_store=store_dir)
    idx.sync([str(p) for p in pool[:3]])
    return d



# ------------------------------------------------------------------------------------------ folder walk
def test_walk_extensions_hidden_and_symlink_loops(tmp_path, pool):
    root = tmp_path / "photos"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    shutil.copy(pool[0], root / "a.JPG")
    shutil.copy(pool[1], root / "sub" / "b.jpeg")
    shutil.copy(pool[3], root / "sub" / "deeper" / "c.PnG")
    shutil.copy(pool[0], root / "sub" / "d.TIFF")
    shutil.copy(pool[0], root / "e.webp")
    shutil.copy(pool[0], root / "f.bmp")
    shutil.copy(pool[0], root / "sub" / "g.PPM")
    shutil.copy(pool[0], root / "sub" / "h.pgm")
    shutil.copy(pool[0], root / "sub" / "i.gif")  # GIF: read (its first frame)
    shutil.copy(pool[0], root / "sub" / "j.xcf")  # not in IMAGE_EXTENSIONS
    shutil.copy(pool[0], root / ".g.jpg")  # hidden file
    shutil.copy(pool[0], root / ".hidden" / "h.jpg")  # in a hidden folder
    (root / "notes.txt").write_text("not an image")
    (root / "sub" / "deeper" / "loop").symlink_to(root, target_is_directory=True)  # a loop
    found = walk_photos(root)
    names = sorted(Path(p).name for p in found)
    assert names == ["a.JPG", "b.jpeg", "c.PnG", "d.TIFF", "e.webp", "f.bmp", "g.PPM", "h.pgm", "i.gif"]
    assert all(os.path.isabs(p) for p in found)


def test_walk_missing_and_not_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        walk_photos(tmp_path / "nope")
    f = tmp_path / "x.jpg"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="not a folder"):
        walk_photos(f)


# ------------------------------------------------------------------------------------------ sync
def test_sync_add_modify_delete_move_equals_fresh_index(tmp_path, pool, model_dir, store_dir, monkeypatch):
    photos = tmp_path / "photos"
    (photos / "sub").mkdir(parents=True)
    for i in range(10):
        shutil.copy(pool[i], photos / f"p{i}{pool[i].suffix}")
    inc = Index.create(tmp_path / "inc", preset=small_preset(), model=model_dir, feature_store=store_dir)
    r1 = inc.sync(photos)
    assert (r1.added, r1.removed, r1.moved, r1.changed, r1.errors) == (10, 0, 0, 0, [])
    assert not r1.trained  # the given model is used

    # add 5, modify 2, delete 3, move 2
    for i in range(10, 15):
        shutil.copy(pool[i], photos / f"new{i}{pool[i].suffix}")
    shutil.copy(pool[20], photos / f"p0{pool[0].suffix}")
    shutil.copy(pool[21], photos / f"p1{pool[1].suffix}")
    for i in (2, 3, 4):
        (photos / f"p{i}{pool[i].suffix}").unlink()
    for i in (5, 6):
        os.rename(photos / f"p{i}{pool[i].suffix}", photos / "sub" / f"moved{i}{pool[i].suffix}")

    from retrieval.app.index_build import Writer

    extracted = []
    real_extract = Writer.extract

    def spy(self, paths, *a, **kw):
        extracted.extend(paths)
        return real_extract(self, paths, *a, **kw)

    monkeypatch.setattr(Writer, "extract", spy)
    r2 = Index.open(tmp_path / "inc").sync(photos)
    assert (r2.added, r2.changed, r2.removed, r2.moved, r2.unchanged) == (5, 2, 3, 2, 3)
    assert not any("moved" in p for p in extracted)  # moved files are recognised by hash, not re-extracted

    fresh = Index.create(tmp_path / "fresh", preset=small_preset(), model=model_dir, feature_store=store_dir)
    fresh.sync(photos)
    inc = Index.open(tmp_path / "inc")
    assert catalog_view(inc) == catalog_view(fresh)
    queries = sorted(walk_photos(photos))[:6] + [str(pool[30])]
    assert_same_results(results_view(inc, queries), results_view(fresh, queries))

    # a third sync with nothing changed does nothing
    r3 = inc.sync(photos)
    assert (r3.added, r3.changed, r3.removed, r3.moved, r3.unchanged) == (0, 0, 0, 0, 12)


def test_touch_without_change_is_not_reindexed(tmp_path, pool, model_dir, store_dir):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        shutil.copy(pool[i], photos / pool[i].name)
    idx = Index.create(tmp_path / "i", preset=small_preset(), model=model_dir, feature_store=store_dir)
    idx.sync(photos)
    before = {r["path"]: r["id"] for r in idx.catalog.rows()}
    p = photos / pool[0].name
    os.utime(p, (p.stat().st_atime, p.stat().st_mtime + 100))
    r = idx.sync(photos)
    assert (r.added, r.changed, r.unchanged) == (0, 0, 3)
    after = {r["path"]: r["id"] for r in idx.catalog.rows()}
    assert after == before
    assert idx.catalog.row_by_path(str(p.resolve()))["mtime"] == pytest.approx(p.stat().st_mtime)


def test_remove_info_and_query_by_id_path_or_file(tmp_path, pool, model_dir, store_dir):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(6):
        shutil.copy(pool[i], photos / pool[i].name)
    idx = Index.create(tmp_path / "i", preset=small_preset(), model=model_dir, feature_store=store_dir)
    idx.sync(photos)
    target = str((photos / pool[2].name).resolve())
    row = idx.catalog.row_by_path(target)
    by_path = idx.search(target, k=3)
    by_id = idx.search(row["id"], k=3)
    outside = tmp_path / "copy.jpg"
    shutil.copy(pool[2], outside)
    by_file = idx.search(str(outside), k=3)
    assert by_path[0].path == target and by_path[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.path for h in by_id] == [h.path for h in by_path]
    assert [h.path for h in by_file] == [h.path for h in by_path]
    assert idx.remove([target]) == 1
    info = Index.open(tmp_path / "i").info()
    assert info["indexed"] == 5 and info["images"] == 5
    assert target not in [h.path for h in Index.open(tmp_path / "i").search(str(outside), k=10)]
    with pytest.raises(ValueError, match="not in the index"):
        idx.remove([target])


# ------------------------------------------------------------------------------------------ CLI and bad input
def run(args, **kw):
    from retrieval.cli.main import main

    return CliRunner().invoke(main, args, catch_exceptions=False, **kw)


def one_line_error(res):
    lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("Error")]
    return len(lines) == 1 and "Traceback" not in res.output


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory, pool, store_dir):
    d = tmp_path_factory.mktemp("cli")
    photos = d / "photos"
    photos.mkdir()
    for i in range(8):
        shutil.copy(pool[i], photos / pool[i].name)
    (photos / "empty.jpg").write_bytes(b"")
    (photos / "text.jpg").write_text("hello, not a JPEG")
    preset_file = d / "preset.json"
    preset_file.write_text(json.dumps(small_preset()))
    res = run(["index", str(photos), "--index", str(d / "idx"), "--preset", str(preset_file), "--quiet",
               "--feature-store", str(store_dir)])
    return d, res


def test_cli_index_reports_unreadable_files_once_with_true_counts(cli_index):
    """Unreadable files: listed on stderr in the run where they fail, never counted as added; a re-run does not
    retry them, says how many are still unreadable and lists none again; exit 0 once every file was handled,
    1 with --strict."""
    d, res = cli_index
    assert res.exit_code == 0
    assert "empty.jpg" in res.output and "text.jpg" in res.output
    assert "2 file(s) could not be read" in res.output
    assert "8 images indexed" in res.output and "8 added" in res.output and "2 unreadable" in res.output
    res2 = run(["index", str(d / "photos"), "--index", str(d / "idx"), "--quiet", "--json"])
    assert res2.exit_code == 0
    report = json.loads(res2.output[res2.output.index("{"):res2.output.rindex("}") + 1])
    assert report["errors"] == [] and report["failed_before"] == 2
    assert report["added"] == 0 and report["unchanged"] == 8
    res3 = run(["index", str(d / "photos"), "--index", str(d / "idx"), "--quiet", "--strict"])
    assert res3.exit_code == 1
    assert "0 added" in res3.output and "2 unreadable (2 unchanged since they failed" in res3.output
    assert "empty.jpg" not in res3.output                        # reported once, in the run where it failed
    info = json.loads(run(["info", "--index", str(d / "idx"), "--json"]).output)
    assert info["indexed"] == 8 and info["errors"] == 2
    assert sorted(Path(e["path"]).name for e in info["error_files"]) == ["empty.jpg", "text.jpg"]
    assert info["last_run"]["status"] == "done"


def test_a_failed_sync_is_not_left_running(tmp_path):
    """A folder of unreadable files only: the sync fails with one message and its run is recorded as failed."""
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "a.jpg").write_bytes(b"")
    (photos / "b.png").write_text("not an image")
    res = run(["index", str(photos), "--index", str(tmp_path / "idx"), "--quiet", "--train-on", "collection"])
    assert res.exit_code == 1 and "Traceback" not in res.output and "no readable image to train" in res.output
    info = json.loads(run(["info", "--index", str(tmp_path / "idx"), "--json"]).output)
    assert info["last_run"]["status"] == "failed"
    # with the shipped generic model there is nothing to train: the run completes, every file listed as unreadable
    res = run(["index", str(photos), "--index", str(tmp_path / "gen"), "--quiet"])
    assert res.exit_code == 0 and "0 images indexed" in res.output and "2 unreadable" in res.output
    assert json.loads(run(["info", "--index", str(tmp_path / "gen"), "--json"]).output)["last_run"]["status"] == "done"


def test_cli_query_json_schema_and_boxes(cli_index, pool):
    d, _ = cli_index
    q = str((d / "photos" / pool[1].name).resolve())
    res = run(["query", q, "--index", str(d / "idx"), "--top", "4", "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.output)
    assert [h["rank"] for h in hits] == [1, 2, 3, 4]
    assert hits[0]["path"] == q
    assert all({"id", "rank", "path", "score", "similarity", "verified"} <= set(h) <=
               {"id", "rank", "path", "score", "inliers", "box", "similarity", "verified", "distance"} for h in hits)
    listed = {r["path"]: r["id"] for r in map(json.loads, run(["list", "--index", str(d / "idx"), "--format", "jsonl"])
                                                .output.splitlines())}
    assert [h["id"] for h in hits] == [listed[h["path"]] for h in hits]   # the catalog's ids
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    txt = run(["query", q, "--index", str(d / "idx"), "--top", "2"]).output.splitlines()
    assert txt[0].split() == ["rank", "score", "similarity", "verified", "inliers", "box", "path"]
    assert txt[1].split()[0] == "1" and txt[1].split()[-1] == q


@pytest.mark.parametrize("box, message", [
    ("10,10,5,40", "x1 <= x2"),
    ("10,10,10,40", "x2 > x1"),
    ("5000,5000,6000,6000", "outside the query image"),
    ("-50,-50,-5,-5", "outside the query image"),
    ("a,b,c,d", "x1,y1,x2,y2"),
])
def test_cli_query_bad_box_is_one_line(cli_index, pool, box, message):
    d, _ = cli_index
    res = run(["query", str(d / "photos" / pool[1].name), "--index", str(d / "idx"), "--bbox", box])
    assert res.exit_code != 0 and message in res.output and one_line_error(res)


@pytest.mark.parametrize("box", ["0,0,5000,50", "-5,0,50,50"])
def test_cli_query_box_partly_outside_is_clipped_with_a_note(cli_index, pool, box):
    d, _ = cli_index
    q = str(d / "photos" / pool[1].name)
    res = run(["query", q, "--index", str(d / "idx"), "--bbox", box, "--json"])
    assert res.exit_code == 0
    assert "reaches outside the query image" in res.output and "clipped to" in res.output     # the note (stderr)
    assert json.loads(res.output[res.output.index("["):])[0]["path"] == q


def test_box_without_features(tmp_path, cli_index):
    from PIL import Image

    d, _ = cli_index
    arr = np.full((120, 160), 128, np.uint8)
    arr[:, 100:] = (np.random.default_rng(0).random((120, 60)) * 255).astype(np.uint8)  # texture on the right
    Image.fromarray(arr).save(tmp_path / "flat.png")
    res = run(["query", str(tmp_path / "flat.png"), "--index", str(d / "idx"), "--bbox", "5,5,60,100"])
    assert res.exit_code != 0 and "no local features inside the box" in res.output and one_line_error(res)


def test_missing_or_empty_folder_damages_nothing(tmp_path):
    res = run(["index", str(tmp_path / "nope"), "--index", str(tmp_path / "idx"), "--quiet"])
    assert res.exit_code != 0 and "does not exist" in res.output and one_line_error(res)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("x")
    res = run(["index", str(tmp_path / "empty"), "--index", str(tmp_path / "idx"), "--quiet"])
    assert res.exit_code != 0 and "holds no images" in res.output and one_line_error(res)
    assert not (tmp_path / "idx").exists()
    res = run(["query", str(tmp_path / "empty" / "readme.txt"), "--index", str(tmp_path / "idx")])
    assert res.exit_code != 0 and "does not exist" in res.output and one_line_error(res)


def test_index_from_another_preset_version_is_refused(tmp_path):
    idx = Index.create(tmp_path / "old", preset="default")
    old = dict(idx.preset, version=0)  # as written by an earlier release of the preset
    idx.catalog.set_meta(preset=old, preset_version=0)
    idx.close()
    with pytest.raises(ValueError, match="preset 'default' version 0.*version 1"):
        Index.open(tmp_path / "old")
    res = run(["query", "whatever.jpg", "--index", str(tmp_path / "old")])
    assert res.exit_code != 0 and "rebuild" in res.output and one_line_error(res)


@pytest.mark.parametrize("name,section", [("default", "search"), ("object", "object_search")])
def test_index_from_an_older_release_uses_the_measured_threshold(tmp_path, name, section):
    idx = Index.create(tmp_path / "old", preset=name)
    old = dict(idx.preset, **{section: dict(idx.preset[section], min_inliers=5)})  # 0.1.x's bundled threshold
    idx.catalog.set_meta(preset=old)
    idx.close()
    reopened = Index.open(tmp_path / "old")
    try:
        assert reopened.preset[section]["min_inliers"] == DEFAULT_MIN_INLIERS == 9
    finally:
        reopened.close()


def test_presets_command_lists_bundled_presets():
    res = run(["presets", "--json"])
    rows = json.loads(res.output)
    assert {"default", "compact", "object"} <= {r["name"] for r in rows}
    for r in rows:
        assert r["available"] == (not r["missing"])


def test_second_writer_is_refused_while_one_runs(tmp_path, pool, model_dir, store_dir):
    import fcntl

    photos = tmp_path / "photos"
    photos.mkdir()
    shutil.copy(pool[0], photos / pool[0].name)
    idx = Index.create(tmp_path / "i", preset=small_preset(), model=model_dir, feature_store=store_dir)
    fd = os.open(tmp_path / "i" / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running 'retrieval index' would
        with pytest.raises(RuntimeError, match="another 'retrieval index'"):
            idx.sync(photos)
    finally:
        os.close(fd)
    assert idx.sync(photos).added == 1


def test_a_run_left_running_by_a_killed_process_shows_as_interrupted(cli_index):
    from retrieval.app.index import Index

    d, _ = cli_index
    idx = Index.open(d / "idx")
    try:
        idx.catalog.start_run("a process killed before its commit")
        assert idx.catalog.runs()[-1]["status"] == "running"
        assert idx.info()["last_run"]["status"] == "interrupted"        # nobody holds the writer lock
        with idx.folder.writer_lock():
            assert idx.info()["last_run"]["status"] == "running"        # a sync in progress is running
    finally:
        idx.catalog.end_running_runs("interrupted")
        idx.close()


def test_the_unchanged_folder_shortcut_answers_only_when_nothing_can_differ():
    """A sync of an unchanged folder counts in one pass (``unchanged_counts``); any difference the full comparison
    would act on (a size, an mtime, a new, gone or excluded file, a row not settled) sends it to that comparison."""
    from retrieval.app.write_plan import unchanged_counts
    rows = [("/p/a.jpg", 0, 10, 1.5, "indexed", "h0"), ("/p/b.jpg", 1, 20, 2.5, "indexed", "h1"),
            ("/p/c.jpg", 2, 0, 3.5, "error", None)]
    walked = {"/p/a.jpg": (10, 1.5), "/p/b.jpg": (20, 2.5), "/p/c.jpg": (0, 3.5)}
    files = sorted(walked)
    assert unchanged_counts(files, walked, rows) == (2, 1)
    assert unchanged_counts(files, {**walked, "/p/b.jpg": (21, 2.5)}, rows) is None          # size
    assert unchanged_counts(files, {**walked, "/p/b.jpg": (20, 2.75)}, rows) is None         # mtime
    assert unchanged_counts(files, walked, rows[:2]) is None                                 # a new file
    assert unchanged_counts(files[:2], dict(list(walked.items())[:2]), rows) is None        # a gone file
    assert unchanged_counts(files[:2], walked, rows[:2]) is None                             # an excluded file
    moved = {"/p/a.jpg": (10, 1.5), "/p/b2.jpg": (20, 2.5), "/p/c.jpg": (0, 3.5)}
    assert unchanged_counts(sorted(moved), moved, rows) is None                              # a rename
    pending = [*rows[:2], ("/p/c.jpg", 2, 0, 3.5, "pending", None)]
    assert unchanged_counts(files, walked, pending) is None                                  # not settled
