"""The duplicates routes of ``retrieval serve`` through a real HTTP client (httpx) against a running uvicorn server on
127.0.0.1, on a small real index with byte copies, a half-size copy and two photos of one scene (tests/web/
dup_world.py): the groups, a dry run that changes nothing, a move carried out (the index no longer returns the
files) then undone, the guard on these writes, plan names that are not bare names, and "already have these?"
uploads that leave the index as it was."""

from __future__ import annotations

import io
import os
from pathlib import Path

import httpx
import pytest
from dup_world import build_dup_world, tree
from PIL import Image
from web_support import ServerThread, assert_error

EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def served(tmp_path_factory, cli_world):
    world = build_dup_world(tmp_path_factory.mktemp("webdups"), cli_world)
    server = ServerThread(world["index"])
    client = httpx.Client(base_url=server.url, timeout=300)
    yield server, client, world
    client.close()
    server.stop()



def rel(world, path) -> str:
    return str(Path(path).relative_to(world["photos"]))


def by_kind(world, groups) -> dict:
    out = {"exact": [], "near": [], "scene": []}
    for g in groups:
        out[g["kind"]].append(sorted(rel(world, im["path"]) for im in g["images"]))
    return {k: sorted(v) for k, v in out.items()}


def indexed_paths(client) -> set:
    return {im["path"] for im in client.get("/api/images", params={"limit": 1000}).json()["images"]}


def state(client) -> tuple:
    info = client.get("/api/info").json()
    return info["generation"], info["indexed"]


def test_groups_with_kinds_keepers_facts_and_regions(served):
    server, client, world = served
    r = client.get("/api/duplicates")
    assert r.status_code == 200, r.text
    doc = r.json()
    groups = doc["groups"]
    assert doc["generation"] == state(client)[0]
    assert by_kind(world, groups) == {"exact": [["copies/p0.jpg", "p0.jpg"], ["copies/p2.jpg", "p2.jpg"]],
                                      "near": [["copies/p1 small.png", "p1.jpg"]],
                                      "scene": [["scene-a.jpg", "scene-b.jpg"]]}
    for g in groups:
        keepers = [im for im in g["images"] if im["keeper"]]
        assert len(keepers) == 1 and keepers[0]["id"] == g["keeper"] and keepers[0]["path"] == g["keeper_path"]
        assert g["keeper_reason"]
        for im in g["images"]:
            assert im["width"] > 0 and im["height"] > 0 and im["bytes"] == os.path.getsize(im["path"])
            assert im["format"] in ("JPEG", "PNG")
    near = next(g for g in groups if g["kind"] == "near")
    assert rel(world, near["keeper_path"]) == "p1.jpg"           # the larger photo is kept
    [scene] = [g for g in groups if g["kind"] == "scene"]
    [pair] = scene["pairs"]
    size = {im["id"]: (im["width"], im["height"]) for im in scene["images"]}
    assert pair["inliers"] >= 12 and len(pair["regions"]) == 2
    for box, side in zip(pair["regions"], (pair["a"], pair["b"]), strict=True):
        x0, y0, x1, y1 = box
        w, h = size[side]
        assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h
    named = client.post("/api/duplicates/action", json={"action": "trash", "kinds": ["scene"],
                                                         "groups": [scene["group"]]}).json()
    assert named["files"] == 1 and named["plan"]["steps"][0]["path"] != scene["keeper_path"]
    assert rel(world, named["plan"]["steps"][0]["path"]) in ("scene-a.jpg", "scene-b.jpg")
    # kept for this generation: asked again, the same groups without a new computation
    kept = server.service.duplicates._found
    assert kept[0] == doc["generation"]
    assert client.get("/api/duplicates").json() == doc and server.service.duplicates._found is kept
    only = client.get("/api/duplicates", params={"kinds": "scene,near"}).json()["groups"]
    assert sorted(g["kind"] for g in only) == ["near", "scene"]
    assert_error(client.get("/api/duplicates", params={"kinds": "exact,copies"}), 400, "kinds=")


