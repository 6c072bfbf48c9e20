"""Image loading: modes, formats, EXIF orientation, downscaling, and every documented bad-input outcome."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFilter

from retrieval.features import FeatureExtractor, ImageReadError, LoadedImage, load_image


def _pattern(h=60, w=80):
    yy, xx = np.mgrid[0:h, 0:w]
    return ((xx * 3 + yy * 2) % 256).astype(np.uint8)


def _png_header_only(path, w, h):
    """A valid PNG signature + IHDR claiming w x h (8-bit gray), a tiny IDAT, IEND: cheap 'huge' image."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
                     + chunk(b"IEND", b""))


def test_gray_png_exact(tmp_path):
    a = _pattern()
    Image.fromarray(a).save(tmp_path / "a.png")
    im = load_image(tmp_path / "a.png")
    assert im.pixels.dtype == np.uint8 and im.pixels.flags.c_contiguous
    np.testing.assert_array_equal(im.pixels, a)
    assert im.scale == 1.0 and im.original_size == (80, 60) and im.orientation == 1


@pytest.mark.parametrize("fmt", ["PNG", "TIFF", "WEBP", "BMP", "JPEG"])
def test_formats_rgb(tmp_path, fmt):
    a = _pattern()
    rgb = np.dstack([a, a, a])
    p = tmp_path / f"a.{fmt.lower()}"
    kw = {"lossless": True} if fmt == "WEBP" else ({"quality": 98} if fmt == "JPEG" else {})
    Image.fromarray(rgb).save(p, fmt, **kw)
    im = load_image(p)
    tol = 6 if fmt == "JPEG" else 1
    assert np.abs(im.pixels.astype(int) - a).max() <= tol


