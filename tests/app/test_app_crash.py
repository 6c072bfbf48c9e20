"""Application: crash safety. ``retrieval index`` is killed with SIGKILL (``kill -9``) at eight points
through the ``RETRIEVAL_CRASH_AT`` fault-injection hook, then run again: the index must be complete and
consistent and answer exactly like an index that was never interrupted; ``retrieval remove`` and ``retrieval
compact`` (the merge of segments) are killed at the points of their publish the same way. Also: queries that run
during a sync see either the old or the new state, never a mixture.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import assert_same_results, make_pool, results_view, small_preset

from retrieval.app.index import Index, walk_photos

POINTS = ["extract", "train", "encode", "array", "segments", "publish", "catalog", "commit"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    pool = make_pool(d / "pool", side=180)
    photos = d / "photos"
    photos.mkdir()
    for p in pool[:10]:
        shutil.copy(p, photos / p.name)
    preset = small_preset("test-crash")
    preset_file = d / "preset.json"
    preset_file.write_text(json.dumps(preset))
    # the reference is an uninterrupted run of the very command the crash tests run, in the same environment
    # (same BLAS/numba threads), so that a resumed index must answer exactly like it
    done = cli(["index", str(photos), "--index", str(d / "ref"), "--preset", str(preset_file), "--quiet",
                "--workers", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    ref = Index.open(d / "ref")
    return d, photos, preset_file, ref, pool


def cli(args, env_extra=None, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "retrieval.cli", "-q", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def check_consistent(index_dir, photos, ref):
    idx = Index.open(index_dir)
    gen, rows = idx.catalog.snapshot()
    paths = [r["path"] for r in rows]
    assert sorted(paths) == walk_photos(photos)  # complete, no duplicate
    assert all(r["status"] == "indexed" for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    searcher = idx.searcher()
    assert searcher.generation == gen
    backend = searcher.backend
    assert sorted(backend.ids.tolist()) == sorted(r["id"] for r in rows)  # no missing or extra vector
    vecs = backend.vectors_of(backend.ids, None)
    assert np.isfinite(vecs).all() and np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-4)
    leftovers = [p.name for folder in ("gens", "segments") for p in (index_dir / folder).iterdir()
                 if p.name.endswith(".tmp")]
    assert leftovers == [] and not (index_dir / "model.tmp").exists()
    runs = idx.catalog.runs()
    assert runs[-1]["status"] == "done"
    assert all(r["status"] in ("done", "interrupted") for r in runs)
    for q in walk_photos(photos)[:4]:
        assert_same_results(results_view(idx, [q], k=5), results_view(ref, [q], k=5))


@pytest.mark.parametrize("point", POINTS)
def test_kill9_then_rerun_is_complete_and_consistent(setup, tmp_path, point):
    d, photos, preset_file, ref, _ = setup
    index_dir = tmp_path / "idx"
    args = ["index", str(photos), "--index", str(index_dir), "--preset", str(preset_file), "--quiet",
            "--workers", "1"]
    crashed = cli(args, {"RETRIEVAL_CRASH_AT": point})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    if point != "commit":  # nothing was committed: the catalog still shows the empty index
        assert Index.open(index_dir).catalog.snapshot()[0] == 0
    again = cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    check_consistent(index_dir, photos, ref)


def test_queries_during_a_sync_see_old_or_new_state(setup, tmp_path):
    d, _, preset_file, _, pool = setup
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in pool[:6]:
        shutil.copy(p, photos / p.name)
    index_dir = tmp_path / "idx"
    first = cli(["index", str(photos), "--index", str(index_dir), "--preset", str(preset_file), "--quiet"])
    assert first.returncode == 0, first.stderr[-2000:]
    for p in pool[6:16]:
        shutil.copy(p, photos / p.name)
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "-q", "index", str(photos), "--index",
                             str(index_dir), "--quiet", "--workers", "1"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    sizes = []
    q = str(photos / pool[0].name)
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline:
        idx = Index.open(index_dir)
        hits = idx.search(q, k=50)
        sizes.append(len(hits))
        assert len({h.path for h in hits}) == len(hits)
        assert all(os.path.exists(h.path) for h in hits)
        idx.close()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()[-2000:]
    sizes.append(len(Index.open(index_dir).search(q, k=50)))
    assert len(sizes) >= 3
    assert set(sizes) <= {6, 16} and sizes[-1] == 16


@pytest.mark.parametrize("point", ["array", "segments", "publish", "catalog", "commit"])
def test_kill9_during_a_remove_leaves_the_old_or_the_new_state(setup, tmp_path, point):
    """``retrieval remove`` publishes through the same IndexFolder.publish as a sync: killed at each of its points,
    the index holds either every image or every image but the removed one (catalog and search state agreeing),
    and the remove run again completes it."""
    from helpers import copy_index

    d, photos, _, ref, _ = setup
    index_dir = copy_index(d / "ref", tmp_path / "idx")
    gone = walk_photos(photos)[2]
    args = ["remove", gone, "--index", str(index_dir)]
    crashed = cli(args, {"RETRIEVAL_CRASH_AT": point})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    idx = Index.open(index_dir)
    gen, rows = idx.catalog.snapshot()
    indexed = sorted(r["id"] for r in rows if r["status"] == "indexed")
    assert sorted(idx.searcher().backend.ids.tolist()) == indexed   # catalog and search state agree
    assert (gone in {r["path"] for r in rows}) == (point != "commit")
    idx.close()
    if point != "commit":
        again = cli(args)
        assert again.returncode == 0, again.stderr[-2000:]
    idx = Index.open(index_dir)
    assert gone not in {r["path"] for r in idx.catalog.rows()}
    assert sorted(idx.searcher().backend.ids.tolist()) == sorted(r["id"] for r in idx.catalog.rows())
    q = walk_photos(photos)[0]
    want = [h for h in results_view(ref, [q], k=5)[0] if h[0] != gone][:4]
    assert_same_results([results_view(idx, [q], k=5)[0][:4]], [want])
    leftovers = [p.name for p in (index_dir / "gens").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    idx.close()


@pytest.mark.parametrize("point", ["array", "segments", "publish", "catalog", "commit"])
def test_kill9_during_a_merge_leaves_an_index_that_answers_the_same(setup, tmp_path, point):
    """``retrieval compact`` (the merge of every segment) killed at each point of its publish: the index answers
    exactly as before, catalog and search state agree, and the merge run again completes (one segment)."""
    from helpers import copy_index

    d, photos, _, ref, pool = setup
    index_dir = copy_index(d / "ref", tmp_path / "idx")
    extra = tmp_path / "more"
    extra.mkdir()
    for p in pool[10:13]:   # a second segment to merge
        shutil.copy(p, extra / p.name)
    assert cli(["index", str(extra), "--index", str(index_dir), "--add-root", "--workers", "1"]).returncode == 0
    assert_a_killed_merge_changes_no_answer(index_dir, walk_photos(photos)[:3], point)


def assert_a_killed_merge_changes_no_answer(index_dir, queries, point):
    """``retrieval compact`` of a two-segment index killed at ``point``: catalog and search state agree, the
    answers are those before, ``check`` finds nothing, and the merge run again gives one segment, the same answers
    and no leftover."""
    idx = Index.open(index_dir)
    want = results_view(idx, queries, k=6)
    assert idx.searcher().backend.segment_info()["segments"] == 2
    idx.close()
    crashed = cli(["compact", "--index", str(index_dir)], {"RETRIEVAL_CRASH_AT": point})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    idx = Index.open(index_dir)
    assert sorted(idx.searcher().backend.ids.tolist()) == sorted(r["id"] for r in idx.catalog.rows())
    assert_same_results(results_view(idx, queries, k=6), want)
    idx.close()
    from click.testing import CliRunner

    from retrieval.cli.main import main

    assert CliRunner().invoke(main, ["check", "--index", str(index_dir)]).exit_code == 0   # in process: quicker
    again = cli(["compact", "--index", str(index_dir)])
    assert again.returncode == 0, again.stderr[-2000:]
    idx = Index.open(index_dir)
    assert idx.searcher().backend.segment_info()["segments"] == 1
    assert_same_results(results_view(idx, queries, k=6), want)
    leftovers = [p.name for folder in ("gens", "segments") for p in (index_dir / folder).iterdir()
                 if p.name.endswith(".tmp")]
    assert leftovers == []
    idx.close()


@pytest.mark.parametrize("point", ["segments", "publish"])
def test_kill9_during_a_merge_of_accurate_segments_leaves_an_index_that_answers_the_same(tmp_path, setup, point):
    """The same for the `accurate` preset, whose inverted file, signatures and forward index are segments: killed
    after the merged segment is sealed or after the new generation is renamed, the index answers as before and
    the merge run again completes."""
    _, _, _, _, pool = setup
    photos = tmp_path / "photos"
    photos.mkdir()
    index_dir = tmp_path / "idx"
    for batch in (pool[:6], pool[6:9]):   # two syncs: two segments
        for p in batch:
            shutil.copy(p, photos / p.name)
        done = cli(["index", str(photos), "--index", str(index_dir), "--preset", "accurate", "--workers", "1"])
        assert done.returncode == 0, done.stderr[-2000:]
    assert_a_killed_merge_changes_no_answer(index_dir, walk_photos(photos)[:3], point)