def test_concurrent_requests_compute_the_groups_once(served, monkeypatch):
    """Requests arriving together while nothing is kept: one computes, the others wait for it and read its result."""
    from concurrent.futures import ThreadPoolExecutor

    import retrieval.app.duplicates as finder

    server, client, _ = served
    calls = []
    real = finder.find_duplicates

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(finder, "find_duplicates", counted)
    kept = server.service.duplicates
    with kept._lock:
        kept._found = None
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.get("/api/duplicates").json(), range(4)))
    assert len(calls) == 1 and all(a == answers[0] for a in answers) and len(answers[0]["groups"]) == 4


def test_move_dry_run_confirm_then_undo(served, tmp_path):
    _, client, world = served
    photos = world["photos"]
    before_files, before_state, before_paths = tree(photos), state(client), indexed_paths(client)
    dest = tmp_path / "moved"
    extras = {"copies/p0.jpg", "copies/p2.jpg", "copies/p1 small.png"}

    dry = client.post("/api/duplicates/action", json={"action": "move", "to": str(dest)})
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["confirmed"] is False and plan["files"] == 3 and len(plan["lines"]) == 3
    assert {rel(world, s["path"]) for s in plan["plan"]["steps"]} == extras
    assert all(ln.startswith("move ") and str(dest) in ln for ln in plan["lines"])
    assert tree(photos) == before_files and state(client) == before_state and not dest.exists()   # nothing changed

    done = client.post("/api/duplicates/action", json={"action": "move", "to": str(dest), "confirm": True,
                                                        "generation": plan["generation"]})
    assert done.status_code == 200, done.text
    res = done.json()
    assert res["confirmed"] is True and res["summary"]["done"] == 3 and res["summary"]["failed"] == 0
    assert "/" not in res["plan"] and (world["index"] / "duplicate-plans" / res["plan"]).is_file()
    moved = tree(dest)
    for e in extras:                                       # moved as they were, the folder structure kept
        assert not (photos / e).exists() and moved[e] == before_files[e]
    assert {str(photos / e) for e in extras} <= before_paths
    assert not {str(photos / e) for e in extras} & indexed_paths(client)       # the index no longer has them
    ids = {rel(world, p): i for p, i in ((im["path"], im["id"]) for im in
                                         client.get("/api/images", params={"limit": 1000}).json()["images"])}
    hits = client.post("/api/search", data={"id": ids["p0.jpg"], "k": 20}).json()["hits"]
    assert hits and not {str(photos / e) for e in extras} & {h["path"] for h in hits}
    after = client.get("/api/duplicates").json()
    assert by_kind(world, after["groups"])["exact"] == [] and by_kind(world, after["groups"])["near"] == []
    # the groups shown before the move are stale now: a confirmation against them is refused, nothing moves
    stale = client.post("/api/duplicates/action", json={"action": "trash", "confirm": True,
                                                         "generation": plan["generation"]})
    assert_error(stale, 409, "changed")

    undo = client.post("/api/duplicates/undo", json={"plan": res["plan"]})
    assert undo.status_code == 200, undo.text
    assert undo.json()["summary"]["restored"] == 3
    assert tree(photos) == before_files and not any(dest.rglob("*.*"))
    assert indexed_paths(client) == before_paths                                 # indexed again
    assert by_kind(world, client.get("/api/duplicates").json()["groups"])["exact"] == [
        ["copies/p0.jpg", "p0.jpg"], ["copies/p2.jpg", "p2.jpg"]]
    assert_error(client.post("/api/duplicates/undo", json={"plan": res["plan"]}), 409, "undone")


