"""Decoding in the server, against a running uvicorn server on 127.0.0.1 with a small decode budget: every photo the
server accepts gets its thumbnails (decoded reduced, within the budget, whatever its format); an upload searched,
matched or added is decoded once per request; an input that breaks a decoder (a PNG text or ICC chunk that decompresses past
Pillow's limit, truncated or corrupt files) is answered in one line with a 4xx status, never a 500."""

from __future__ import annotations

import io
import struct
import zlib

import httpx
import numpy as np
import pytest
from PIL import Image
from web_support import assert_error, served_copy, textured, web_base  # noqa: F401

from retrieval.features.image import decode_cost, display_cost
from retrieval.web.budget import DecodeBudget
from retrieval.web.uploads import ApiError

BUDGET_MB = 200   # 100 MB per upload


@pytest.fixture(scope="module")
def served(web_base, tmp_path_factory):  # noqa: F811
    server, index = served_copy(web_base, tmp_path_factory, max_decode_mb=BUDGET_MB)
    client = httpx.Client(base_url=server.url, timeout=300)
    yield server, index, client
    client.close()
    server.stop()


def encoded(img, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, **kw)
    return buf.getvalue()


def photo_pixels(w: int, h: int, seed: int, bands: int = 3) -> np.ndarray:
    """A large photo-like image (a textured tile repeated, smooth shading): compresses to a few MB."""
    tile = textured(seed, size=(480, 360))
    reps = (-(-h // 360), -(-w // 480), 1)
    arr = np.tile(tile, reps)[:h, :w].astype(np.uint16)
    arr = (arr * (np.linspace(0.6, 1.0, w, dtype=np.float32)[None, :, None])).astype(np.uint8)
    if bands == 4:
        alpha = np.full((h, w, 1), 255, np.uint8)
        alpha[: h // 4, : w // 4] = 0
        arr = np.concatenate([arr, alpha], axis=2)
    return arr


def test_every_accepted_photo_gets_its_thumbnails_within_the_budget(served, tmp_path):
    server, _, client = served
    svc = server.service
    uploads = {
        # 12 MP RGBA: 216 MB to thumbnail when it was converted in one piece (over the whole budget), 80 MB now
        "big_rgba.png": encoded(Image.fromarray(photo_pixels(4000, 3000, 1, bands=4), "RGBA"), format="PNG",
                                compress_level=1),
        "big_rgba.tif": encoded(Image.fromarray(photo_pixels(4000, 3000, 2, bands=4), "RGBA"), format="TIFF",
                                compression="tiff_adobe_deflate"),
        "big_gray16.png": encoded(Image.fromarray(photo_pixels(4000, 3000, 3)[..., 0].astype(np.uint16) * 257),
                                  format="PNG", compress_level=1),
        "big_progressive.jpg": encoded(Image.fromarray(photo_pixels(4000, 3000, 4)), format="JPEG", quality=90,
                                       progressive=True),
        "lossless.webp": encoded(Image.fromarray(photo_pixels(1600, 1200, 5, bands=4), "RGBA"), format="WEBP",
                                 lossless=True, quality=0, method=0),
        "rgb.avif": encoded(Image.fromarray(photo_pixels(2000, 1500, 6)), format="AVIF", quality=60, speed=10),
    }
    for name, data in uploads.items():
        r = client.post("/api/images", files={"image": (name, data)})
        assert r.status_code == 201, (name, r.text)
        record = r.json()["image"]
        stored = record["path"]
        assert decode_cost(stored).bytes <= svc.budget.per_request   # what was accepted
        for size, side in (("small", 320), ("large", 1024)):
            assert display_cost(stored, side).bytes <= svc.budget.max_bytes
            t = client.get(f"/api/images/{record['id']}/thumbnail", params={"size": size})
            assert t.status_code == 200, (name, size, t.text)
            with Image.open(io.BytesIO(t.content)) as thumb:
                assert thumb.format == "JPEG" and max(thumb.size) == side, (name, thumb.size)
                if name == "big_rgba.png":   # the transparent corner is white, the EXIF-less photo upright
                    assert thumb.getpixel((2, 2)) == pytest.approx((255, 255, 255), abs=3)
    assert svc.budget.peak <= svc.budget.max_bytes and svc.budget.in_use == 0
    # over the per-upload limit from its header: refused, nothing added, nothing decoded
    huge = encoded(Image.new("RGB", (6000, 4000), (90, 120, 150)), format="WEBP", quality=50)
    before = client.get("/api/info").json()["indexed"]
    r = client.post("/api/images", files={"image": ("huge.webp", huge)})
    assert_error(r, 413, "huge.webp", "MB to decode", "--max-decode-mb")
    assert client.get("/api/info").json()["indexed"] == before


def test_an_upload_is_decoded_once_per_request(served, decodes):
    _, _, client = served
    ids = [im["id"] for im in client.get("/api/images", params={"limit": 3}).json()["images"]]
    upload = encoded(Image.fromarray(textured(77, size=(696, 516))), format="PNG")
    for data, route in (({"k": "5"}, "/api/search"), ({"k": "5", "box": "100,100,600,400"}, "/api/search"),
                        ({"b_id": str(ids[0])}, "/api/match")):
        decodes.clear()
        field = "image" if route == "/api/search" else "a_image"
        r = client.post(route, files={field: ("q.png", upload)}, data=data)
        assert r.status_code == 200, r.text
        assert decodes.count((696, 516)) == 1, (route, data, decodes)
    # added: checked, then indexed from the features its check extracted (stored by content hash)
    decodes.clear()
    r = client.post("/api/images", files={"image": ("added.png", encoded(Image.fromarray(textured(78, size=(696, 516))),
                                                                          format="PNG"))})
    assert r.status_code == 201, r.text
    assert decodes.count((696, 516)) == 1, decodes
    assert client.delete(f"/api/images/{r.json()['image']['id']}").status_code == 200


def test_the_sideways_fallback_turns_an_uploads_decoded_image(tmp_path):
    """A whole-image upload that verifies nothing is searched turned sideways (the preset key
    ``search.rotation_fallback``) from the working image its check decoded, not from its file."""
    from retrieval.app.query import Query
    from retrieval.app.rotations import with_rotations
    from retrieval.features import LoadedImage

    path = tmp_path / "q.png"
    path.write_bytes(b"an upload")
    loaded = LoadedImage.from_array(textured(3, size=(120, 96)))

    class Extractor:
        turned = []

        def load(self, _path):
            raise AssertionError("the upload's file was decoded again")

        def __call__(self, image):
            self.turned.append(image.pixels.shape)
            return image.pixels.shape

    query = Query(features=None, box=(0, 0, 120, 96), whole=True, all_features=None, path=str(path), loaded=loaded)
    extractor = Extractor()
    assert with_rotations([], query, {}, 5, extractor, lambda features: []) == []
    assert extractor.turned == [(120, 96), (120, 96)]   # turned by 90 and 270 degrees


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_with(kind: bytes, payload: bytes) -> bytes:
    """A small PNG with one more chunk before its pixels."""
    png = encoded(Image.fromarray(textured(5, size=(240, 180))), format="PNG")
    return png[:33] + chunk(kind, payload) + png[33:]   # after the signature and IHDR


def broken_inputs() -> dict:
    bomb = zlib.compress(b"\0" * (64 << 20), 9)   # 64 MB of zeros in 64 KB: past Pillow's 1 MB per text chunk
    jpeg = encoded(Image.fromarray(textured(6)), format="JPEG", quality=90)
    webp = encoded(Image.fromarray(textured(7)), format="WEBP", quality=80)
    tiff = encoded(Image.fromarray(textured(8)), format="TIFF", compression="tiff_lzw")
    png = encoded(Image.fromarray(textured(9)), format="PNG")
    return {
        "ztxt_bomb.png": (png_with(b"zTXt", b"Comment\0\0" + bomb), 413),
        "itxt_bomb.png": (png_with(b"iTXt", b"Comment\0\1\0\0\0" + bomb), 413),
        "iccp_bomb.png": (png_with(b"iCCP", b"icc\0\0" + bomb), 413),
        "truncated.jpg": (jpeg[: len(jpeg) // 2], 400),
        "truncated.webp": (webp[: len(webp) // 2], 400),
        "truncated.png": (png[: len(png) // 2], 400),
        "bad_ifd.tif": (tiff[:8] + b"\xff" * 64 + tiff[72:], 400),
        "garbage.png": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, 400),
    }


@pytest.mark.parametrize("name", list(broken_inputs()))
def test_an_input_that_breaks_a_decoder_is_answered_in_one_line(served, name):
    _, _, client = served
    data, _status = broken_inputs()[name]
    some_id = client.get("/api/images", params={"limit": 1}).json()["images"][0]["id"]
    for route, field, extra in (("/api/search", "image", {}), ("/api/images", "image", {}),
                                ("/api/match", "a_image", {"b_id": str(some_id)})):
        r = client.post(route, files={field: (name, data)}, data=extra)
        assert 400 <= r.status_code < 500, (name, route, r.status_code, r.text)
        assert_error(r, r.status_code, name)
        if name.endswith("_bomb.png"):
            assert_error(r, 413, "too large", "Pillow's limit")


def test_a_thumbnail_may_take_the_whole_budget_an_upload_half():
    budget = DecodeBudget(100 << 20)
    with pytest.raises(ApiError) as err:
        with budget.reserve(60 << 20, "upload 'a.png'"):
            pass
    assert err.value.status == 413 and "half of --max-decode-mb" in err.value.message
    with budget.reserve(60 << 20, "the thumbnail of image 1", whole=True):
        assert budget.in_use == 60 << 20
    with pytest.raises(ApiError) as err:
        with budget.reserve(101 << 20, "the thumbnail of image 1", whole=True):
            pass
    assert err.value.status == 413 and "the whole --max-decode-mb" in err.value.message
    assert budget.in_use == 0 and budget.peak == 60 << 20