def test_rgba_and_palette_transparency_composited_on_white(tmp_path):
    a = _pattern()
    rgba = np.dstack([a, a, a, np.full_like(a, 255)])
    rgba[:10, :10, 3] = 0  # transparent corner -> white
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    im = load_image(tmp_path / "a.png")
    assert (im.pixels[:10, :10] == 255).all()
    np.testing.assert_array_equal(im.pixels[10:, 10:], a[10:, 10:])
    pal = Image.fromarray((a // 64).astype(np.uint8), "P")
    pal.putpalette([0, 0, 0, 80, 80, 80, 160, 160, 160, 240, 240, 240] + [0] * 756)
    pal.info["transparency"] = 0
    pal.save(tmp_path / "p.png", transparency=0)
    im = load_image(tmp_path / "p.png")
    idx = a // 64
    expected = np.array([255, 80, 160, 240], np.uint8)[idx]
    np.testing.assert_array_equal(im.pixels, expected)


def test_cmyk_jpeg(tmp_path):
    a = _pattern()
    Image.fromarray(np.dstack([a, a, a])).convert("CMYK").save(tmp_path / "c.jpg", quality=98)
    assert Image.open(tmp_path / "c.jpg").mode == "CMYK"
    im = load_image(tmp_path / "c.jpg")
    assert np.abs(im.pixels.astype(int) - a).max() <= 8


def test_16bit_png(tmp_path):
    a16 = (_pattern().astype(np.uint16) * 257)
    a16[0, 0] = 65535
    Image.fromarray(a16).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    im = load_image(tmp_path / "g16.png")
    expected = np.rint(a16 / 257.0).astype(np.uint8)
    np.testing.assert_array_equal(im.pixels, expected)


def test_exif_orientation_6_rotates_pixels_and_features(tmp_path):
    rng = np.random.default_rng(0)
    raw = (rng.random((120, 200)) * 255).astype(np.uint8)
    raw = np.asarray(Image.fromarray(raw).filter(ImageFilter.GaussianBlur(2)))
    exif = Image.Exif()
    exif[0x0112] = 6
    p = tmp_path / "o6.jpg"
    Image.fromarray(raw).save(p, quality=95, exif=exif.tobytes())
    decoded = np.asarray(Image.open(p).convert("L"))  # stored orientation, no transpose
    im = load_image(p)
    assert im.orientation == 6 and im.original_size == (120, 200)
    # orientation 6: the stored image must be rotated 90 degrees clockwise for display
    np.testing.assert_array_equal(im.pixels, np.rot90(decoded, k=-1))
    ex = FeatureExtractor(threshold=1.0)
    f_file = ex(p)
    f_manual = ex(LoadedImage.from_array(np.rot90(decoded, k=-1).copy()))
    assert f_file.image_size == (120, 200) and len(f_file) > 0
    np.testing.assert_array_equal(f_file.frames, f_manual.frames)


def test_downscale_keeps_scale_and_original_size(tmp_path):
    a = np.asarray(Image.fromarray(_pattern(300, 500)).resize((1000, 600)))
    Image.fromarray(a).save(tmp_path / "big.png")
    im = load_image(tmp_path / "big.png", max_side=250)
    assert im.size == (250, 150) and im.original_size == (1000, 600)
    assert im.scale == pytest.approx(4.0) and im.scale_xy == (4.0, 4.0)
    full = load_image(tmp_path / "big.png", max_side=None)
    assert full.size == (1000, 600) and full.scale == 1.0


def test_downscale_jpeg_draft_path_matches_size(tmp_path):
    a = np.dstack([_pattern(600, 1000)] * 3)
    Image.fromarray(a).save(tmp_path / "big.jpg", quality=95)
    im = load_image(tmp_path / "big.jpg", max_side=200)
    assert im.size == (200, 120) and im.scale == pytest.approx(5.0)


def test_upscale_to_enlarges_only_smaller_images_and_reports_original_pixels(tmp_path):
    """``upscale_to``: an image whose larger side is below it is enlarged (bicubic) to it, a larger one is left
    alone; frames stay in original pixels; the extractor's key changes only when it is set."""
    Image.fromarray(_pattern(150, 200)).save(tmp_path / "small.png")
    Image.fromarray(_pattern(300, 400)).resize((600, 450)).save(tmp_path / "mid.png")
    im = load_image(tmp_path / "small.png", upscale_to=400)
    assert im.size == (400, 300) and im.original_size == (200, 150)
    assert im.scale == pytest.approx(0.5) and im.scale_xy == (0.5, 0.5)
    plain = load_image(tmp_path / "small.png")
    assert plain.size == (200, 150)
    # bicubic: the enlarged image, shrunk back, is close to the original
    back = np.asarray(Image.fromarray(im.pixels).resize((200, 150), Image.BILINEAR), float)
    assert np.abs(back - plain.pixels.astype(float)).mean() < 20
    assert load_image(tmp_path / "mid.png", upscale_to=400).size == (600, 450)   # already larger: unchanged
    assert FeatureExtractor().config_key == FeatureExtractor(upscale_to=None).config_key
    ex = FeatureExtractor(upscale_to=400, threshold=1.0)
    assert ex.config_key != FeatureExtractor(threshold=1.0).config_key and ex.config["upscale_to"] == 400
    blobs = np.random.default_rng(0).integers(0, 256, (30, 40), dtype=np.uint8)
    Image.fromarray(blobs).resize((200, 150), Image.BILINEAR).save(tmp_path / "tex.png")
    f = ex(tmp_path / "tex.png")
    assert len(f) > 0 and f.image_size == (200, 150)
    assert f.frames[:, 0].max() < 200 and f.frames[:, 1].max() < 150
    with pytest.raises(ValueError, match="must not exceed max_side"):
        FeatureExtractor(max_side=300, upscale_to=400)


def test_upscaled_thumbnails_verify_a_close_up_against_a_distant_view(features_of):
    """Holidays 100600 (a carousel horse, close up) and 100601 (the same horse in the distance), 400 px
    thumbnails: their native-size features share too few consistent matches to verify; enlarged to 800 px the
    detector finds the small structures of the distant view and the pair verifies (docs/results.md,
    "Small images")."""
    from conftest import shared_path

    from retrieval.rerank.matching import match_features

    a = shared_path("holidays", "images", "100600.png")
    b = shared_path("holidays", "images", "100601.png")
    native = match_features(features_of(a), features_of(b))
    enlarged = match_features(features_of(a, upscale_to=800), features_of(b, upscale_to=800))
    assert not native.verified, (native.inliers, native.reason)
    assert enlarged.verified and enlarged.inliers >= 5 * max(native.inliers, 9), enlarged.inliers


# ---- bad input: each documented outcome ----------------------------------------------------------------------

def test_zero_byte_file(tmp_path):
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    with pytest.raises(ImageReadError, match=r"empty.jpg.*empty \(0 bytes\)"):
        load_image(p)


def test_truncated_jpeg(tmp_path):
    a = np.dstack([_pattern(200, 300)] * 3)
    p = tmp_path / "t.jpg"
    Image.fromarray(a).save(p, quality=90)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match=r"t\.jpg.*(truncated|corrupt)"):
        load_image(p)


def test_text_file_named_jpg(tmp_path):
    p = tmp_path / "notes.jpg"
    p.write_text("this is not an image\n" * 10)
    with pytest.raises(ImageReadError, match=r"notes\.jpg.*not an image"):
        load_image(p)


def test_missing_file(tmp_path):
    with pytest.raises(ImageReadError, match="nothere.png"):
        load_image(tmp_path / "nothere.png")


def test_one_pixel_image(tmp_path):
    p = tmp_path / "one.png"
    Image.new("L", (1, 1), 7).save(p)
    with pytest.raises(ImageReadError, match=r"one\.png.*too small: 1x1"):
        load_image(p)
    assert load_image(p, min_side=1).pixels.tolist() == [[7]]


def test_20000_square_png_is_refused_before_decoding(tmp_path):
    p = tmp_path / "huge.png"
    _png_header_only(p, 20000, 20000)
    assert p.stat().st_size < 200
    with pytest.raises(ImageReadError, match=r"huge\.png.*too large"):
        load_image(p)


def test_megapixel_guard_is_configurable(tmp_path):
    p = tmp_path / "m.png"
    _png_header_only(p, 3000, 3000)  # 9 MP header
    with pytest.raises(ImageReadError, match=r"9\.0 megapixels.*max_megapixels=5"):
        load_image(p, max_megapixels=5)


def test_108_megapixel_photo_is_read_below_the_150_megapixel_guard(tmp_path):
    """Pillow warns above 89.5 MP and refuses above 179 MP: neither may stand in for max_megapixels (150 MP by
    default, raisable), which is checked on the header before any pixel is decoded."""
    from PIL import Image

    p = tmp_path / "phone.jpg"
    Image.new("L", (12000, 9000), 90).save(p, quality=50)       # a 108 MP phone photo
    img = load_image(p, max_side=600)
    assert img.original_size == (12000, 9000) and max(img.pixels.shape) == 600
    big = tmp_path / "big.png"
    _png_header_only(big, 16000, 10000)                            # 160 MP
    with pytest.raises(ImageReadError, match=r"big\.png.*160\.0 megapixels.*max_megapixels=150"):
        load_image(big)
    huge = tmp_path / "huge.png"
    _png_header_only(huge, 15000, 13000)                           # 195 MP: above Pillow's error limit too
    with pytest.raises(ImageReadError, match=r"huge\.png.*too large"):
        load_image(huge)
    with pytest.raises(ImageReadError, match="corrupt or truncated"):   # allowed by a raised guard, then decoded
        load_image(huge, max_megapixels=200)


def test_invalid_parameters():
    with pytest.raises(ValueError, match="max_side"):
        load_image("x.png", max_side=0)
    assert issubclass(ImageReadError, ValueError)


def test_index_max_megapixels_option_refuses_and_names_the_file(tmp_path):
    """``retrieval index --max-megapixels``: a photo above the guard is listed as unreadable with the guard's
    value; the others are indexed."""
    from click.testing import CliRunner
    from conftest import FEATURE_CACHE
    from PIL import Image

    from retrieval.app.demo_data import build_demo_folder
    from retrieval.cli.main import main

    made = build_demo_folder(tmp_path / "src")
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in made["photos"][:3]:
        (photos / p.split("/")[-1]).symlink_to(p)
    Image.new("RGB", (2400, 2000), (90, 100, 110)).save(photos / "big.jpg")       # 4.8 MP
    res = CliRunner().invoke(main, ["-q", "index", str(photos), "--index", str(tmp_path / "i"), "--feature-store",
                                    str(FEATURE_CACHE), "--max-megapixels", "4", "--strict"])
    assert res.exit_code == 1                                      # --strict: an unreadable file fails the run
    assert "big.jpg" in res.output and "4.8 megapixels" in res.output and "max_megapixels=4.0" in res.output
    assert "Traceback" not in res.output
