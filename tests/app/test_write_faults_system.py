"""Writes under real faults of the system, each answer compared with the state afterwards.

- A full disk: ``retrieval serve`` and ``retrieval index`` run under file-size limits (RLIMIT_FSIZE, SIGXFSZ
  ignored: writes past the limit fail with EFBIG as on a full disk), from one that fails the first write to one that
  lets everything through. Each upload, delete and sync either fails in one line (507 / exit 1) with the catalog,
  the generation and every file as before, or succeeds with its change committed and searchable.
- A read-only index (a read-only bind mount in a private mount namespace, ``unshare``): ``retrieval serve`` serves
  it (searches, pages and thumbnails work; uploads and deletes answer 503 "the index is read-only"), ``retrieval
  check`` reads it, ``retrieval index`` is refused in one line naming the cause; nothing changes.
"""

from __future__ import annotations

import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import httpx
import pytest
from helpers import copy_index, make_pool, photo_index
from write_faults_support import index_state

from retrieval.app.index import Index

LIMITS = (8_000, 40_000, 150_000, 600_000, 50_000_000)
"""File-size limits (bytes) from one below the photos' own size to one no write of these tests reaches."""


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(index of 8 photos, its photo folder, the pool)."""
    d = tmp_path_factory.mktemp("faults-system")
    pool = make_pool(d / "pool")
    index, photos = photo_index(d, pool, (8,))
    (index / "uploads" / ".incoming").mkdir(parents=True)
    return index, photos, pool


def limited(nbytes):
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return set_limit


def committed(index) -> tuple[int, dict]:
    """(generation, {path: id} of the indexed rows) once the catalog and the search state are checked to agree."""
    idx = Index.open(index)
    try:
        gen, rows = idx.catalog.snapshot()
        paths = {r["path"]: r["id"] for r in rows if r["status"] == "indexed"}
        assert set(idx.searcher().backend.ids.tolist()) == set(paths.values())
        return gen, paths
    finally:
        idx.close()


def found(index, query) -> set:
    idx = Index.open(index)
    try:
        return {h.id for h in idx.search(query, k=10, rerank="none")}
    finally:
        idx.close()


class Server:
    """``retrieval serve --port 0`` in its own process (``prefix``: a command it runs under; ``preexec_fn``: run in
    the child before it starts), with an HTTP client once it answers."""

    def __init__(self, index, *, prefix=(), preexec_fn=None):
        cmd = [*prefix, sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index), "--port", "0",
               "--threads", "1"]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     preexec_fn=preexec_fn)
        port = None
        while port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"the server did not start ({self.proc.wait(30)})")
            m = re.search(r"http://[^:]+:(\d+)/", line)
            port = int(m.group(1)) if m else None
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300)
        for _ in range(600):
            try:
                self.client.get("/api/info")
                break
            except httpx.TransportError:
                time.sleep(0.1)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def one_line_error(resp, status, *words):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert "\n" not in body["error"] and "Traceback" not in body["error"], body
    for w in words:
        assert w in body["error"], body["error"]


# ---------------------------------------------------------------------------------------------- a full disk
def test_uploads_and_deletes_under_file_size_limits_tell_the_truth(base, tmp_path):
    index0, photos, pool = base
    upload = max(pool[8:], key=lambda p: p.stat().st_size)   # larger than the second limit
    assert upload.stat().st_size > LIMITS[1]
    outcomes = set()
    for limit in LIMITS[1:]:   # under the first, SQLite cannot even open the catalog (its shared memory file)
        index = copy_index(index0, tmp_path / f"limit{limit}")
        gone_path = str(photos / pool[4].name)
        before = index_state(index)
        server = Server(index, preexec_fn=limited(limit))
        try:
            c = server.client
            r = c.post("/api/images", files={"image": (upload.name, upload.read_bytes())})
            if r.status_code == 201:
                new_id = r.json()["image"]["id"]
                assert new_id in committed(index)[1].values() and new_id in found(index, new_id)
                outcomes.add("add 201")
            else:
                one_line_error(r, 507, "no space left", "nothing was changed")
                assert index_state(index) == before
                outcomes.add("add 507")
            before = index_state(index)
            gone_id = committed(index)[1][gone_path]
            r = c.delete(f"/api/images/{gone_id}")
            if r.status_code == 200:
                assert gone_path not in committed(index)[1] and gone_id not in found(index, gone_path)
                outcomes.add("delete 200")
            else:
                one_line_error(r, 507, "no space left", "nothing was changed")
                assert index_state(index) == before
                outcomes.add("delete 507")
            assert c.post("/api/search", data={"id": 0, "k": 3}).status_code == 200   # searches go on
        finally:
            server.stop()
    assert {"add 201", "add 507", "delete 200"} <= outcomes, outcomes


def test_syncs_under_file_size_limits_tell_the_truth(base, tmp_path):
    index0, photos0, pool = base
    outcomes = set()
    for limit in LIMITS:
        index = copy_index(index0, tmp_path / f"limit{limit}")
        photos = tmp_path / f"photos{limit}"
        shutil.copytree(photos0, photos)
        for p in pool[10:12]:
            shutil.copy(p, photos)
        (photos / pool[5].name).unlink()
        before = index_state(index)
        res = subprocess.run([sys.executable, "-m", "retrieval.cli", "-q", "index", str(photos), "--index", str(index),
                              "--replace-root", "--workers", "1"], capture_output=True, text=True, timeout=300,
                             preexec_fn=limited(limit))
        if res.returncode == 0:
            assert set(committed(index)[1]) == {str(p) for p in photos.iterdir()}
            assert committed(index)[1][str(photos / pool[10].name)] in found(index, str(photos / pool[10].name))
            outcomes.add("done")
        else:
            lines = [ln for ln in res.stderr.splitlines() if ln.startswith("Error")]
            assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
            assert "full" in lines[0] or "File too large" in lines[0], lines[0]
            assert index_state(index) == before
            outcomes.add("refused")
        shutil.rmtree(photos)
    assert outcomes == {"done", "refused"}, outcomes


# ---------------------------------------------------------------------------------------------- a read-only index
READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'


def read_only(index) -> list[str]:
    """The command prefix that runs a command with ``index`` mounted read-only (in its own mount namespace)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY, "sh", str(index)]


