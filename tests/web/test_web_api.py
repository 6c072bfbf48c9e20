"""The JSON API of ``retrieval serve`` through a real HTTP client (httpx) against a running uvicorn server on
127.0.0.1: every endpoint, every error, an add and a delete reflected by later searches, the token."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner
from web_support import BOX_IN_SCENE, ServerThread, assert_error, served_copy, textured, web_base  # noqa: F401

from retrieval.app.index import Index
from retrieval.cli.main import main as cli
from retrieval.cli.serve import is_loopback

MAX_UPLOAD = 1_000_000
MAX_MP = 4.0
HIT_KEYS = {"id", "rank", "path", "score", "similarity", "verified"}


@pytest.fixture(scope="module")
def served(web_base, tmp_path_factory):  # noqa: F811
    server, index = served_copy(web_base, tmp_path_factory, max_upload_bytes=MAX_UPLOAD, max_megapixels=MAX_MP)
    client = httpx.Client(base_url=server.url, timeout=120)
    yield server, index, client, web_base
    client.close()
    server.stop()


def ids_by_name(client) -> dict:
    page = client.get("/api/images", params={"limit": 1000}).json()
    return {Path(im["path"]).name: im["id"] for im in page["images"]}



def png_bytes(arr) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- reads
def test_info_and_paged_list(served):
    _, index, client, (photos, _, _) = served
    info = client.get("/api/info").json()
    n = len(list(photos.iterdir()))
    assert info["indexed"] == n and info["generation"] >= 1 and info["preset"]["name"] == "default"
    first = client.get("/api/images", params={"offset": 0, "limit": 5}).json()
    rest = client.get("/api/images", params={"offset": 5, "limit": 1000}).json()
    assert first["total"] == rest["total"] == n and len(first["images"]) == 5 and len(rest["images"]) == n - 5
    all_ids = [im["id"] for im in first["images"] + rest["images"]]
    assert all_ids == sorted(all_ids) and len(set(all_ids)) == n
    assert {Path(im["path"]).name for im in first["images"] + rest["images"]} == {p.name for p in photos.iterdir()}
    box = client.get("/api/images", params={"q": "BOX"}).json()
    assert sorted(Path(im["path"]).name for im in box["images"]) == ["box.png", "box_in_scene.png"]
    assert box["total"] == 2


def test_images_paged_by_cursor(served):
    _, _, client, (photos, _, _) = served
    pages = [client.get("/api/images", params={"limit": 3}).json()]
    assert pages[0]["prev"] is None
    while pages[-1]["next"] is not None:
        pages.append(client.get("/api/images", params={"limit": 3, "after": pages[-1]["next"]}).json())
    ids = [im["id"] for p in pages for im in p["images"]]
    everything = client.get("/api/images", params={"limit": 1000}).json()
    assert ids == [im["id"] for im in everything["images"]] and len(pages) > 2
    assert all(p["total"] == everything["total"] for p in pages)
    back = client.get("/api/images", params={"limit": 3, "before": pages[1]["prev"]}).json()
    assert back["images"] == pages[0]["images"] and back["prev"] is None
    assert_error(client.get("/api/images", params={"after": "not-a-cursor"}), 400, "after=")
    assert_error(client.get("/api/images", params={"after": pages[0]["next"], "offset": 3}), 400, "at most one")
    html = client.get("/", params={"after": pages[0]["next"]}).text
    assert f'data-id="{pages[1]["images"][0]["id"]}"' in html and 'rel="prev"' in html


def test_image_record(served):
    _, _, client, (_, _, paths) = served
    ids = ids_by_name(client)
    rec = client.get(f"/api/images/{ids['box.png']}").json()
    assert rec["path"] == str(paths["box.png"]) and (rec["width"], rec["height"]) == (324, 223)
    assert rec["status"] == "indexed" and rec["uploaded"] is False
    assert_error(client.get("/api/images/987654"), 404, "987654")
    assert_error(client.get("/api/images/abc"), 400)


def test_thumbnails_are_cached_and_oriented(served):
    from PIL import Image

    _, index, client, (_, _, paths) = served
    ids = ids_by_name(client)
    rec = client.get(f"/api/images/{ids['box_in_scene.png']}").json()
    r = client.get(f"/api/images/{ids['box_in_scene.png']}/thumbnail", params={"size": "small"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    im = Image.open(io.BytesIO(r.content))
    assert max(im.size) == 320 and abs(im.size[0] / im.size[1] - 512 / 384) < 0.01
    assert (index / "thumbs" / f"{rec['hash']}-320.jpg").read_bytes() == r.content   # cached, keyed by content
    assert client.get(f"/api/images/{ids['box.png']}/thumbnail", params={"size": "large"}).status_code == 200
    assert_error(client.get(f"/api/images/{ids['box.png']}/thumbnail", params={"size": "huge"}), 400, "huge")
    assert_error(client.get("/api/images/987654/thumbnail"), 404)
    # EXIF orientation 6: stored 240x180, displayed (and indexed) 180x240, the stored top row becomes the right column
    exif = client.get(f"/api/images/{ids['gen_exif6.jpg']}").json()
    assert (exif["width"], exif["height"]) == (180, 240)
    t = np.asarray(Image.open(io.BytesIO(client.get(f"/api/images/{exif['id']}/thumbnail",
                                                    params={"size": "large"}).content)).convert("RGB"), float)
    assert t.shape[:2] == (240, 180)
    src = np.asarray(Image.open(paths["exif"]).convert("RGB"), float)   # as stored, before rotation
    assert np.abs(t - np.rot90(src, k=-1)).mean() < 12


def test_thumbnails_of_16_bit_and_cmyk(served):
    from PIL import Image

    _, _, client, (_, _, paths) = served
    ids = ids_by_name(client)

    def thumb(name):
        r = client.get(f"/api/images/{ids[name]}/thumbnail", params={"size": "large"})
        return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"), float)

    gray16 = np.asarray(Image.open(paths["gray16"]), float) / 257.0     # what the 16-bit values look like in 8 bits
    t = thumb("gen_gray16.png")
    assert t.shape[:2] == gray16.shape and np.abs(t.mean(axis=2) - gray16).mean() < 6   # not clipped to white
    cmyk = np.asarray(Image.open(paths["cmyk"]).convert("RGB"), float)    # Pillow's CMYK -> RGB
    t = thumb("gen_cmyk.jpg")
    assert np.abs(t - cmyk).mean() < 8
    assert np.abs(t - (255 - cmyk)).mean() > 60   # and not inverted


# ---------------------------------------------------------------------------------------------- search
def test_search_by_id_with_a_box_matches_the_library(served):
    _, index, client, _ = served
    ids = ids_by_name(client)
    q = ids["box_in_scene.png"]
    r = client.post("/api/search", data={"id": q, "box": ",".join(map(str, BOX_IN_SCENE)), "k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    idx = Index.open(index)
    want = [h.to_json() for h in idx.search(q, bbox=BOX_IN_SCENE, k=5)]
    assert body["hits"] == want   # the hit schema of 'retrieval query --json', the same results
    assert body["generation"] == idx.catalog.snapshot()[0]
    top3 = {h["id"]: h for h in body["hits"][:3]}
    assert ids["box.png"] in top3 and top3[ids["box.png"]]["verified"] and len(top3[ids["box.png"]]["box"]) == 4
    for h in body["hits"]:
        assert HIT_KEYS <= set(h) and body["sizes"][str(h["id"])][0] > 0


def test_search_filters_keep_what_the_library_keeps(served):
    """The API's min_similarity and verified_only give the library's lists; a refused value names its field."""
    _, index, client, _ = served
    q = ids_by_name(client)["box_in_scene.png"]
    idx = Index.open(index)
    for data, fields in (({"verified_only": "true"}, {"verified_only": True}),
                         ({"min_similarity": "0.5"}, {"min_similarity": 0.5})):
        r = client.post("/api/search", data={"id": q, "k": 8, **data})
        assert r.status_code == 200, r.text
        assert r.json()["hits"] == [h.to_json() for h in idx.search(q, k=8, **fields)]
    assert all(h["verified"] for h in client.post("/api/search", data={"id": q, "k": 8, "verified_only": "true"}
                                                  ).json()["hits"])
    refused = client.post("/api/search", data={"id": q, "verified_only": "true", "rerank": "none"})
    assert refused.status_code == 400 and refused.json()["field"] == "verified_only", refused.text
    idx.close()


def test_a_method_not_allowed_says_which_are(served):
    _, _, client, _ = served
    r = client.request("TRACE", "/api/info")
    assert r.status_code == 405 and "GET" in r.headers.get("allow", ""), (r.status_code, dict(r.headers))


def test_search_by_upload_is_not_stored(served):
    _, index, client, (_, _, paths) = served
    ids = ids_by_name(client)
    before = sorted(os.listdir(tempfile.gettempdir()))
    r = client.post("/api/search", files={"image": ("query.png", paths["box.png"].read_bytes(), "image/png")},
                    data={"k": 3})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits[0]["id"] == ids["box.png"] and hits[0]["verified"]
    assert not (index / "uploads").exists()
    leftovers = [n for n in set(os.listdir(tempfile.gettempdir())) - set(before) if n.startswith(".upload-")]
    assert leftovers == []
    whole = client.post("/api/search", data={"id": ids["box.png"], "k": 3, "rerank": "none"}).json()
    assert all(not h["verified"] for h in whole["hits"])


def test_match(served):
    _, _, client, _ = served
    ids = ids_by_name(client)
    r = client.post("/api/match", data={"a_id": ids["box_in_scene.png"], "b_id": ids["box.png"],
                                        "box": ",".join(map(str, BOX_IN_SCENE))})
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["verified"] and m["inliers"] >= 9 and len(m["points_a"]) == len(m["points_b"]) == min(m["inliers"], 300)
    pa, pb = np.array(m["points_a"]), np.array(m["points_b"])
    x1, y1, x2, y2 = BOX_IN_SCENE
    assert (pa[:, 0] >= x1).all() and (pa[:, 0] <= x2).all() and (pa[:, 1] >= y1).all() and (pa[:, 1] <= y2).all()
    assert (pb >= -1).all() and (pb[:, 0] <= 324).all() and (pb[:, 1] <= 223).all()
    assert len(m["box_in_b"]) == 4 and np.array(m["homography"]).shape == (3, 3)
    up = client.post("/api/match", data={"b_id": ids["box.png"]},
                     files={"a_image": ("q.png", Path(m["b"]["path"]).read_bytes(), "image/png")}).json()
    assert up["verified"] and up["inliers"] >= 9
    assert_error(client.post("/api/match", data={"a_id": 987654, "b_id": ids["box.png"]}), 404)
    assert_error(client.post("/api/match", data={"a_id": ids["box.png"], "b_id": 987654}), 404)
    assert_error(client.post("/api/match", data={"b_id": ids["box.png"]}), 400, "a_id")


# ---------------------------------------------------------------------------------------------- errors
def test_errors(served):
    _, index, client, (_, _, paths) = served
    ids = ids_by_name(client)
    q = ids["box_in_scene.png"]
    assert_error(client.post("/api/search", data={"id": 987654}), 404, "987654")
    assert_error(client.post("/api/search", data={"id": q, "box": "600,400,700,500"}), 400, "outside")
    assert_error(client.post("/api/search", data={"id": q, "box": "1,2,3"}), 400, "box")
    assert_error(client.post("/api/search", data={"id": q, "box": "50,50,10,10"}), 400)
    assert_error(client.post("/api/search", data={"id": q, "k": 0}), 400, "k")
    assert_error(client.post("/api/search", data={"k": 3}), 400, "either")
    assert_error(client.post("/api/search", data={"id": q},
                             files={"image": ("a.png", paths["box.png"].read_bytes(), "image/png")}), 400, "either")
    assert_error(client.post("/api/search", files={"image": ("notes.txt", b"hello, not an image\n" * 10)}),
                 415, "notes.txt", "not an image")
    gif = io.BytesIO()
    from PIL import Image

    Image.fromarray(textured(5)).save(gif, format="GIF")   # a GIF query: its first frame, as the CLI reads it
    r = client.post("/api/search", files={"image": ("a.gif", gif.getvalue())})
    assert r.status_code == 200 and len(r.json()["hits"]) > 0, r.text
    assert_error(client.post("/api/search", files={"image": ("empty.jpg", b"")}), 400, "empty")
    assert_error(client.post("/api/search", files={"image": ("cut.png", paths["box.png"].read_bytes()[:3000])}),
                 400, "cut.png")
    big = os.urandom(MAX_UPLOAD + 10)   # just over the limit: refused while reading
    assert_error(client.post("/api/search", files={"image": ("big.jpg", big)}), 413, "big.jpg", "limit")
    huge = os.urandom(3 * MAX_UPLOAD)   # refused on its Content-Length, before reading
    assert_error(client.post("/api/images", files={"image": ("huge.jpg", huge)}), 413, "limit")
    many = png_bytes(np.zeros((1800, 2500), np.uint8))   # 4.5 MP in a few kB: the pixel guard
    assert len(many) < MAX_UPLOAD
    assert_error(client.post("/api/images", files={"image": ("many.png", many)}), 413, "megapixels")
    assert_error(client.delete("/api/images/987654"), 404, "987654")
    assert_error(client.get("/api/nothing-here"), 404)
    assert not (index / "uploads").exists() or not [p for p in (index / "uploads").iterdir() if p.is_file()]


def test_empty_index_and_index_being_built(tmp_path):
    idx = Index.create(tmp_path / "empty", preset="default")
    server = ServerThread(tmp_path / "empty")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert_error(client.post("/api/search", data={"id": 0}), 409, "empty")
            with idx.folder.writer_lock():   # what a running first 'retrieval index' holds
                assert_error(client.post("/api/search", data={"id": 0}), 503, "being built")
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- writes
def test_add_then_delete_is_reflected_by_searches(served):
    from PIL import Image

    server, index, client, (photos, _, paths) = served
    ids = ids_by_name(client)
    gen0 = client.get("/api/info").json()["generation"]
    # a new photo of the box: box.png scaled and put on a textured background
    box = Image.open(paths["box.png"]).convert("RGB").resize((260, 179))
    canvas = Image.fromarray(textured(7, (420, 320)))
    canvas.paste(box, (90, 70))
    buf = io.BytesIO()
    canvas.save(buf, format="JPEG", quality=92)
    r = client.post("/api/images", files={"image": ("new box.jpg", buf.getvalue(), "image/jpeg")})
    assert r.status_code == 201, r.text
    rec = r.json()["image"]
    assert r.json()["added"] and rec["uploaded"] and Path(rec["path"]).parent == index.resolve() / "uploads"
    assert Path(rec["path"]).name == "new box.jpg" and (rec["width"], rec["height"]) == canvas.size   # its own name
    new_id = rec["id"]
    again = client.post("/api/images", files={"image": ("copy.jpg", buf.getvalue(), "image/jpeg")})
    assert again.status_code == 200 and again.json()["image"]["id"] == new_id and not again.json()["added"]

    res = client.post("/api/search", data={"id": ids["box.png"], "k": 5}).json()
    assert res["generation"] == gen0 + 1
    found = {h["id"]: h for h in res["hits"]}
    assert new_id in found and found[new_id]["verified"]
    # the new generation's searcher took over the verification cache of the one before (same model)
    searchers = server.service.index.searchers.loaded()
    assert sorted(searchers) == [gen0, gen0 + 1], sorted(searchers)
    assert searchers[gen0].cache is searchers[gen0 + 1].cache
    assert len(searchers[gen0 + 1].cache) > 0

    # a later 'retrieval index PHOTO_DIR' (which finds a new photo) keeps the uploaded image (the index follows its
    # uploads folder)
    Image.fromarray(textured(11, (300, 220))).save(photos / "extra.jpg", quality=90)
    out = CliRunner().invoke(cli, ["index", str(photos), "--index", str(index), "--workers", "1", "--quiet"])
    assert out.exit_code == 0, out.output
    assert client.get(f"/api/images/{new_id}").json()["status"] == "indexed"
    res = client.post("/api/search", data={"id": ids["box.png"], "k": 5}).json()
    assert res["generation"] == gen0 + 2   # published by another writer: picked up without a restart
    assert new_id in {h["id"] for h in res["hits"]}

    r = client.delete(f"/api/images/{new_id}")
    assert r.status_code == 200 and r.json()["removed"] == new_id and r.json()["generation"] == gen0 + 3
    assert not Path(rec["path"]).exists()
    assert_error(client.get(f"/api/images/{new_id}"), 404)
    res = client.post("/api/search", data={"id": ids["box.png"], "k": 30}).json()
    assert res["generation"] == gen0 + 3 and new_id not in {h["id"] for h in res["hits"]}
    assert client.get("/api/info").json()["indexed"] == len(list(photos.iterdir()))
    # an indexed photo of the folder can be removed too (its file is kept)
    r = client.delete(f"/api/images/{ids['leuvenB.jpg']}")
    assert r.status_code == 200 and paths["leuvenB.jpg"].exists()
    assert "leuvenB.jpg" not in ids_by_name(client)
    assert_error(client.post("/api/search", data={"id": ids["leuvenB.jpg"]}), 404)


# ---------------------------------------------------------------------------------------------- pages, token
def test_pages_and_openapi(served):
    _, _, client, _ = served
    ids = ids_by_name(client)
    grid = client.get("/")
    assert grid.status_code == 200 and grid.text.count('class="tile"') == min(len(ids), 48)
    assert client.get("/", params={"q": "box_in"}).text.count('class="tile"') == 1
    assert f'data-id="{ids["box.png"]}"' in client.get("/query", params={"id": ids["box.png"]}).text
    assert client.get("/query").status_code == 200
    assert client.get("/match", params={"a": ids["box.png"], "b": ids["box_in_scene.png"]}).status_code == 200
    assert_error(client.get("/query", params={"id": 987654}), 404)
    assert client.get("/static/app.js").status_code == 200
    assert_error(client.get("/static/..%2Fservice.py"), 404)
    # the OpenAPI page and its Swagger UI files come from the server itself (no CDN: it works offline)
    page = client.get("/docs")
    assert page.status_code == 200 and "/static/docs.js" in page.text
    assert "/openapi.json" in client.get("/static/docs.js").text
    for url in ("/static/swagger/swagger-ui-bundle.js", "/static/swagger/swagger-ui.css"):
        assert url in page.text
        r = client.get(url)
        assert r.status_code == 200 and len(r.content) > 10_000, url
    assert "http://" not in page.text and "https://" not in page.text
    assert_error(client.get("/static/swagger/..%2F..%2F__init__.py"), 404)
    assert client.get("/redoc").status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/api/search", "/api/images", "/api/images/{image_id}", "/api/info", "/api/match"):
        assert p in paths
    assert {"get", "delete"} <= set(paths["/api/images/{image_id}"]) and "post" in paths["/api/images"]


def test_token_required_on_every_request(web_base, tmp_path_factory):  # noqa: F811
    server, _ = served_copy(web_base, tmp_path_factory, token="s3cret-token")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for path in ("/api/info", "/", "/docs", "/openapi.json", "/static/app.js", "/api/images/0/thumbnail"):
                assert_error(c.get(path), 401, "token")
            assert_error(c.get("/api/info", headers={"Authorization": "Bearer wrong"}), 401)
            assert_error(c.get("/api/info", params={"token": "s3cret-toke"}), 401)
            assert_error(c.post("/api/search", data={"id": 0}), 401)
            assert c.get("/api/info", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
        with httpx.Client(base_url=server.url, timeout=60) as browser:
            first = browser.get("/", params={"token": "s3cret-token"})
            assert first.status_code == 200 and "retrieval_token" in first.headers.get("set-cookie", "")
            assert browser.get("/api/info").status_code == 200   # the cookie carries it from then on
    finally:
        server.stop()


def test_serve_refuses_other_hosts_without_a_token(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.8.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")
    out = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--index", str(tmp_path)], env={"RETRIEVAL_TOKEN": ""})
    assert out.exit_code == 1
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--token" in lines[0] and "0.0.0.0" in lines[0]
