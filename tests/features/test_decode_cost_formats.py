"""The decode cost of every format the library opens, measured against its real peak: for each format and mode
(JPEG baseline, progressive and CMYK; PNG in each colour type and depth, interlaced; WebP lossy, lossless and
animated; GIF and animated GIF; TIFF compressed by strips, in one strip, tiled, with pages, 16-bit and CMYK; BMP;
PPM; HEIC 8- and 10-bit; AVIF 4:2:0 and 4:4:4; camera RAW: a DNG with its JPEG preview, one without a preview,
developed by LibRaw at half size, and at full size) a 3.8-megapixel file (a DNG: its 15.4 megapixels of sensor data,
tests/raw_photos.py) is decoded into the features' working image (:func:`load_image`) and into the thumbnails'
pictures (:func:`load_display`, 1024 pixels, and 320 for some), each in a fresh process (forked from one that
imported everything first; OpenCV's resize called once on a small image before the reset, as a running process has),
whose peak RSS (VmHWM, reset before the decode)
minus its RSS before is the peak. The estimate read from the header (:func:`decode_cost`, :func:`display_cost`)
is at least that, and not wildly above (three times the peak plus the fixed part)."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

from retrieval.features.decode_plan import FIXED_BYTES
from retrieval.features.image import decode_cost, display_cost

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak memory from /proc")

W, H = 2400, 1600


def content(bands: int) -> np.ndarray:
    """Smooth waves with 8 x 8 blocks of noise (compresses like a photo, not like a flat image)."""
    x = np.arange(W, dtype=np.float32)
    y = np.arange(H, dtype=np.float32)
    planes = [(127 + 100 * np.outer(np.cos(y / (53 + 7 * b)), np.sin(x / (37 + 11 * b)))).astype(np.uint8)
              for b in range(bands)]
    noise = np.random.default_rng(bands).integers(0, 24, (H // 8, W // 8, bands), dtype=np.uint8)
    return np.stack(planes, axis=2) ^ noise.repeat(8, 0).repeat(8, 1)


def adam7_png(arr: np.ndarray) -> bytes:
    """An interlaced (Adam7) 8-bit PNG of ``arr`` (h, w, 4), rows unfiltered (Pillow writes no interlaced PNG)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = bytearray()
    for xs, ys, xstep, ystep in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                                 (0, 1, 1, 2)):
        sub = arr[ys::ystep, xs::xstep]
        rows = sub.reshape(sub.shape[0], -1)
        raw += np.concatenate([np.zeros((rows.shape[0], 1), np.uint8), rows], axis=1).tobytes()
    header = struct.pack(">IIBBBBB", arr.shape[1], arr.shape[0], 8, 6, 0, 0, 1)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 1))
            + chunk(b"IEND", b""))


def _save(im, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, **kw)
    return buf.getvalue()


def _tifffile(arr, **kw) -> bytes:
    import tifffile  # a dependency of scikit-image

    buf = io.BytesIO()
    tifffile.imwrite(buf, arr, **kw)
    return buf.getvalue()


def _heic(arr, mode, **kw) -> bytes:
    import pillow_heif

    im = pillow_heif.from_bytes(mode, (W, H), arr.tobytes())
    buf = io.BytesIO()
    im.save(buf, quality=60, enc_params={"preset": "ultrafast"}, **kw)
    return buf.getvalue()


def _dng(write, arr, **kw) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/x.dng"
        write(path, arr, **kw)
        with open(path, "rb") as fh:
            return fh.read()


