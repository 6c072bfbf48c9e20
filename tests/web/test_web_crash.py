"""The server's add and delete publish through the same ``IndexFolder.publish`` as ``retrieval index``: a server
killed (SIGKILL, the fault-injection hook ``RETRIEVAL_CRASH_AT``) at each step of the publish of an add or a delete
leaves the index as it was before, or as it is after, never in between; the next server answers consistently, and
the add or delete done again completes it."""

from __future__ import annotations

import io
import signal

import httpx
import pytest
from helpers import copy_index
from web_support import ServeProcess, textured, web_base  # noqa: F401

from retrieval.app.index import Index


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
    server = ServeProcess(index, "--threads", "1", env={"RETRIEVAL_CRASH_AT": point})
    with pytest.raises(httpx.TransportError):
        server.client.post("/api/images", files={"image": ("new.png", photo())})
    server.proc.wait(30)
    assert server.proc.returncode == -signal.SIGKILL
    server.stop()
    gen1, ids1 = consistent(index)
    if point == "commit":   # committed, then killed: the photo is in
        assert gen1 == gen0 + 1 and len(ids1) == len(ids0) + 1
    else:                   # killed before the commit: nothing changed
        assert (gen1, ids1) == (gen0, ids0)
    server = ServeProcess(index, "--threads", "1")
    try:
        r = server.client.post("/api/images", files={"image": ("new.png", photo())})   # done again (or already done)
        assert r.status_code in (200, 201), r.text
        new_id = r.json()["image"]["id"]
        assert (r.status_code == 201) == (point != "commit")
        assert new_id in {h["id"] for h in server.client.post("/api/search", data={"id": new_id, "k": 3}).json()["hits"]}
    finally:
        server.stop()
    gen2, ids2 = consistent(index)

    # a delete, killed at the point
    server = ServeProcess(index, "--threads", "1", env={"RETRIEVAL_CRASH_AT": point})
    with pytest.raises(httpx.TransportError):
        server.client.delete(f"/api/images/{new_id}")
    server.proc.wait(30)
    server.stop()
    gen3, ids3 = consistent(index)
    if point == "commit":
        assert gen3 == gen2 + 1 and ids3 == ids2 - {new_id}
    else:
        assert (gen3, ids3) == (gen2, ids2)
    server = ServeProcess(index, "--threads", "1")
    try:
        if point != "commit":
            assert server.client.delete(f"/api/images/{new_id}").status_code == 200
        assert server.client.get(f"/api/images/{new_id}").status_code == 404
    finally:
        server.stop()
    if point != "commit":   # the next writer removed the half-written generation
        assert not [p.name for p in (index / "gens").iterdir() if p.name.endswith(".tmp")]
    assert consistent(index)[1] == ids0
