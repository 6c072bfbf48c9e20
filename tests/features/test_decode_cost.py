"""The decode cost of an image, read from its header (:func:`retrieval.features.image.decode_cost`): the size a
JPEG is decoded at (Pillow's draft, never below what ``max_side`` needs), and an estimate that bounds the real peak
memory of :func:`load_image`, measured in a fresh process for each mode."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from retrieval.features.image import decode_cost, load_image


def test_a_jpeg_is_costed_at_its_draft_size_and_other_formats_reduced_after_a_full_decode(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (3000, 4000, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "a.jpg", quality=80)
    Image.fromarray(rgb).save(tmp_path / "a.png")
    c = decode_cost(tmp_path / "a.jpg", max_side=1024)
    assert c.size == (4000, 3000) and c.decoded == (2000, 1500) and c.format == "JPEG"
    # the working image needs 1024 x 768: 1/2 is the largest reduction that keeps both sides at least that
    with Image.open(tmp_path / "a.jpg") as im:
        im.draft("RGB", (1024, 768))
        assert im.size == c.decoded
    assert decode_cost(tmp_path / "a.jpg", max_side=None).decoded == (4000, 3000)
    assert decode_cost(tmp_path / "a.jpg", max_side=320, draft_box=(320, 320)).decoded == (500, 375)
    # a PNG: decoded in full, then reduced by 2 (3 keeps both sides >= 1024 x 768 but does not divide 4000); the
    # first decoder: in full
    p = decode_cost(tmp_path / "a.png", max_side=1024)
    assert p.decoded == (2000, 1500) and p.bytes >= 4000 * 3000 * 4   # the full RGB decode, then reduced band by band
    assert load_image(tmp_path / "a.png").original_size == (4000, 3000)
    old = decode_cost(tmp_path / "a.png", max_side=1024, reduce="jpeg")
    assert old.decoded == (4000, 3000) and old.bytes >= 4000 * 3000 * 4
    assert decode_cost(tmp_path / "a.jpg", max_side=1024, reduce="none").decoded == (4000, 3000)
    assert load_image(tmp_path / "a.jpg").original_size == (4000, 3000)


MEASURE = """
import re, sys
from retrieval.features.image import load_image, register_image_plugins
import cv2  # imported first: its own memory is not the decode's
register_image_plugins()  # the HEIF / AVIF decoders loaded once per process: not the decode's memory either

def status(key):
    return int(re.search(key + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

open("/proc/self/clear_refs", "w").write("5")   # resets the peak (VmHWM) to the current RSS
before = status("VmRSS")
load_image(sys.argv[1], reduce=sys.argv[2])
print(status("VmHWM") - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak memory from /proc (Linux)")
@pytest.mark.parametrize("reduce", ["all", "none"])
@pytest.mark.parametrize("mode", ["RGBA", "RGB", "L", "I;16"])
def test_the_estimate_bounds_the_measured_peak(tmp_path, mode, reduce):
    rng = np.random.default_rng(1)
    h, w = 2400, 3200
    if mode == "I;16":
        img = Image.fromarray(rng.integers(0, 65535, (h, w), dtype=np.uint16))
    else:
        bands = {"RGBA": 4, "RGB": 3, "L": 1}[mode]
        arr = rng.integers(0, 256, (h // 8, w // 8, bands), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
        img = Image.fromarray(arr[..., 0] if bands == 1 else arr, mode)
    path = tmp_path / "x.png"
    img.save(path)
    cost = decode_cost(path, reduce=reduce)
    assert cost.mode == img.mode
    peak = int(subprocess.run([sys.executable, "-c", MEASURE, str(path), reduce], capture_output=True, text=True,
                              check=True).stdout)
    assert peak <= cost.bytes, (mode, peak >> 20, cost.bytes >> 20)
    assert cost.bytes <= 3 * max(peak, 1 << 20), (mode, peak >> 20, cost.bytes >> 20)   # not wildly above either