def variants():
    """name -> (extension, bytes of the file)."""
    from raw_photos import pidng_dng, preview_dng

    rgb_a, rgba_a = content(3), content(4)
    rgb, rgba = Image.fromarray(rgb_a), Image.fromarray(rgba_a, "RGBA")
    gray = rgb.convert("L")
    g16 = np.asarray(gray).astype(np.uint16) * 257
    pal = Image.fromarray(rgb_a[..., 0] >> 2, "P")   # 64 colours
    pal.putpalette(bytes(np.repeat(np.arange(0, 256, 4, dtype=np.uint8), 3)))
    flipped = rgb.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    import cv2

    return {
        "jpeg_rgb": (".jpg", _save(rgb, format="JPEG", quality=90)),
        "jpeg_gray": (".jpg", _save(gray, format="JPEG", quality=90)),
        "jpeg_cmyk": (".jpg", _save(rgb.convert("CMYK"), format="JPEG", quality=90)),
        "jpeg_progressive_444": (".jpg", _save(rgb, format="JPEG", quality=90, progressive=True, subsampling=0)),
        "png_rgb": (".png", _save(rgb, format="PNG", compress_level=1)),
        "png_rgba": (".png", _save(rgba, format="PNG", compress_level=1)),
        "png_gray": (".png", _save(gray, format="PNG", compress_level=1)),
        "png_gray_alpha": (".png", _save(rgba.convert("LA"), format="PNG", compress_level=1)),
        "png_palette_transparency": (".png", _save(pal, format="PNG", compress_level=1, transparency=3)),
        "png_gray16": (".png", _save(Image.fromarray(g16), format="PNG", compress_level=1)),
        "png_rgb16": (".png", cv2.imencode(".png", rgb_a.astype(np.uint16) * 257,
                                           [cv2.IMWRITE_PNG_COMPRESSION, 1])[1].tobytes()),
        "png_1bit": (".png", _save(gray.convert("1"), format="PNG", compress_level=1)),
        "png_interlaced_rgba": (".png", adam7_png(rgba_a)),
        "webp_lossy_rgb": (".webp", _save(rgb, format="WEBP", quality=80)),
        "webp_lossy_rgba": (".webp", _save(rgba, format="WEBP", quality=80)),
        "webp_lossless_rgba": (".webp", _save(rgba, format="WEBP", lossless=True, quality=0, method=0)),
        "webp_animated": (".webp", _save(rgba, format="WEBP", save_all=True, append_images=[flipped], quality=50,
                                          method=0)),
        "gif": (".gif", _save(pal, format="GIF")),
        "gif_animated": (".gif", _save(pal, format="GIF", save_all=True, append_images=[pal.transpose(Image.Transpose.FLIP_LEFT_RIGHT)])),
        "tiff_lzw_rgb": (".tif", _save(rgb, format="TIFF", compression="tiff_lzw")),
        "tiff_deflate_rgb_one_strip": (".tif", _tifffile(rgb_a, compression="zlib", rowsperstrip=H,
                                                         photometric="rgb")),
        "tiff_tiled_rgba": (".tif", _tifffile(rgba_a, compression="zlib", tile=(256, 256), photometric="rgb",
                                              extrasamples=[2])),
        "tiff_pages": (".tif", _save(rgb, format="TIFF", compression="tiff_lzw", save_all=True,
                                     append_images=[flipped])),
        "tiff_gray16": (".tif", _save(Image.fromarray(g16), format="TIFF", compression="tiff_adobe_deflate")),
        "tiff_rgb16_one_strip": (".tif", _tifffile(rgb_a.astype(np.uint16) * 257, compression="zlib",
                                                   rowsperstrip=H, photometric="rgb")),
        "tiff_cmyk": (".tif", _save(rgb.convert("CMYK"), format="TIFF", compression="tiff_lzw")),
        "bmp_rgb": (".bmp", _save(rgb, format="BMP")),
        "bmp_palette": (".bmp", _save(pal, format="BMP")),
        "ppm_rgb": (".ppm", _save(rgb, format="PPM")),
        "heic_8bit": (".heic", _heic(rgb_a, "RGB")),
        "heic_10bit_rgba_444": (".heic", _heic(rgba_a.astype(np.uint16) * 257, "RGBA;16", chroma=444)),
        "avif_rgb": (".avif", _save(rgb, format="AVIF", quality=60, speed=10)),
        "avif_rgba_444": (".avif", _save(rgba, format="AVIF", quality=60, speed=10, subsampling="4:4:4")),
        "dng_preview": (".dng", _dng(preview_dng, rgb_a, scale=2, preview_side=1024)),
        "dng_developed": (".dng", _dng(pidng_dng, rgb_a, scale=2)),
    }


