"""The same pair gets the same verdict everywhere: every hit (verified or not) of 14 box and whole-image queries
is checked again by :meth:`Index.match` and by ``POST /api/match`` on a running server (what the page's match view
draws), and the first verified and first unverified hit of every 4th query by ``retrieval match --index`` (a new
process's work each time): the verified flag, the inliers and the box must be those of the list.

Two indexes share one feature store: ``default`` (a global preset: ratio tests on RootSIFT reduced by its local
PCA) and ``object`` (RootSIFT ratio tests, its own threshold). Images: the demo photos and their generated views,
Oxford query crops with the photos that show their building (and hard negatives), and CMP homography pairs.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from click.testing import CliRunner
from conftest import shared_path
from helpers import make_pool
from web_support import ServerThread

from retrieval.app.index import Index
from retrieval.cli.main import main as cli

CROPS = ("o15", "o25", "o40")
HOMOGR = ("BruggeTower", "Boston", "graf")
K = 10


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    oxford = shared_path("real", "oxford133", "jpg")
    crops = shared_path("real", "oxford_crops")
    homogr = shared_path("homogr")
    root = tmp_path_factory.mktemp("verdict")
    photos = root / "photos"
    photos.mkdir()
    pool = make_pool(root / "pool", side=320)
    for p in pool:
        shutil.copy(p, photos / p.name)
    for c in CROPS:
        names = (crops / f"{c}_TP.txt").read_text().split() + (crops / f"{c}_FP.txt").read_text().split()[:2]
        for n in names:
            if (oxford / f"{n}.jpg").exists():
                shutil.copy(oxford / f"{n}.jpg", photos / f"{n}.jpg")
    pairs = {}
    for h in HOMOGR:
        found = sorted(homogr.glob(f"{h}[AB].*"))
        for p in found:
            shutil.copy(p, photos / p.name)
        pairs[h] = [photos / p.name for p in found]
    store = root / "features"
    indexes = {}
    for preset in ("default", "object"):
        idx = Index.create(root / f"index-{preset}", preset, feature_store=store,
                           train_on="generic")   # the shipped model: no training step for these photos
        report = idx.sync(photos, workers=2)
        assert not report.errors, report.errors
        indexes[preset] = idx
    # 14 queries: 4 whole demo photos and 2 boxes in them, the 3 crops (whole: a crop is the object), 3 homogr
    # images whole and 2 boxes
    queries = [(str(p), None) for p in pool[:4]]
    for p in pool[:2]:
        queries.append((str(p), _central_box(p)))
    queries += [(str(crops / f"{c}.jpg"), None) for c in CROPS]
    queries += [(str(pairs[h][0]), None) for h in HOMOGR]
    queries += [(str(pairs[h][0]), _central_box(pairs[h][0])) for h in HOMOGR[:2]]
    assert len(queries) == 14
    yield indexes, queries
    for idx in indexes.values():
        idx.close()


def _central_box(path) -> str:
    from PIL import Image

    with Image.open(path) as im:
        w, h = im.size
    return f"{w * 0.15:.0f},{h * 0.15:.0f},{w * 0.85:.0f},{h * 0.85:.0f}"


def verdict_of_hit(h: dict) -> tuple:
    return (h["verified"], h.get("inliers") if h["verified"] else None, h.get("box") if h["verified"] else None)


def verdict_of_match(d: dict) -> tuple:
    return (d["verified"], d["inliers"] if d["verified"] else None, d["box"] if d["verified"] else None)


@pytest.mark.parametrize("preset", ["default", "object"])
def test_match_api_and_cli_agree_with_the_ranked_list(world, preset):
    from retrieval.app.matches import match_record

    indexes, queries = world
    idx = indexes[preset]
    server = ServerThread(idx.path)
    n_verified = n_unverified = 0
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for n, (image, box) in enumerate(queries):
                hits = [h.to_json() for h in idx.search(image, bbox=box, k=K)]
                query = idx.query(image, box)
                cli_checked = set() if n % 4 == 0 else {True, False}   # the command line: every 4th query
                for h in hits:
                    want = verdict_of_hit(h)
                    m = idx.match(query, h["id"])
                    lib = match_record(m, b_id=h["id"], b_path=h["path"], box_given=box is not None)
                    assert verdict_of_match(lib) == want, (image, box, h)
                    data = {"b_id": h["id"], **({"box": box} if box else {})}
                    if query.image_id is not None:   # an indexed image: by id, as the page asks
                        r = http.post("/api/match", data={**data, "a_id": query.image_id})
                    else:
                        with open(image, "rb") as fh:
                            r = http.post("/api/match", data=data, files={"a_image": ("q.jpg", fh.read())})
                    assert r.status_code == 200, r.text
                    assert verdict_of_match(r.json()) == want, (image, box, h, r.json())
                    if want[0] not in cli_checked:   # the first verified and the first unverified hit of a query
                        args = ["match", image, str(h["id"]), "--index", str(idx.path), "--format", "json"]
                        res = CliRunner().invoke(cli, [*args, *(["--bbox", box] if box else [])])
                        assert res.exit_code == (0 if want[0] else 1), res.output
                        assert verdict_of_match(json.loads(res.output)) == want, (image, box, h)
                        cli_checked.add(want[0])
                    n_verified += want[0]
                    n_unverified += not want[0]
    finally:
        server.stop()
    assert n_verified >= 20 and n_unverified >= 20, (n_verified, n_unverified)
