"""Every readable format end to end: a folder holding a HEIC, an AVIF, an animated GIF and a JPEG stored sideways
with an EXIF orientation is indexed (``retrieval index``), and each photo, re-encoded in the same format outside the
folder, is found at rank 1 by ``retrieval query``."""

from __future__ import annotations

import json

import pytest
from cli_world import run
from conftest import FEATURE_CACHE
from helpers import make_pool, small_preset
from PIL import Image

from retrieval.app.index import Index


def sideways_jpeg(im: Image.Image, path, quality: int) -> None:
    """``im`` stored as a camera held sideways stores it: pixels turned, EXIF orientation 6 to show them upright."""
    exif = Image.Exif()
    exif[0x0112] = 6
    im.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif.tobytes(), quality=quality)


def animated_gif(first: Image.Image, second: Image.Image, path) -> None:
    first.save(path, save_all=True, append_images=[second.resize(first.size)], duration=200, loop=0)


@pytest.fixture(scope="module")
def formats_world(tmp_path_factory):
    import pillow_heif  # a dependency (pyproject.toml)

    pillow_heif.register_heif_opener()
    d = tmp_path_factory.mktemp("formats")
    pool = make_pool(d / "pool")[:17]   # the 17 distinct photos (the generated views come after them)
    photos, queries = d / "photos", d / "queries"
    photos.mkdir()
    queries.mkdir()
    src = {p.stem: Image.open(p).convert("RGB") for p in pool}
    names = sorted(src)
    # photos with enough features at 200 pixels; the turned one is not square
    heic, avif, gif, turned, other = names[2], names[11], names[1], names[12], names[6]
    for name in names:
        if name not in (heic, avif, gif, turned):
            src[name].save(photos / f"{name}.jpg", quality=90)
    indexed = {"heic": photos / "chat été.heic", "avif": photos / "fusée #1.avif", "gif": photos / "anim.gif",
               "exif": photos / "IMG_0001.JPG"}
    src[heic].save(indexed["heic"], quality=90)
    src[avif].save(indexed["avif"], quality=90)
    animated_gif(src[gif], src[other], indexed["gif"])
    sideways_jpeg(src[turned], indexed["exif"], 92)
    # the queries: the same photos encoded again, outside the folder
    outside = {"heic": queries / "q.HEIC", "avif": queries / "q.avif", "gif": queries / "q.gif",
               "exif": queries / "q_upright.jpg", "exif_sideways": queries / "q_sideways.jpg"}
    src[heic].save(outside["heic"], quality=60)
    src[avif].save(outside["avif"], quality=60)
    # frame 0 is the photo, frame 1 another indexed photo: only the first frame may be read
    animated_gif(src[gif].quantize(64).convert("RGB"), src[other], outside["gif"])
    src[turned].save(outside["exif"], quality=70)
    sideways_jpeg(src[turned], outside["exif_sideways"], 70)
    preset = d / "p.json"
    preset.write_text(json.dumps(small_preset("formats-small")))
    idx = d / "idx"
    res = run(["-q", "index", photos, "--index", idx, "--preset", preset, "--feature-store", FEATURE_CACHE,
               "--workers", "1"])
    assert res.exit_code == 0, res.output
    return {"index": str(idx), "indexed": indexed, "outside": outside, "n": len(names),
            "size": src[turned].size}


def test_every_format_is_indexed(formats_world):
    idx = Index.open(formats_world["index"])
    try:
        rows = {r["path"]: r for r in idx.catalog.rows()}
    finally:
        idx.close()
    assert len(rows) == formats_world["n"]
    for kind, path in formats_world["indexed"].items():
        row = rows[str(path)]
        assert row["status"] == "indexed" and row["n_features"] > 20, (kind, row)
    turned = rows[str(formats_world["indexed"]["exif"])]
    w, h = formats_world["size"]
    assert w != h and (turned["width"], turned["height"]) == (w, h)   # as displayed, not as stored


@pytest.mark.parametrize("kind,query", [("heic", "heic"), ("avif", "avif"), ("gif", "gif"), ("exif", "exif"),
                                        ("exif", "exif_sideways")])
def test_each_format_queried_from_outside_is_found_first(formats_world, kind, query):
    res = run(["query", formats_world["outside"][query], "--index", formats_world["index"], "--format", "json",
               "-k", "3"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)
    assert hits[0]["path"] == str(formats_world["indexed"][kind]), hits
