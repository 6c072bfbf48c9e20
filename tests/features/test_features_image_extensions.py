"""IMAGE_EXTENSIONS (the extensions every folder walk picks): load_image reads a file of each of them."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from retrieval.features.image import IMAGE_EXTENSIONS, load_image

PIL_FORMAT = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP",
              ".bmp": "BMP", ".ppm": "PPM", ".pgm": "PPM"}


def test_the_list_is_lower_case_dotted_and_unique():
    assert len(set(IMAGE_EXTENSIONS)) == len(IMAGE_EXTENSIONS)
    assert all(e.startswith(".") and e == e.lower() for e in IMAGE_EXTENSIONS)
    assert set(IMAGE_EXTENSIONS) == set(PIL_FORMAT)


@pytest.mark.parametrize("ext", IMAGE_EXTENSIONS)
def test_load_image_reads_every_listed_extension(tmp_path, ext):
    """A 40x30 horizontal ramp (gray 0..195) written by Pillow in the format of the extension; lossless formats
    come back exactly, the lossy ones (JPEG, WebP) within a few gray levels."""
    ramp = np.tile((np.arange(40) * 5).astype(np.uint8), (30, 1))
    im = Image.fromarray(ramp, "L")
    if ext == ".ppm":
        im = im.convert("RGB")  # PPM is the colour Netpbm format (PGM the gray one)
    path = tmp_path / f"ramp{ext.upper() if ext == '.jpg' else ext}"
    im.save(path, format=PIL_FORMAT[ext])
    got = load_image(path)
    assert got.original_size == (40, 30) and got.pixels.dtype == np.uint8
    err = np.abs(got.pixels.astype(int) - ramp).max()
    assert err <= (8 if ext in (".jpg", ".jpeg", ".webp") else 0), err
