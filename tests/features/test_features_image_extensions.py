"""IMAGE_EXTENSIONS (the extensions every folder walk picks): load_image reads a file of each of them (the camera
RAW extensions: a DNG under each name, tests/raw_photos.py)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from retrieval.features.image import IMAGE_EXTENSIONS, load_image
from retrieval.features.raw_files import RAW_EXTENSIONS

PIL_FORMAT = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP",
              ".bmp": "BMP", ".ppm": "PPM", ".pgm": "PPM", ".gif": "GIF", ".heic": "HEIF", ".heif": "HEIF",
              ".avif": "AVIF"}
LOSSY = {".jpg": 8, ".jpeg": 8, ".webp": 8, ".heic": 12, ".heif": 12, ".avif": 12}
"""Largest gray-level error allowed for the lossy formats (quality 90)."""


def test_the_list_is_lower_case_dotted_and_unique():
    assert len(set(IMAGE_EXTENSIONS)) == len(IMAGE_EXTENSIONS)
    assert all(e.startswith(".") and e == e.lower() for e in IMAGE_EXTENSIONS)
    assert set(IMAGE_EXTENSIONS) == set(PIL_FORMAT) | set(RAW_EXTENSIONS)
    assert not set(PIL_FORMAT) & set(RAW_EXTENSIONS)


@pytest.mark.parametrize("ext", [e for e in IMAGE_EXTENSIONS if e not in RAW_EXTENSIONS])
def test_load_image_reads_every_listed_extension(tmp_path, ext):
    """A 40x30 horizontal ramp (gray 0..195) written by Pillow in the format of the extension; lossless formats
    come back exactly, the lossy ones (JPEG, WebP) within a few gray levels."""
    ramp = np.tile((np.arange(40) * 5).astype(np.uint8), (30, 1))
    im = Image.fromarray(ramp, "L")
    if ext == ".ppm":
        im = im.convert("RGB")  # PPM is the colour Netpbm format (PGM the gray one)
    if ext in (".heic", ".heif", ".avif"):
        im = im.convert("RGB")
    if ext in (".heic", ".heif"):
        pillow_heif = pytest.importorskip("pillow_heif", reason="HEIC / HEIF need pillow-heif (a dependency)")
        pillow_heif.register_heif_opener()
    path = tmp_path / f"ramp{ext.upper() if ext == '.jpg' else ext}"
    try:
        im.save(path, format=PIL_FORMAT[ext], **({"quality": 90} if ext in LOSSY else {}))
    except (KeyError, OSError, ValueError) as exc:
        pytest.skip(f"this Pillow cannot encode {ext} here ({exc})")
    got = load_image(path)
    assert got.original_size == (40, 30) and got.pixels.dtype == np.uint8
    err = np.abs(got.pixels.astype(int) - ramp).max()
    assert err <= LOSSY.get(ext, 0), err


@pytest.mark.parametrize("ext", RAW_EXTENSIONS)
def test_load_image_reads_every_raw_extension(tmp_path, ext):
    """The ramp as a DNG's Bayer data (80 x 60 photosites) under each RAW extension: the name sends it to LibRaw,
    which recognises the content; developed in full (smaller than the working image), the ramp rises."""
    from raw_photos import pidng_dng

    ramp = np.tile((np.arange(40) * 5).astype(np.uint8), (30, 1))
    path = tmp_path / f"ramp{ext.upper()}"
    pidng_dng(path, np.repeat(ramp[..., None], 3, axis=2))
    got = load_image(path)
    assert got.original_size == (80, 60) and got.pixels.dtype == np.uint8
    profile = got.pixels[5:-5, 5:-5].mean(axis=0)
    assert np.all(np.diff(profile[::8]) > 0)