@pytest.fixture(scope="module")
def can_mount(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    try:
        res = subprocess.run([*read_only(folder), "sh", "-c", f"! touch {folder}/x"], capture_output=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("no 'unshare' command: a read-only bind mount cannot be made")
    if res.returncode != 0:
        pytest.skip(f"a read-only bind mount cannot be made here ({res.stderr.decode()[-200:].strip()})")


def test_a_read_only_index_is_served_read_only(base, tmp_path, can_mount):
    index0, photos, pool = base
    index = copy_index(index0, tmp_path / "index")
    before = index_state(index)
    server = Server(index, prefix=read_only(index))
    try:
        c = server.client
        assert c.get("/api/info").status_code == 200
        hits = c.post("/api/search", data={"id": 0, "k": 3})
        assert hits.status_code == 200 and hits.json()["hits"][0]["id"] == 0
        with_file = c.post("/api/search", files={"image": ("q.jpg", pool[0].read_bytes())}, data={"k": "3"})
        assert with_file.status_code == 200, with_file.text
        assert c.get("/").status_code == 200 and c.get("/api/images").status_code == 200
        assert c.get("/api/images/0/thumbnail", params={"size": "small"}).status_code == 200
        one_line_error(c.post("/api/images", files={"image": ("new.jpg", pool[10].read_bytes())}), 503,
                       "the index is read-only", "read-only file system")
        one_line_error(c.delete("/api/images/1"), 503, "the index is read-only")
    finally:
        server.stop()
    assert index_state(index) == before


def test_check_reads_a_read_only_index_and_index_refuses_it_in_one_line(base, tmp_path, can_mount):
    index0, photos, pool = base
    index = copy_index(index0, tmp_path / "index")
    before = index_state(index)

    def cli(*args):
        return subprocess.run([*read_only(index), sys.executable, "-m", "retrieval.cli", *map(str, args)],
                              capture_output=True, text=True, timeout=300)

    res = cli("check", "--index", index)
    assert res.returncode == 0 and "catalog    ok" in res.stdout and "Traceback" not in res.stderr, res.stderr
    res = cli("query", photos / pool[1].name, "--index", index, "--top", "3")
    assert res.returncode == 0 and str(photos / pool[1].name) in res.stdout, res.stderr
    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(pool[10], more)
    for args in (("-q", "index", more, "--index", index, "--add-root"), ("remove", photos / pool[1].name,
                                                                          "--index", index)):
        res = cli(*args)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "the index is read-only (read-only file system)" in lines[0], lines[0]
        assert "full" not in lines[0]
    assert index_state(index) == before
