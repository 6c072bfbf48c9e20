"""Ctrl-C during ``retrieval index``: the real command in its own process group gets SIGINT (as a terminal sends it
to every process of the group, extraction workers included) once its progress has started. It says in one
sentence what was kept, exits with status 130, and the same command run again resumes: the photos already read
are not read again, and the index is complete and consistent (docs/user-guide.md, "Interrupting an index")."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import make_pool, small_preset
from PIL import Image

from retrieval.app.index import Index, walk_photos

N_PHOTOS = 200


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """200 distinct small photos (real photos with a little seeded noise each) and a small preset."""
    d = tmp_path_factory.mktemp("interrupt")
    pool = make_pool(d / "pool", side=128)
    photos = d / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for i in range(N_PHOTOS):
        im = np.asarray(Image.open(pool[i % len(pool)]).convert("RGB"), np.int16)
        im = np.clip(im + rng.integers(-6, 7, im.shape), 0, 255).astype(np.uint8)
        Image.fromarray(im).save(photos / f"p{i:03d}.jpg", quality=85)
    (d / "p.json").write_text(json.dumps(small_preset("test-interrupt")))
    return d


def command(d):
    return [sys.executable, "-m", "retrieval.cli", "index", str(d / "photos"), "--index", str(d / "idx"),
            "--preset", str(d / "p.json"), "--feature-store", str(d / "store"), "--workers", "2"]


def env():
    return dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def store_entries(d) -> dict:
    """Feature-store entry -> its modification time."""
    return {p: p.stat().st_mtime_ns for p in (d / "store").rglob("*.npz")}


def interrupted_run(d):
    """Start the command, wait for its first extraction progress line, send SIGINT to its process group (Ctrl-C
    at a terminal); returns (exit status, stderr, stdout)."""
    proc = subprocess.Popen(command(d), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                            start_new_session=True)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("extracting: "):
                time.sleep(0.3)   # a few photos more
                os.killpg(proc.pid, signal.SIGINT)
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(seen) + err, out


def test_ctrl_c_says_what_was_kept_exits_130_and_the_next_run_resumes(folder):
    d = folder
    code, err, out = interrupted_run(d)
    assert any(ln.startswith("extracting: ") for ln in err.splitlines()), err
    assert code == 130, err
    assert "Traceback" not in err and "Aborted" not in err and out == ""
    m = re.search(r"^Stopped: the index is as it was \(0 photos\) and the (\d+) photos read in this run are kept; "
                  r"run the same command again to resume \(they are not read again\)\.$", err, re.M)
    assert m, err
    kept = store_entries(d)
    assert int(m.group(1)) == len(kept) and 0 < len(kept) < N_PHOTOS
    idx = Index.open(d / "idx")
    assert idx.catalog.count("indexed") == 0 and idx.catalog.runs()[-1]["status"] == "interrupted"
    idx.close()

    done = subprocess.run(command(d), capture_output=True, text=True, env=env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{N_PHOTOS} images indexed" in done.stdout and f"{N_PHOTOS} added" in done.stdout
    after = store_entries(d)
    assert len(after) == N_PHOTOS
    assert {p: after[p] for p in kept} == kept   # the photos read before Ctrl-C were not read again
    idx = Index.open(d / "idx")
    gen, rows = idx.catalog.snapshot()
    assert sorted(r["path"] for r in rows) == walk_photos(d / "photos")
    assert all(r["status"] == "indexed" for r in rows) and len({r["id"] for r in rows}) == N_PHOTOS
    searcher = idx.searcher()
    assert searcher.generation == gen and sorted(searcher.backend.ids.tolist()) == sorted(r["id"] for r in rows)
    assert [r["status"] for r in idx.catalog.runs()] == ["interrupted", "done"]
    hit = idx.search(rows[5]["path"], k=1)[0]
    assert hit.path == rows[5]["path"]
    idx.close()
    check = subprocess.run([sys.executable, "-m", "retrieval.cli", "check", "--index", str(d / "idx")],
                           capture_output=True, text=True, env=env(), timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
