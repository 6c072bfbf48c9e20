"""A decoded image converted band by band: its gray working image (:func:`gray_bands`) or its display colours
(:func:`display_bands`), reduced by an integer factor on the way, without a full-size copy.

Decoding a file gives one image in its own mode (RGBA, 16-bit gray, palette, ...); what the library needs of it is
much smaller: a gray image of 1 byte per pixel (the features), or a reduced RGB image (thumbnails). Converted in
one piece, every step of the conversion -- compositing a transparent image onto white, scaling 16-bit gray, box
averaging -- makes one more image of the full size (an RGBA photo took 17 bytes per pixel, four times its decoded
size). Converted band by band (about :data:`BAND_PIXELS` pixels, a multiple of the reduction factor in height),
only one band's copies exist at a time next to the decoded image and the result.

Every step is pointwise or works on blocks of ``factor`` rows that bands never split (``Image.reduce`` averages
``factor x factor`` blocks; a band starts on a multiple of ``factor``), and the white point of 32-bit gray comes
from the whole image (:func:`retrieval.features.image_files.value_top`): the result is the one a conversion in one
piece gives, pixel for pixel. The EXIF orientation is applied to the (small) result (:func:`oriented`), which
commutes with pointwise conversions.
"""

from __future__ import annotations

import numpy as np

from retrieval.features.image_files import display_rgb, value_top

BAND_PIXELS = 1 << 18
"""Pixels of the decoded image converted at once (a band of rows; at least ``factor`` rows)."""

BAND_BYTES_PER_PIXEL = {"1": 8, "L": 8, "P": 16, "RGB": 16, "YCbCr": 16, "CMYK": 16, "RGBA": 24, "LA": 24,
                        "PA": 24, "I;16": 32, "I;16B": 32, "I;16L": 32, "I;16N": 32, "I": 40, "F": 40}
"""Peak bytes per pixel of one band of a decoded image, by mode, while it is converted to gray or to display
colours (its crop, the premultiplied copy ``reduce`` makes of RGBA, the RGBA copies of compositing transparency
onto white, the float arrays of 16- and 32-bit gray): bounds the conversions' transient memory
(:mod:`retrieval.features.decode_plan`). A mode not listed counts as 40; one with a ``transparency`` colour key as
at least RGBA."""


def band_bytes_per_pixel(mode: str, info) -> int:
    """:data:`BAND_BYTES_PER_PIXEL` of ``mode`` (at least RGBA's with a ``transparency`` key in ``info``)."""
    per = BAND_BYTES_PER_PIXEL.get(mode, 40)
    return max(per, BAND_BYTES_PER_PIXEL["RGBA"]) if "transparency" in info else per

TRANSPOSES = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
              7: "TRANSVERSE", 8: "ROTATE_90"}
"""EXIF orientation -> the Pillow transpose that displays it upright (those of ``ImageOps.exif_transpose``)."""


def band_rows(width: int, factor: int = 1) -> int:
    """Rows per band of an image ``width`` pixels wide reduced by ``factor``: about :data:`BAND_PIXELS` pixels, a
    multiple of ``factor``, at least ``factor``."""
    rows = max(1, BAND_PIXELS // max(1, int(width)))
    return max(int(factor), rows // int(factor) * int(factor))


def to_gray(img, top: float | None = None) -> np.ndarray:
    """A Pillow image (or one band of it) -> gray uint8 (h, w): the colour conventions of
    :mod:`retrieval.features.image` (ITU-R 601-2 luma; transparency composited onto white; CMYK through RGB;
    16-bit gray scaled by 255 / 65535; 32-bit gray and float by ``top``, :func:`value_top` of the whole image)."""
    from PIL import Image

    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img)
        if arr.dtype.kind in "ui" and mode.startswith("I;16"):
            arr = arr.astype(np.float32) * (255.0 / 65535.0)
        else:  # 32-bit integer mode: Pillow opens some 16-bit gray files into it
            arr = arr.astype(np.float64)
            arr = arr * (255.0 / (value_top(img) if top is None else top))
        return np.clip(np.rint(arr), 0, 255).astype(np.uint8)
    if mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        return np.clip(np.rint(arr * (255.0 / (value_top(img) if top is None else top))), 0, 255).astype(np.uint8)
    if mode == "1":
        return np.asarray(img.convert("L"), dtype=np.uint8)
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in img.info) or (
        mode in ("L", "RGB") and "transparency" in img.info)
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    if img.mode == "CMYK":
        img = img.convert("RGB")
    if img.mode != "L":
        img = img.convert("L")
    return np.asarray(img, dtype=np.uint8)


def _bands(img, factor: int):
    """(first row of the result, band) of a decoded image: bands of :func:`band_rows` rows, cropped (the image
    itself when one band holds it)."""
    w, h = img.size
    step = band_rows(w, factor)
    if step >= h:
        yield 0, img
        return
    for y0 in range(0, h, step):
        yield y0 // factor, img.crop((0, y0, w, min(h, y0 + step)))


def gray_bands(img, factor: int = 1) -> np.ndarray:
    """The gray working image of a decoded image (:func:`to_gray`), box-averaged by ``factor`` first
    (``Image.reduce``; ``factor`` must divide both sides, and the mode be one ``reduce`` takes), converted band by
    band (module docstring): equal to ``to_gray(img.reduce(factor))``."""
    w, h = img.size
    out = np.empty((-(-h // factor), -(-w // factor)), np.uint8)
    top = value_top(img)
    for y, band in _bands(img, factor):
        part = band.reduce(factor) if factor > 1 else band
        gray = to_gray(part, top)
        out[y:y + gray.shape[0]] = gray
        del band, part, gray
    return out


def display_bands(img, factor: int = 1):
    """The display colours of a decoded image (:func:`retrieval.features.image_files.display_rgb`: an RGB Pillow
    image), box-averaged by ``factor`` (any integer: ``Image.reduce`` averages the partial blocks of the right and
    bottom edges), converted band by band (module docstring)."""
    from PIL import Image

    w, h = img.size
    top = value_top(img)
    if band_rows(w, factor) >= h:   # one band: no copy into a new picture
        rgb = display_rgb(img, top)
        return rgb.reduce(factor) if factor > 1 else rgb
    out = Image.new("RGB", (-(-w // factor), -(-h // factor)))
    for y, band in _bands(img, factor):
        rgb = display_rgb(band, top)
        if factor > 1:
            rgb = rgb.reduce(factor)
        out.paste(rgb, (0, y))
        del band, rgb
    return out


def oriented(img, orientation: int):
    """A Pillow image displayed as the EXIF ``orientation`` asks (the transposes of ``ImageOps.exif_transpose``);
    itself for orientation 1."""
    from PIL import Image

    name = TRANSPOSES.get(int(orientation))
    return img if name is None else img.transpose(getattr(Image.Transpose, name))


def oriented_gray(gray: np.ndarray, orientation: int) -> np.ndarray:
    """:func:`oriented` for a gray uint8 array."""
    from PIL import Image

    if TRANSPOSES.get(int(orientation)) is None:
        return gray
    return np.asarray(oriented(Image.fromarray(gray, "L"), orientation), dtype=np.uint8)