MEASURE = r"""
import json, os, re, sys, traceback
import cv2  # imported first: its own memory is not a decode's
import rawpy  # the same: LibRaw's library (a process's, not a decode's)
import numpy as np
from PIL import Image
from retrieval.features.image import load_display, load_image, register_image_plugins

register_image_plugins()
Image.init()


def status(key):
    return int(re.search(key + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024


peaks = []
for path, op in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # a fresh process for each decode: nothing freed by another one is reused
        os.close(read)
        try:
            # OpenCV's one-time set-up in this process (its thread pool, its CPU-dispatched resize code: 12-13 MB
            # on some CPUs, nothing on others) is paid once by a process, not by each decode: done before the reset
            small = np.zeros((267, 400), np.uint8)
            cv2.resize(small, (341, 228), interpolation=cv2.INTER_AREA)
            cv2.resize(small, (800, 534), interpolation=cv2.INTER_CUBIC)
            del small
            open("/proc/self/clear_refs", "w").write("5")   # the peak (VmHWM) reset to the current RSS
            before = status("VmRSS")
            if op == "features":
                load_image(path)
            elif op == "features-none":
                load_image(path, reduce="none")
            elif op == "features-full":
                load_image(path, max_side=None)
            else:
                load_display(path, int(op)).thumbnail((int(op), int(op)))
            os.write(write, str(status("VmHWM") - before).encode())
            os._exit(0)
        except BaseException:
            os.write(write, ("error " + traceback.format_exc().splitlines()[-1]).encode())
            os._exit(1)
    os.close(write)
    answer = b""
    while chunk := os.read(read, 4096):
        answer += chunk
    os.close(read)
    os.waitpid(pid, 0)
    peaks.append(answer.decode())
print(json.dumps(peaks))
"""

OPS = ("features", "1024")
SMALL = ("jpeg_rgb", "jpeg_gray", "jpeg_cmyk", "jpeg_progressive_444", "png_rgba", "webp_lossy_rgb", "heic_8bit",
         "dng_preview", "dng_developed")
"""Variants whose small thumbnail (320) is measured too (a JPEG drafted further; the others as the large one)."""
REDUCE_NONE = ("jpeg_rgb", "png_rgba", "png_gray16", "webp_lossy_rgb")
"""Variants measured with the first decoder too (``reduce="none"``: every format decoded in full)."""
FULL_SIZE = ("dng_developed",)
"""Variants measured at full size too (``max_side=None``: a RAW file's full development by LibRaw)."""


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """name -> {op: (peak bytes, estimate bytes)} for every variant."""
    folder = tmp_path_factory.mktemp("formats")
    paths = {}
    made = variants()
    assert tuple(made) == NAMES
    for name, (ext, data) in made.items():
        paths[name] = folder / f"{name}{ext}"
        paths[name].write_bytes(data)
    jobs = [(str(p), op) for name, p in paths.items()
            for op in OPS + (("320",) if name in SMALL else ()) + (("features-none",) if name in REDUCE_NONE else ())
            + (("features-full",) if name in FULL_SIZE else ())]
    res = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(jobs)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict = {name: {} for name in paths}
    for (path, op), peak in zip(jobs, json.loads(res.stdout), strict=True):
        name = next(n for n, p in paths.items() if str(p) == path)
        assert not peak.startswith("error"), (name, op, peak)
        if op == "features":
            estimate = decode_cost(path).bytes
        elif op == "features-none":
            estimate = decode_cost(path, reduce="none").bytes
        elif op == "features-full":
            estimate = decode_cost(path, max_side=None).bytes
        else:
            estimate = display_cost(path, int(op)).bytes
        out[name][op] = (int(peak), estimate)
    return out


NAMES = ("jpeg_rgb", "jpeg_gray", "jpeg_cmyk", "jpeg_progressive_444", "png_rgb", "png_rgba", "png_gray",
         "png_gray_alpha", "png_palette_transparency", "png_gray16", "png_rgb16", "png_1bit", "png_interlaced_rgba",
         "webp_lossy_rgb", "webp_lossy_rgba", "webp_lossless_rgba", "webp_animated", "gif", "gif_animated",
         "tiff_lzw_rgb", "tiff_deflate_rgb_one_strip", "tiff_tiled_rgba", "tiff_pages", "tiff_gray16",
         "tiff_rgb16_one_strip", "tiff_cmyk", "bmp_rgb", "bmp_palette", "ppm_rgb", "heic_8bit", "heic_10bit_rgba_444",
         "avif_rgb", "avif_rgba_444", "dng_preview", "dng_developed")


@pytest.mark.parametrize("name", NAMES)
def test_the_estimate_bounds_the_measured_peak(measured, name):
    for op, (peak, estimate) in measured[name].items():
        assert peak <= estimate, (name, op, f"peak {peak / 2**20:.1f} MB > estimate {estimate / 2**20:.1f} MB")
        assert estimate <= 3 * peak + FIXED_BYTES, (name, op, f"estimate {estimate / 2**20:.1f} MB, "
                                                              f"peak {peak / 2**20:.1f} MB")
