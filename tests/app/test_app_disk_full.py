"""Disk full: an index run under a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail with EFBIG as on a
full disk) fails with one line and leaves the previous generation and catalog intact; the next run completes."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys

from helpers import make_pool, small_preset

from retrieval.app.index import Index


def limited(nbytes):
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return set_limit


def cli(args, **kw):
    return subprocess.run([sys.executable, "-m", "retrieval.cli", *args], capture_output=True, text=True,
                          timeout=300, **kw)


def test_index_run_past_the_file_size_limit_fails_in_one_line_and_keeps_the_index(tmp_path):
    pool = make_pool(tmp_path / "pool")
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in pool[:6]:
        shutil.copy(p, photos)
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps(small_preset()))
    ix = tmp_path / "i"
    assert cli(["-q", "index", str(photos), "--index", str(ix), "--preset", str(preset)]).returncode == 0
    idx = Index.open(ix)
    before = [(h.path, round(h.score, 6)) for h in idx.search(str(pool[0]), k=6, rerank="none")]
    idx.close()
    for p in pool[6:12]:
        shutil.copy(p, photos)
    res = cli(["-q", "index", str(photos), "--index", str(ix), "--workers", "1"], preexec_fn=limited(12_000))
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("Error")]
    assert len(lines) == 1 and "catalog" in lines[0] and "nothing was committed" in lines[0]
    assert "Traceback" not in res.stderr
    idx = Index.open(ix)
    assert idx.catalog.count("indexed") == 6
    assert [(h.path, round(h.score, 6)) for h in idx.search(str(pool[0]), k=6, rerank="none")] == before
    idx.close()
    res = cli(["-q", "index", str(photos), "--index", str(ix)])
    assert res.returncode == 0 and "12 images indexed" in res.stdout
