"""The one list of readable formats and the one opener (retrieval.features.image_files): names, HEIC / AVIF / GIF /
EXIF orientation, bytes and file objects, an upload's temporary name, the size guard, display colours."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from retrieval.features.image import (
    FORMAT_EXTENSIONS,
    IMAGE_EXTENSIONS,
    ImageReadError,
    display_rgb,
    is_image_name,
    load_image,
    open_image,
    peek_image,
)


def photo(w=64, h=48) -> Image.Image:
    """Smooth colour ramps with a bright square in the top-left corner (to see orientation)."""
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([40 + 120 * x / w, 40 + 120 * y / h, 100 + 0 * x], axis=2).astype(np.uint8)
    arr[:16, :16] = 250
    return Image.fromarray(arr)


def heif():
    import pillow_heif  # a dependency of the package (pyproject.toml)

    pillow_heif.register_heif_opener()


@pytest.mark.parametrize("name,expected", [
    ("IMG_0001.HEIC", True), ("a/b/été plage.jpg", True), ("x.Avif", True), ("anim.GIF", True), ("p.heif", True),
    ("scan.TIFF", True), ("notes.txt", False), ("jpg", False), ("photo.jpg.part", False), ("archive.zip", False),
])
def test_is_image_name(name, expected):
    assert is_image_name(name) is expected


def test_is_image_name_accepts_exactly_the_listed_extensions():
    for ext in IMAGE_EXTENSIONS:
        assert is_image_name("x" + ext) and is_image_name("x" + ext.upper())
    # every format a stored upload may have is one of the listed extensions
    assert set(FORMAT_EXTENSIONS.values()) <= set(IMAGE_EXTENSIONS)


def test_avif_is_readable_by_this_installation():
    from PIL import features

    assert features.check("avif"), "Pillow without AVIF: pyproject.toml asks Pillow >= 11.3 (AVIF in its wheels)"


@pytest.mark.parametrize("fmt,ext", [("HEIF", ".heic"), ("AVIF", ".avif"), ("JPEG", ".jpg"), ("PNG", ".png"),
                                     ("WEBP", ".webp")])
def test_open_image_recognises_the_content_whatever_the_name(tmp_path, fmt, ext):
    """An upload is received into ``.upload-XXXX.part``: it opens by content, HEIC included, and gives its format
    (the extension it is stored with)."""
    heif()
    im = photo()
    path = tmp_path / ".upload-1234.part"
    im.save(path, format=fmt, **({"quality": 90} if fmt != "PNG" else {}))
    got = open_image(path)
    assert got.format == fmt and FORMAT_EXTENSIONS[got.format] == ext
    assert got.size == (64, 48)
    assert np.abs(np.asarray(display_rgb(got), int) - np.asarray(im, int)).mean() < 6
    with peek_image(path) as header:
        assert header.format == fmt and header.size == (64, 48)


def test_a_heic_upload_opens_in_a_fresh_process(tmp_path):
    """Nothing registered beforehand (the tests above register pillow-heif in this process): the opener itself
    registers the plugin, whatever the file's name."""
    import pillow_heif

    path = tmp_path / ".upload-5678.part"
    pillow_heif.from_pillow(photo()).save(str(path), quality=90)   # written without Pillow's plugin registry
    code = ("import sys; from retrieval.features.image import open_image, load_image; "
            "im = open_image(sys.argv[1]); print(im.format, im.size, load_image(sys.argv[1]).original_size)")
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["HEIF", "(64,", "48)", "(64,", "48)"]


def test_open_image_takes_bytes_and_file_objects(tmp_path):
    heif()
    buf = io.BytesIO()
    photo().save(buf, format="HEIF", quality=90)
    data = buf.getvalue()
    for source in (data, io.BytesIO(data), bytearray(data)):
        got = open_image(source, name="IMG_0001.HEIC")
        assert got.format == "HEIF" and got.size == (64, 48)


def test_open_image_takes_the_first_frame_of_an_animated_gif(tmp_path):
    first = Image.new("RGB", (40, 30), (250, 250, 250))
    second = Image.new("RGB", (40, 30), (0, 0, 0))
    path = tmp_path / "anim.gif"
    first.save(path, save_all=True, append_images=[second], duration=100, loop=0)
    with Image.open(path) as check:
        assert check.n_frames == 2
    got = open_image(path)
    assert got.format == "GIF"
    assert np.asarray(display_rgb(got)).min() > 200          # white: frame 0, not the black frame 1
    assert load_image(path).pixels.min() > 200               # the features see frame 0 too


def test_open_image_applies_the_exif_orientation(tmp_path):
    upright = photo(64, 48)                               # bright square top-left
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # what a camera held sideways stores
    exif = Image.Exif()
    exif[0x0112] = 6                                      # display: rotate 90 degrees clockwise
    path = tmp_path / "sideways.jpg"
    stored.save(path, exif=exif.tobytes(), quality=95)
    got = open_image(path)
    assert got.size == (64, 48) and got.format == "JPEG"
    arr = np.asarray(got.convert("L"), int)
    assert arr[:16, :16].mean() > 240 and arr[-16:, -16:].mean() < 200
    assert load_image(path).original_size == (64, 48)


def test_open_image_decodes_a_jpeg_reduced_for_a_thumbnail(tmp_path):
    path = tmp_path / "big.jpg"
    photo(800, 600).save(path, quality=90)
    assert open_image(path, draft=(100, 75)).size == (100, 75)    # 1/8 in the decoder
    assert open_image(path, draft=(100, 100)).size == (200, 150)  # 1/4: never below the request
    assert open_image(path).size == (800, 600)


def test_open_image_errors_name_the_file(tmp_path):
    text = tmp_path / "notes.jpg"
    text.write_text("not an image")
    empty = tmp_path / "empty.heic"
    empty.write_bytes(b"")
    big = tmp_path / "big.png"
    photo(200, 100).save(big)
    with pytest.raises(ImageReadError, match="notes.jpg.*not an image file"):
        open_image(text)
    with pytest.raises(ImageReadError, match="empty.heic.*empty"):
        open_image(empty)
    with pytest.raises(ImageReadError, match="missing.avif.*not found"):
        open_image(tmp_path / "missing.avif")
    with pytest.raises(ImageReadError, match="my photo.png.*not an image"):
        open_image(b"garbage bytes", name="my photo.png")
    with pytest.raises(ImageReadError, match="big.png.*too large: 200x100"):   # header checked first
        open_image(big, max_megapixels=0.01)
    with pytest.raises(ImageReadError, match="too small"):
        open_image(big, min_side=101)


def test_display_rgb_composites_transparency_on_white_and_scales_16_bit():
    rgba = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    assert np.asarray(display_rgb(rgba)).min() == 255
    gray16 = Image.new("I;16", (4, 4), 65535)
    assert np.asarray(display_rgb(gray16)).min() == 255
