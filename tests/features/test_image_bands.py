"""Converting a decoded image band by band (retrieval.features.image_bands) gives the pixels of a conversion in one
piece: the gray working image of every mode (transparency, palettes, 16- and 32-bit gray, float, CMYK, 1-bit),
reduced by a factor dividing both sides or not; the display colours; the EXIF orientation applied to the result.
:func:`load_display` (thumbnails) decodes at the size needed, upright, in display colours."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageOps

from retrieval.features import image_bands
from retrieval.features.image import display_cost, load_display, load_image
from retrieval.features.image_bands import display_bands, gray_bands, oriented_gray, to_gray
from retrieval.features.image_files import display_rgb


@pytest.fixture(autouse=True)
def small_bands(monkeypatch):
    """Bands of 5,000 pixels: the test images (about 60,000) are converted in a dozen bands, the last one short."""
    monkeypatch.setattr(image_bands, "BAND_PIXELS", 5000)


def images():
    rng = np.random.default_rng(0)
    h, w = 180, 330   # 330 = 2 * 3 * 5 * 11, 180 = 2^2 * 3^2 * 5: factors 2, 3, 5 divide both
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (h, w), dtype=np.uint8)
    out = {
        "RGB": Image.fromarray(rgb),
        "RGBA": Image.fromarray(np.dstack([rgb, alpha]), "RGBA"),
        "L": Image.fromarray(rgb[..., 0]),
        "LA": Image.fromarray(np.dstack([rgb[..., 0], alpha]), "LA"),
        "I;16": Image.fromarray(rgb[..., 0].astype(np.uint16) * 257),
        "I": Image.fromarray(rgb[..., 0].astype(np.int32) * 200, "I"),
        "F": Image.fromarray(rgb[..., 1].astype(np.float32) / 255, "F"),
        "CMYK": Image.fromarray(rgb).convert("CMYK"),
        "1": Image.fromarray(rgb[..., 2]).convert("1"),
    }
    pal = Image.fromarray(rgb[..., 0] >> 2, "P")
    pal.putpalette(bytes(np.repeat(np.arange(0, 256, 4, dtype=np.uint8), 3)))
    pal.info["transparency"] = 5
    out["P+transparency"] = pal
    keyed = Image.fromarray(rgb)
    keyed.info["transparency"] = tuple(int(v) for v in rgb[0, 0])
    out["RGB+transparency"] = keyed
    return out


@pytest.mark.parametrize("name", list(images()))
def test_gray_band_by_band_equals_the_conversion_in_one_piece(name):
    img = images()[name]
    assert image_bands.band_rows(img.size[0]) < img.size[1] // 5   # many bands
    np.testing.assert_array_equal(gray_bands(img), to_gray(img))
    if img.mode in ("RGB", "RGBA", "L", "LA") and "transparency" not in img.info:
        for factor in (2, 3, 5):
            np.testing.assert_array_equal(gray_bands(img, factor), to_gray(img.reduce(factor)))


@pytest.mark.parametrize("name", list(images()))
@pytest.mark.parametrize("factor", [1, 4, 7])   # 4 and 7 leave partial blocks at the edges
def test_display_colours_band_by_band_equal_the_conversion_in_one_piece(name, factor):
    img = images()[name]
    whole = display_rgb(img)
    whole = whole.reduce(factor) if factor > 1 else whole
    np.testing.assert_array_equal(np.asarray(display_bands(img, factor)), np.asarray(whole))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_is_that_of_exif_transpose(orientation):
    gray = np.random.default_rng(orientation).integers(0, 256, (30, 50), dtype=np.uint8)
    im = Image.fromarray(gray)
    exif = Image.Exif()
    exif[0x0112] = orientation
    im.info["exif"] = exif.tobytes()
    np.testing.assert_array_equal(oriented_gray(gray, orientation), np.asarray(ImageOps.exif_transpose(im)))


def test_a_thumbnail_is_decoded_at_the_size_needed_upright_in_display_colours(tmp_path):
    rgba = np.zeros((1200, 2000, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 255
    rgba[:300, :300, 3] = 0   # a transparent top-left corner: white on display
    exif = Image.Exif()
    exif[0x0112] = 6   # shown turned a quarter clockwise: 1200 x 2000, the transparent corner at the top right
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png", exif=exif)
    pic = load_display(tmp_path / "a.png", 320)
    assert pic.mode == "RGB" and pic.size == (400, 667)   # reduced by 3: a larger side of at least 2 * 320
    assert pic.getpixel((390, 10)) == (255, 255, 255) and pic.getpixel((10, 660)) == (200, 0, 0)
    assert load_image(tmp_path / "a.png").original_size == (1200, 2000)
    Image.fromarray(rgba[..., :3]).save(tmp_path / "b.jpg", quality=90, exif=exif)
    pic = load_display(tmp_path / "b.jpg", 320)
    assert pic.size == (300, 500)   # drafted by 4 in the decoder: at least 192 x 320, then not reduced further
    assert display_cost(tmp_path / "b.jpg", 320).decoded == (500, 300)   # in the file's own axes
    small = load_display(tmp_path / "a.png", 4096)   # smaller than asked: its own size
    assert small.size == (1200, 2000)
