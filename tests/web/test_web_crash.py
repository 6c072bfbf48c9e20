"""The server's add and delete publish through the same ``IndexFolder.publish`` as ``retrieval index``: a server
killed (SIGKILL, the fault-injection hook ``RETRIEVAL_CRASH_AT``) at each step of the publish of an add or a delete
leaves the index as it was before, or as it is after, never in between; the next server answers consistently, and
the add or delete done again completes it."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from helpers import copy_index
from web_support import textured, web_base  # noqa: F401

from retrieval.app.index import Index


def start(index, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index), "--port", "0",
                             "--threads", "1"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    port = int(re.search(r":(\d+)/", proc.stderr.readline()).group(1))
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    for _ in range(600):
        try:
            client.get("/api/info")
            break
        except httpx.TransportError:
            time.sleep(0.1)
    return proc, client


def stop(proc, client):
    client.close()
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def consistent(index) -> tuple[int, set]:
    """(generation, indexed ids) after checking that the catalog and the search state agree."""
    idx = Index.open(index)
    gen, rows = idx.catalog.snapshot()
    ids = {r["id"] for r in rows if r["status"] == "indexed"}
    assert set(idx.searcher().backend.ids.tolist()) == ids
    idx.close()
    return gen, ids


def photo() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(textured(91, size=(320, 240))).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("point", ["array", "publish", "commit"])
def test_a_server_killed_while_publishing_an_add_or_a_delete(web_base, tmp_path, point):  # noqa: F811
    _, base, _ = web_base
    index = copy_index(base, tmp_path / "index")
    gen0, ids0 = consistent(index)

    # an add, killed at the point
    proc, client = start(index, {"RETRIEVAL_CRASH_AT": point})
    with pytest.raises(httpx.TransportError):
        client.post("/api/images", files={"image": ("new.png", photo())})
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    stop(proc, client)
    gen1, ids1 = consistent(index)
    if point == "commit":   # committed, then killed: the photo is in
        assert gen1 == gen0 + 1 and len(ids1) == len(ids0) + 1
    else:                   # killed before the commit: nothing changed
        assert (gen1, ids1) == (gen0, ids0)
    proc, client = start(index)
    try:
        r = client.post("/api/images", files={"image": ("new.png", photo())})   # done again (or already done)
        assert r.status_code in (200, 201), r.text
        new_id = r.json()["image"]["id"]
        assert (r.status_code == 201) == (point != "commit")
        assert new_id in {h["id"] for h in client.post("/api/search", data={"id": new_id, "k": 3}).json()["hits"]}
    finally:
        stop(proc, client)
    gen2, ids2 = consistent(index)

    # a delete, killed at the point
    proc, client = start(index, {"RETRIEVAL_CRASH_AT": point})
    with pytest.raises(httpx.TransportError):
        client.delete(f"/api/images/{new_id}")
    proc.wait(30)
    stop(proc, client)
    gen3, ids3 = consistent(index)
    if point == "commit":
        assert gen3 == gen2 + 1 and ids3 == ids2 - {new_id}
    else:
        assert (gen3, ids3) == (gen2, ids2)
    proc, client = start(index)
    try:
        if point != "commit":
            assert client.delete(f"/api/images/{new_id}").status_code == 200
        assert client.get(f"/api/images/{new_id}").status_code == 404
    finally:
        stop(proc, client)
    if point != "commit":   # the next writer removed the half-written generation
        assert not [p.name for p in (index / "gens").iterdir() if p.name.endswith(".tmp")]
    assert consistent(index)[1] == ids0
