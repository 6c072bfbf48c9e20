"""RAW photos in ``retrieval serve``, against a running uvicorn server on 127.0.0.1 with a small decode budget: a
folder of RAW + JPEG pairs (DNG files made from real photos, tests/raw_photos.py) indexed, each RAW file's
thumbnails rendered within the budget (its embedded preview, or LibRaw's half-size development, as its cost model
says), its original sent as it is with its RAW content type, its information panel from its own header (camera,
date, size, format), an upload of a RAW file searched (recognised by its file name) finding its JPEG, and the
duplicates page reporting each pair as one photograph in two formats that an action leaves alone unless named."""

from __future__ import annotations

import io

import httpx
import pytest
from PIL import Image
from raw_photos import DATE, MODEL, raw_library
from web_support import ServerThread, assert_error

from retrieval.app.index import Index
from retrieval.features.image import decode_cost, display_cost

BUDGET_MB = 120   # 60 MB per upload


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("raw-served")
    lib = raw_library(d / "photos")
    idx = Index.create(d / "idx", preset="default")
    report = idx.sync(d / "photos", workers=1)
    idx.close()
    assert [p for p, _ in report.errors] == [lib["broken"]]
    server = ServerThread(d / "idx", max_decode_mb=BUDGET_MB)
    client = httpx.Client(base_url=server.url, timeout=300)
    page = client.get("/api/images", params={"limit": 1000}).json()
    ids = {im["path"]: im["id"] for im in page["images"]}
    yield server, client, lib, ids
    client.close()
    server.stop()


def test_raw_thumbnails_are_rendered_within_the_budget(served):
    server, client, lib, ids = served
    svc = server.service
    for raw, jpeg in lib["pairs"]:
        for size, side in (("small", 320), ("large", 1024)):
            cost = display_cost(raw, side)
            assert cost.format == "DNG" and cost.bytes <= svc.budget.max_bytes
            t = client.get(f"/api/images/{ids[raw]}/thumbnail", params={"size": size})
            assert t.status_code == 200, (raw, size, t.text)
            assert t.headers["content-type"] == "image/jpeg"
            with Image.open(io.BytesIO(t.content)) as thumb, Image.open(jpeg) as photo:
                # upright as the JPEG of the same shot is shown (its EXIF orientation applied to both)
                turned = photo.getexif().get(0x0112) in (5, 6, 7, 8)
                w, h = (photo.height, photo.width) if turned else photo.size
                assert max(thumb.size) == min(side, 2 * max(w, h))
                assert (thumb.width > thumb.height) == (w > h)
    assert svc.budget.peak <= svc.budget.max_bytes and svc.budget.in_use == 0


def test_the_original_is_sent_as_it_is(served):
    _, client, lib, ids = served
    raw, _ = lib["pairs"][0]
    r = client.get(f"/api/images/{ids[raw]}/original")
    assert r.status_code == 200 and r.headers["content-type"] == "image/x-adobe-dng"
    assert r.content == open(raw, "rb").read()
    assert 'filename="IMG_0001.DNG"' in r.headers["content-disposition"]


def test_the_information_panel_of_a_raw_file(served):
    _, client, lib, ids = served
    raw, _ = lib["pairs"][0]                      # 3424 x 2736 photosites, orientation 6
    facts = client.get(f"/api/images/{ids[raw]}/facts").json()
    assert facts["format"] == "DNG" and facts["camera"] == MODEL and facts["content_type"] == "image/x-adobe-dng"
    assert facts["date"] == DATE.replace(":", "-", 2).replace(" ", "T")
    assert (facts["width"], facts["height"]) == (2736, 3424) and facts["orientation"] == 6


def test_an_uploaded_raw_file_finds_its_jpeg(served):
    server, client, lib, ids = served
    raw, jpeg = lib["pairs"][1]                   # no preview: developed at half size within the upload's budget
    assert decode_cost(raw).bytes <= server.service.budget.per_request
    with open(raw, "rb") as fh:
        r = client.post("/api/search", files={"image": ("IMG_0002.DNG", fh.read(), "image/x-adobe-dng")},
                        data={"k": 3})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert [h["id"] for h in hits[:2]] == [ids[raw], ids[jpeg]] and hits[1]["verified"]


def test_the_duplicates_page_keeps_both_formats(served):
    _, client, lib, ids = served
    groups = client.get("/api/duplicates").json()["groups"]
    formats = {tuple(sorted(im["id"] for im in g["images"])): g for g in groups if g["kind"] == "formats"}
    assert set(formats) == {tuple(sorted((ids[r], ids[j]))) for r, j in lib["pairs"]}
    plan = client.post("/api/duplicates/action", json={"action": "trash"}).json()
    assert plan["files"] == 0
    assert_error(client.post("/api/duplicates/action", json={"action": "trash", "kinds": ["formats"]}), 400)
    g = next(iter(formats.values()))
    named = client.post("/api/duplicates/action", json={"action": "trash", "kinds": ["formats"],
                                                        "groups": [g["group"]]}).json()
    assert named["files"] == 1 and named["confirmed"] is False