def test_writes_are_guarded_and_bad_input_is_one_line(served, tmp_path):
    server, client, world = served
    before_files, before_state = tree(world["photos"]), state(client)
    move = {"action": "move", "to": str(tmp_path / "x"), "confirm": True}
    for headers in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}):   # the own page, but no CSRF token
        assert_error(client.post("/api/duplicates/action", json=move, headers=headers), 403)
        assert_error(client.post("/api/duplicates/undo", json={"plan": "plan-x-move.json"}, headers=headers), 403)
        assert_error(client.post("/api/duplicates/against", files={"images": ("a.jpg", b"x")}, headers=headers),
                     403)
    assert_error(client.post("/api/duplicates/action", json=move, headers={"Origin": EVIL}), 403, "cross-site")
    for plan in ("../catalog.db", "sub/plan-1-move.json", "/etc/passwd", "..\\plan-1-move.json", "catalog.db",
                 ".."):
        assert_error(client.post("/api/duplicates/undo", json={"plan": plan}), 400, "bare name")
    assert_error(client.post("/api/duplicates/undo", json={"plan": "plan-20000101-000000-move.json"}), 404)
    bad = [({"action": "delete"}, "action"), ({"action": "move"}, "'to'"),
           ({"action": "move", "to": "relative/dir"}, "absolute"),
           ({"action": "link", "kinds": ["near"]}, "exact"), ({"action": "trash", "kinds": ["scene"]}, "groups"),
           ({"action": "trash", "confirm": "yes"}, "confirm"), ({"action": "trash", "kinds": ["copies"]}, "kinds"),
           ({"action": "trash", "extra": 1}, "extra")]
    for body, word in bad:
        assert_error(client.post("/api/duplicates/action", json=body), 400, word)
    assert_error(client.post("/api/duplicates/action", content=b"{not json",
                             headers={"Content-Type": "application/json"}), 400, "not valid JSON")
    assert_error(client.post("/api/duplicates/action", data={"action": "trash"}), 400, "JSON object")
    assert tree(world["photos"]) == before_files and state(client) == before_state
    secured = ServerThread(world["index"], token="s3cret")   # a token: nothing without it, reads or writes
    try:
        with httpx.Client(base_url=secured.url, timeout=60) as c:
            assert_error(c.get("/api/duplicates"), 401)
            assert_error(c.post("/api/duplicates/action", json={"action": "trash"}), 401)
            ok = c.post("/api/duplicates/action", json={"action": "trash", "kinds": ["exact"]},
                        headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200 and ok.json()["files"] == 2, ok.text
    finally:
        secured.stop()
    assert tree(world["photos"]) == before_files and state(client) == before_state


def test_already_have_these_reports_copies_and_adds_nothing(served):
    from conftest import shared_path

    _, client, world = served
    photos = world["photos"]
    before_state, before_paths = state(client), indexed_paths(client)
    half = io.BytesIO()
    im = Image.open(photos / "p4.jpg").convert("RGB")
    im.resize((im.width // 2, im.height // 2), Image.LANCZOS).save(half, format="JPEG", quality=90)
    other = shared_path("real", "holidays805", "jpg", "100500.jpg").read_bytes()     # a scene the index lacks
    files = [("images", ("mine.jpg", (photos / "p3.jpg").read_bytes(), "image/jpeg")),
             ("images", ("half.jpg", half.getvalue(), "image/jpeg")),
             ("images", ("new.jpg", other, "image/jpeg"))]
    r = client.post("/api/duplicates/against", files=files)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["path"] for x in results] == ["mine.jpg", "half.jpg", "new.jpg"]
    assert [x["kind"] for x in results] == ["exact", "near", None]
    assert [m["path"] for m in results[0]["matches"]] == [str(photos / "p3.jpg")]
    assert str(photos / "p4.jpg") in {m["path"] for m in results[1]["matches"]}
    assert results[2]["matches"] == []
    assert all(set(m) == {"id", "path", "kind"} for x in results for m in x["matches"])
    assert state(client) == before_state and indexed_paths(client) == before_paths       # nothing added
    uploads = world["index"] / "uploads"
    assert not uploads.exists() or not [p for p in uploads.rglob("*") if p.is_file()]
    assert_error(client.post("/api/duplicates/against", files={"images": ("notes.jpg", b"not an image")}), 415,
                 "notes.jpg")
    assert_error(client.post("/api/duplicates/against"), 400)
