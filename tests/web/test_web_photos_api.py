"""Folders, the accent-insensitive filter, originals by id, the information panel, uploads under their own names
(HEIC included) and the favicon, through a real HTTP client (httpx) against a running server on 127.0.0.1; the
guard (foreign Host, token, cross-site) on the new routes."""

from __future__ import annotations

import io
from pathlib import Path
from urllib.parse import unquote

import httpx
import numpy as np
import pytest
from helpers import copy_index
from photo_world import EXIF_DATE, EXIF_MODEL, EXIF_PHOTO, HEIC_PHOTO, LAYOUT, heic_bytes, photo_world  # noqa: F401
from web_support import ServeProcess, ServerThread, assert_error, textured

from retrieval.web.folders import fold


@pytest.fixture(scope="module")
def served(photo_world, tmp_path_factory):  # noqa: F811
    index = copy_index(photo_world["index"], tmp_path_factory.mktemp("photos-api") / "index")
    server = ServerThread(index)
    client = httpx.Client(base_url=server.url, timeout=120)
    yield server, index, client, photo_world
    client.close()
    server.stop()


def ids_by_rel(client, photos: Path) -> dict:
    page = client.get("/api/images", params={"limit": 1000}).json()
    return {str(Path(im["path"]).relative_to(photos)): im["id"] for im in page["images"]
            if Path(im["path"]).is_relative_to(photos)}



def rels(client, photos, **params) -> set:
    page = client.get("/api/images", params={"limit": 1000, **params})
    assert page.status_code == 200, page.text
    return {str(Path(im["path"]).relative_to(photos)) for im in page.json()["images"]}


def disposition_name(header: str) -> str:
    """The file name a client takes from ``Content-Disposition`` (``filename*`` first, RFC 6266)."""
    params = dict(p.strip().split("=", 1) for p in header.split(";")[1:])
    if "filename*" in params:
        charset, _, value = params["filename*"].split("'", 2)
        assert charset.upper() == "UTF-8"
        return unquote(value, encoding="utf-8")
    return params["filename"].strip('"')


# ---------------------------------------------------------------------------------------------- originals
def test_original_by_id_bytes_and_headers(served):
    _, _, client, world = served
    ids = ids_by_rel(client, world["photos"])
    for rel, ctype in (("été/île aux poissons.jpg", "image/jpeg"), ("montagne/cascade*.jpg", "image/jpeg"),
                       ("objets/box in scene.png", "image/png"), (HEIC_PHOTO, "image/heic")):
        for download, kind in ((False, "inline"), (True, "attachment")):
            r = client.get(f"/api/images/{ids[rel]}/original", params={"download": "1"} if download else {})
            assert r.status_code == 200, r.text
            assert r.content == world["paths"][rel].read_bytes(), rel
            assert r.headers["content-type"] == ctype and r.headers["x-content-type-options"] == "nosniff"
            cd = r.headers["content-disposition"]
            assert cd.split(";")[0] == kind and disposition_name(cd) == Path(rel).name, cd
            assert cd.isascii() and 'filename="' in cd
    cd = client.get(f"/api/images/{ids['été/île aux poissons.jpg']}/original").headers["content-disposition"]
    assert cd == ("inline; filename=\"ile aux poissons.jpg\"; "
                  "filename*=UTF-8''%C3%AEle%20aux%20poissons.jpg")


def test_original_unknown_ids_and_no_path(served):
    _, _, client, world = served
    ids = ids_by_rel(client, world["photos"])
    assert_error(client.get("/api/images/987654/original"), 404, "987654")
    assert_error(client.get(f"/api/images/{1 << 70}/original"), 404)
    assert_error(client.get("/api/images/abc/original"), 400)
    secret = world["paths"]["bateau.jpg"]
    # a path is never taken: not as a parameter, not in place of the id
    one = ids["objets/box.png"]
    assert_error(client.get(f"/api/images/{one}/original", params={"path": str(secret)}), 400, "'path'")
    assert_error(client.get(f"/api/images/{one}/original", params={"file": "../../etc/passwd"}), 400, "'file'")
    assert_error(client.get("/api/images/original", params={"path": str(secret)}), 400)
    for weird in ("..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "-1"):
        r = client.get(f"/api/images/{weird}/original")
        assert r.status_code in (400, 404) and "root:" not in r.text, (weird, r.status_code)
    # a photo whose file is gone: 404 with a sentence
    gone = world["paths"]["bateau.jpg"]
    kept = gone.read_bytes()
    gone.unlink()
    try:
        assert_error(client.get(f"/api/images/{ids['bateau.jpg']}/original"), 404, "no longer on disk")
    finally:
        gone.write_bytes(kept)


def test_guard_applies_to_the_new_routes(served, photo_world, tmp_path):  # noqa: F811
    server, _, client, world = served
    one = ids_by_rel(client, world["photos"])["objets/box.png"]
    new_routes = (f"/api/images/{one}/original", f"/api/images/{one}/facts", "/api/folders", "/favicon.ico",
                  "/?folder=photos")
    for url in new_routes:
        assert client.get(url).status_code == 200, url
        assert_error(client.get(url, headers={"Host": "evil.example:80"}), 421, "evil.example")
    # a page of another site (or another port of this machine) gets no pixels; this server's pages and typed URLs do
    for site in ("cross-site", "same-site"):
        for url in (f"/api/images/{one}/original", f"/api/images/{one}/thumbnail"):
            assert_error(client.get(url, headers={"Sec-Fetch-Site": site}), 403, site)
    for site in ("same-origin", "none"):
        assert client.get(f"/api/images/{one}/original", headers={"Sec-Fetch-Site": site}).status_code == 200
    # an upload from a page of another site is refused before anything is kept
    r = client.post("/api/images", files={"image": ("x.heic", heic_bytes(3), "image/heic")},
                    headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert_error(r, 403, "cross-site")
    # the token, when the server has one, is needed on them too
    index = copy_index(photo_world["index"], tmp_path / "index")
    locked = ServerThread(index, token="s3cret")
    try:
        with httpx.Client(base_url=locked.url, timeout=60) as c:
            for url in new_routes:
                assert_error(c.get(url), 401, "token")
            ok = c.get(f"/api/images/{one}/original", headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200 and ok.content == world["paths"]["objets/box.png"].read_bytes()
    finally:
        locked.stop()


# ---------------------------------------------------------------------------------------------- folders, filter
def test_folders_and_folder_pages(served):
    _, _, client, world = served
    photos = world["photos"]
    tree = client.get("/api/folders").json()
    by_path = {f["path"]: f for f in tree["folders"]}
    assert tree["folders"][0]["path"] == "photos" and by_path["photos"]["total"] == len(LAYOUT)
    assert by_path["photos"]["photos"] == 2   # manège.png, bateau.jpg
    assert by_path["photos/voyages"] == {"path": "photos/voyages", "name": "voyages", "parent": "photos",
                                         "photos": 0, "total": 3,
                                         "children": ["photos/voyages/Croatie", "photos/voyages/Égypte",
                                                      "photos/voyages/Syrie"]}
    assert by_path["photos/été"]["photos"] == 3 and by_path["photos/téléphone"]["total"] == 1
    order = [f["path"] for f in tree["folders"]]
    assert all(order.index(f["parent"]) < order.index(f["path"]) for f in tree["folders"] if f["parent"])
    assert rels(client, photos, folder="photos/été") == {r for r in LAYOUT if r.startswith("été/")}
    assert rels(client, photos, folder="photos") == {"manège.png", "bateau.jpg"}
    assert rels(client, photos, folder="photos/voyages") == set()                  # nothing directly in it
    under = {r for r in LAYOUT if r.startswith("voyages/")}
    assert rels(client, photos, folder="photos/voyages", q="YR") == (   # in its sub-folders, with q
        under if "yr" in fold(str(photos)) else {"voyages/Égypte/pyramide.jpg", "voyages/Syrie/palmyre.jpg"})
    assert_error(client.get("/api/images", params={"folder": "photos/nowhere"}), 404, "photos/nowhere")
    assert_error(client.get("/", params={"folder": "/etc"}), 404)
    # keyset pages of one folder: every photo once, in id order
    pages = [client.get("/api/images", params={"folder": "photos/été", "limit": 2}).json()]
    while pages[-1]["next"]:
        pages.append(client.get("/api/images", params={"folder": "photos/été", "limit": 2,
                                                       "after": pages[-1]["next"]}).json())
    ids = [im["id"] for p in pages for im in p["images"]]
    assert len(pages) == 2 and ids == sorted(ids) and len(set(ids)) == 3 and pages[0]["total"] == 3
    back = client.get("/api/images", params={"folder": "photos/été", "limit": 2, "before": pages[1]["prev"]}).json()
    assert back["images"] == pages[0]["images"] and back["prev"] is None
    # the page: breadcrumbs, the sub-folders, tiles showing folder and name
    html = client.get("/", params={"folder": "photos/voyages/Égypte"}).text
    assert 'href="/?folder=photos/voyages"' in html and "<b>Égypte</b>" in html
    assert html.count('class="tile"') == 1 and "pyramide.jpg" in html
    top = client.get("/").text
    assert 'data-folder="photos/voyages"' in top and 'id="duplicates-link" href="/duplicates"' in top
    assert '<span class="folder">photos/montagne</span>' in top and '<span class="name">cascade*.jpg</span>' in top


def test_filter_ignores_accents_and_case(served):
    _, _, client, world = served
    photos = world["photos"]
    prefix = fold(str(photos))   # the folder holding the photos is part of every path

    def expected(needle, names):
        return set(LAYOUT) if fold(needle) in prefix else set(names)

    summer = {r for r in LAYOUT if r.startswith("été/")}
    for q in ("ete", "ÉTÉ", "été", "Ete"):
        assert rels(client, photos, q=q) == expected(q, summer), q
    assert rels(client, photos, q="egypte") == expected("egypte", {"voyages/Égypte/pyramide.jpg"})
    assert rels(client, photos, q="ILE AUX") == expected("ile aux", {"été/île aux poissons.jpg"})
    assert rels(client, photos, q="manege") == expected("manege", {"manège.png"})
    assert rels(client, photos, q="cascade*") == expected("cascade*", {"montagne/cascade*.jpg"})
    assert rels(client, photos, q="box in") == expected("box in", {"objets/box in scene.png"})
    assert rels(client, photos, q="ete", folder="photos/montagne") == expected("ete", set()) & {
        r for r in LAYOUT if r.startswith("montagne/")}
    page = client.get("/api/images", params={"q": "ete"}).json()
    assert page["total"] == len(page["images"]) and page["q"] == "ete"
    assert client.get("/", params={"q": "egypte"}).text.count('class="tile"') == len(expected("egypte", {1}))


# ---------------------------------------------------------------------------------------------- the panel
def test_information_panel(served):
    _, _, client, world = served
    ids = ids_by_rel(client, world["photos"])
    facts = client.get(f"/api/images/{ids[EXIF_PHOTO]}/facts").json()
    stored = world["paths"][EXIF_PHOTO]
    from PIL import Image

    w, h = Image.open(stored).size   # as stored (turned); displayed with the orientation applied
    assert (facts["width"], facts["height"]) == (h, w) and facts["orientation"] == 6
    assert facts["orientation_text"] == "6 (rotated 90° clockwise)"
    assert facts["date"] == EXIF_DATE.replace(":", "-", 2).replace(" ", "T") and facts["camera"] == EXIF_MODEL
    assert facts["bytes"] == stored.stat().st_size and facts["format"] == "JPEG" and facts["n_features"] > 100
    assert facts["folder"] == "photos/été" and facts["name"] == "plage 1.jpg"
    heic = client.get(f"/api/images/{ids[HEIC_PHOTO]}/facts").json()
    assert heic["format"] == "HEIF" and heic["content_type"] == "image/heic" and heic["error"] is None
    page = client.get("/query", params={"id": ids[EXIF_PHOTO]}).text
    for text in ("2023-07-14 18:32:05", EXIF_MODEL, "rotated 90° clockwise", f"{h} &times; {w} pixels",
                 f'href="/api/images/{ids[EXIF_PHOTO]}/original"', "?download=1"):
        assert text in page, text
    assert_error(client.get("/api/images/987654/facts"), 404)


def test_search_results_name_their_folders(served):
    _, _, client, world = served
    ids = ids_by_rel(client, world["photos"])
    res = client.post("/api/search", data={"id": ids["objets/box in scene.png"], "k": 4}).json()
    assert res["folders"][str(ids["objets/box.png"])] == "photos/objets"
    assert set(res["folders"]) == {str(h["id"]) for h in res["hits"]}
    assert all(f is not None and f.startswith("photos") for f in res["folders"].values())


def test_favicon(served):
    _, _, client, _ = served
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    import xml.etree.ElementTree as ET

    assert ET.fromstring(icon.content).tag == "{http://www.w3.org/2000/svg}svg"
    assert client.get("/static/favicon.svg").content == icon.content
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in client.get("/").text


# ---------------------------------------------------------------------------------------------- uploads
def test_uploads_keep_their_names_safely(served):
    from PIL import Image

    _, index, client, world = served
    uploads = index.resolve() / "uploads"

    def jpeg(seed):
        buf = io.BytesIO()
        Image.fromarray(textured(seed, (300, 220))).save(buf, format="JPEG", quality=90)
        return buf.getvalue()

    first = client.post("/api/images", files={"image": ("vacances à Nice.jpg", jpeg(40), "image/jpeg")})
    assert first.status_code == 201, first.text
    assert Path(first.json()["image"]["path"]) == uploads / "vacances à Nice.jpg"
    other = client.post("/api/images", files={"image": ("vacances à Nice.jpg", jpeg(41), "image/jpeg")})
    assert Path(other.json()["image"]["path"]) == uploads / "vacances à Nice (2).jpg"   # taken: a new name
    assert (uploads / "vacances à Nice.jpg").read_bytes() == jpeg(40)                  # not replaced
    again = client.post("/api/images", files={"image": ("autre nom.jpg", jpeg(40), "image/jpeg")})
    assert again.status_code == 200 and again.json()["image"]["id"] == first.json()["image"]["id"]
    for seed, (sent, stored) in enumerate((("../../../evil.jpg", "evil.jpg"), ("..\\..\\win*.jpg", "win*.jpg"),
                                           (".hidden.jpg", "hidden.jpg"), ("notes.txt", "notes.txt.jpg"),
                                           ("photo.png", "photo.jpg")), start=50):
        r = client.post("/api/images", files={"image": (sent, jpeg(seed), "image/jpeg")})
        assert r.status_code == 201, (sent, r.text)
        assert Path(r.json()["image"]["path"]) == uploads / stored, sent
    assert sorted(p.name for p in uploads.iterdir() if p.is_file()) == sorted(
        ["vacances à Nice.jpg", "vacances à Nice (2).jpg", "evil.jpg", "win*.jpg", "hidden.jpg", "notes.txt.jpg",
         "photo.jpg"])
    assert not (index.parent / "evil.jpg").exists() and not Path("/evil.jpg").exists()
    found = client.get("/api/images", params={"q": "VACANCES A NICE"}).json()["images"]
    assert {Path(im["path"]).name for im in found} == {"vacances à Nice.jpg", "vacances à Nice (2).jpg"}
    assert "uploads" in {f["path"] for f in client.get("/api/folders").json()["folders"]}


def test_heic_upload_in_a_fresh_server_process(photo_world, tmp_path):  # noqa: F811
    """A HEIC photo uploaded to a server that has opened no HEIC file yet: searched with, added under its name, its
    thumbnail drawn, its original sent as it is."""
    from PIL import Image

    index = copy_index(photo_world["index"], tmp_path / "index")
    proc = ServeProcess(index, "--threads", "1")
    try:
        c = proc.client
        data = heic_bytes(9)
        r = c.post("/api/search", files={"image": ("IMG_2041.HEIC", data, "image/heic")}, data={"k": 3})
        assert r.status_code == 200, r.text
        r = c.post("/api/images", files={"image": ("Soirée d'été.HEIC", data, "image/heic")})
        assert r.status_code == 201, r.text
        rec = r.json()["image"]
        assert Path(rec["path"]).name == "Soirée d'été.HEIC" and (rec["width"], rec["height"]) == (360, 264)
        thumb = c.get(f"/api/images/{rec['id']}/thumbnail")
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
        im = np.asarray(Image.open(io.BytesIO(thumb.content)).convert("RGB"), float)
        assert im.shape[:2] == (235, 320) and im.std() > 30   # the picture, not a blank
        orig = c.get(f"/api/images/{rec['id']}/original", params={"download": "true"})
        assert orig.content == data and orig.headers["content-type"] == "image/heic"
        assert disposition_name(orig.headers["content-disposition"]) == "Soirée d'été.HEIC"
        assert [im["id"] for im in c.get("/api/images", params={"q": "soiree d'ete"}).json()["images"]] == [rec["id"]]
        # the HEIC photo of the index: its thumbnail too
        heic_id = next(im["id"] for im in c.get("/api/images", params={"q": "IMG_0001"}).json()["images"])
        assert c.get(f"/api/images/{heic_id}/thumbnail", params={"size": "large"}).status_code == 200
    finally:
        proc.stop()
