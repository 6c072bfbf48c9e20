"""How an image file is decoded, and what that costs in memory, read from its header before any pixel is decoded.

:func:`feature_plan` is what :func:`retrieval.features.image.load_image` does with a file (the features' gray
working image), :func:`display_plan` what :func:`retrieval.features.image.load_display` does (thumbnails): the size
decoded (a JPEG reduced by 2, 4 or 8 in its decoder, Pillow's ``draft``) and the ``Image.reduce`` factor applied
band by band after the decode (:mod:`retrieval.features.image_bands`). :func:`decode_cost` and
:func:`display_cost` bound the peak memory of those calls from above (the server's decode budget,
:mod:`retrieval.web.budget`, reserves it before decoding).

The bound (:func:`decoder_bytes`, :data:`STORED_BYTES`): the decoded image as Pillow stores it (4 bytes per pixel
for RGB, RGBA, LA, CMYK, 32-bit modes; 2 for 16-bit gray; 1 for L, P and 1), plus what the format's decoder holds
at its peak besides it, plus one band of the conversion (:data:`~retrieval.features.image_bands.BAND_PIXELS`
pixels at :data:`~retrieval.features.image_bands.BAND_BYTES_PER_PIXEL` of its mode), plus the (small) result, times
:data:`MARGIN`, plus :data:`FIXED_BYTES`. What each decoder holds was measured with the peak RSS (VmHWM) of a
fresh process opening and loading 6 and 24 megapixel files of every format and mode (Pillow 13, pillow-heif 1.8;
tests/features/test_decode_cost_formats.py checks each against its estimate):

- JPEG: nothing but a few rows; a progressive JPEG keeps every DCT coefficient of the *full-size* image (2 bytes
  per coefficient, whatever the draft: 3 bytes per pixel at 4:2:0, 6 at 4:4:4, 8 for CMYK);
- PNG and GIF: the decoded image (and a PNG's text chunks; a GIF's file); BMP and PPM: the decoded image and the
  file (an uncompressed one may be mapped into memory);
- TIFF: libtiff maps the file into memory and decodes one strip or tile at a time (its size from the header);
- WebP: Pillow decodes through libwebp's animation decoder, which keeps two RGBA canvases, and copies the frame out
  once more: 12 bytes per pixel besides the image (16 in all, measured 16.0 to 17.2, lossy or lossless, any
  mode), and the file twice;
- AVIF: the YUV planes (their depth and subsampling read from the ``av1C`` box), the RGB(A) conversion and its
  copy: measured 9.2 (RGB 4:2:0) to 13.8 (RGBA 4:4:4) bytes per pixel;
- HEIC / HEIF: the YUV planes and libheif's interleaved RGB(A) (16 bits per sample above 8-bit depth, then an
  8-bit copy): measured 7.4 (8-bit 4:2:0) to 20.8 (10-bit RGBA 4:4:4) bytes per pixel;
- camera RAW (LibRaw, :func:`raw_bytes`): its embedded JPEG preview as a JPEG (and its bytes), or LibRaw's copy of
  the sensor data (2 bytes a photosite), its working image (8 bytes a developed pixel) and the 8-bit result:
  measured (rawpy 0.28, LibRaw 0.22) 4.8 bytes per photosite developed at half size, 13.1 at full size, 0.6 to 0.8
  through a 1,616-pixel preview (a 24-megapixel DNG).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from retrieval.features.image_bands import band_bytes_per_pixel, band_rows
from retrieval.features.image_files import (
    DRAFT_FORMATS,
    DRAFT_MODES,
    RAW_FORMAT_NAMES,
    exif_orientation,
    peek_image,
)

DEFAULT_MAX_SIDE = 1024

REDUCE_MODES = ("all", "jpeg", "none")
"""What :func:`retrieval.features.image.load_image` decodes reduced (its ``reduce``): ``"all"`` (the default) a
JPEG or MPO through its decoder's DCT scaling and any other format through ``Image.reduce``; ``"jpeg"`` only files
Pillow names ``JPEG`` (the decoder of the library up to 0.1, kept for the indexes made with it); ``"none"``: every
file decoded in full, then resized (for comparisons)."""

REDUCE_IMAGE_MODES = ("L", "RGB", "RGBA", "LA")
"""Pillow modes ``Image.reduce`` is used on for the features (other modes, and files with a ``transparency``
colour key, are resized from their full decode)."""

MAX_DRAFT_REDUCTION = 8
"""JPEG decoding can reduce by 2, 4 or 8 in the DCT domain (Pillow's ``draft``)."""

STORED_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}
"""Bytes per pixel of a decoded Pillow image by mode (every other mode: 4; Pillow stores RGB as RGBX)."""

FIXED_BYTES = 12 << 20
"""Added to every estimate: the decoder's tables, the resize's buffers and the objects of one decode (the intercept
of the measurements was under 6 MB). OpenCV's one-time set-up in a process (its thread pool and CPU-dispatched resize
code, up to 13 MB on some CPUs) is the process's, paid by its first decode only, and not in it."""

MARGIN = 1.1
"""Every estimate is the model times this."""

ROW_BYTES = 64
"""Bytes per pixel of image width a decoder keeps in row buffers (JPEG's MCU rows, PNG's filter rows)."""

RAW_SENSOR_BYTES = 2
"""Bytes per photosite of LibRaw's copy of a Bayer sensor's data (16 bits)."""

RAW_IMAGE_BYTES = 8
"""Bytes per developed pixel of LibRaw's working image (four 16-bit channels), at half or full size."""

RAW_DEMOSAIC_BYTES = 8 << 20
"""What LibRaw's full-size demosaic (AHD, 512 x 512 tiles of 26 bytes per pixel) holds in each of its OpenMP
threads besides its images."""


@dataclass(frozen=True)
class DecodePlan:
    """What decoding a file does: ``draft`` (the box asked of a JPEG's DCT scaling, in the file's axes; None: no
    draft), ``decoded`` (the size decoded), ``factor`` (the ``Image.reduce`` factor after it), ``target`` (the final
    size, after EXIF orientation; None: the reduced size as it is)."""

    draft: tuple[int, int] | None
    decoded: tuple[int, int]
    factor: int
    target: tuple[int, int] | None

    @property
    def reduced(self) -> tuple[int, int]:
        """The decoded size divided by ``factor`` (rounded up): the image converted."""
        return -(-self.decoded[0] // self.factor), -(-self.decoded[1] // self.factor)


@dataclass(frozen=True)
class DecodeCost:
    """What decoding an image file costs, read from its header (:func:`decode_cost`, :func:`display_cost`).

    ``size``: (width, height) of the file; ``decoded``: (width, height) of the decoded image once reduced (by a
    JPEG's draft in its decoder, or by ``Image.reduce`` after the decode, :class:`DecodePlan`); ``mode`` and
    ``format`` as Pillow names them; ``bytes``: an upper bound of the peak memory."""

    size: tuple[int, int]
    decoded: tuple[int, int]
    mode: str
    format: str
    bytes: int


def drafts(reduce: str, fmt, mode: str) -> bool:
    """Whether a file of Pillow format ``fmt`` and mode ``mode`` is decoded reduced by its JPEG decoder; a camera
    RAW file always is (its preview or LibRaw's half-size development, whatever ``reduce``: a RAW file has no
    decode at full size that ``"none"`` could compare with)."""
    if fmt in RAW_FORMAT_NAMES:
        return True
    formats = DRAFT_FORMATS if reduce == "all" else ("JPEG",) if reduce == "jpeg" else ()
    return fmt in formats and mode in DRAFT_MODES


def reduce_factor(reduce: str, fmt, mode: str, info, size, target) -> int:
    """The ``Image.reduce`` factor for a decoded image of ``size`` and working size ``target`` (same axes): the
    largest integer dividing both sides that keeps them at least the target (a partial block at the edge would
    shift the working image by up to half a pixel); 1 (no reduction) when there is none >= 2, for a JPEG already
    drafted and for the modes outside :data:`REDUCE_IMAGE_MODES`."""
    if (reduce != "all" or fmt in DRAFT_FORMATS or fmt in RAW_FORMAT_NAMES or mode not in REDUCE_IMAGE_MODES
            or "transparency" in info):
        return 1
    for f in range(min(size[0] // target[0], size[1] // target[1]), 1, -1):
        if size[0] % f == 0 and size[1] % f == 0:
            return f
    return 1


def draft_size(fmt: str, mode: str, size, target, reduce: str = "all", info=None) -> tuple[int, int]:
    """The size Pillow's JPEG ``draft`` decodes at for a working size ``target`` (the full size otherwise); a RAW
    file's (``info["raw"]``, :meth:`retrieval.features.raw_files.RawSource.choose`): its preview's, half or full."""
    w, h = size
    if target is None or not drafts(reduce, fmt, mode) or target[0] >= w:
        return w, h
    if fmt in RAW_FORMAT_NAMES:
        return info["raw"].choose(target)[1]
    for k in (MAX_DRAFT_REDUCTION, 4, 2):
        dw, dh = -(-w // k), -(-h // k)
        if dw >= target[0] and dh >= target[1]:
            return dw, dh
    return w, h


def _turned(size, orientation: int) -> tuple[int, int]:
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else (size[0], size[1])


def feature_plan(size, mode: str, fmt, info, orientation: int, *, max_side: int | None = DEFAULT_MAX_SIDE,
                 upscale_to: int | None = None, reduce: str = "all") -> DecodePlan:
    """How :func:`retrieval.features.image.load_image` decodes a file of ``size`` (its own axes), ``mode`` and
    ``fmt`` whose EXIF orientation is ``orientation``: the working size (larger side ``max_side``, or enlarged to
    ``upscale_to``), a JPEG's draft never below it, the ``reduce`` factor of the other formats."""
    W, H = _turned(size, orientation)
    target = None
    if max_side is not None and max(W, H) > max_side:
        f = max_side / max(W, H)
        target = (max(1, round(W * f)), max(1, round(H * f)))
    elif upscale_to is not None and max(W, H) < upscale_to:
        f = upscale_to / max(W, H)
        target = (max(1, round(W * f)), max(1, round(H * f)))
    shrink = None if target is None or target[0] >= W else _turned(target, orientation)
    draft = shrink if shrink is not None and drafts(reduce, fmt, mode) else None
    decoded = draft_size(fmt, mode, size, draft, reduce, info) if draft is not None else tuple(size)
    factor = 1 if shrink is None else reduce_factor(reduce, fmt, mode, info, decoded, shrink)
    return DecodePlan(draft, (int(decoded[0]), int(decoded[1])), factor, target)


def display_plan(size, mode: str, fmt, orientation: int, side: int, info=None) -> DecodePlan:
    """How :func:`retrieval.features.image.load_display` decodes a file for a picture of larger side ``side``: a
    JPEG (or a RAW file, whose ``info``: its header) drafted to the picture's size, then any format box-averaged to
    at least twice ``side`` (the last resampling, Lanczos, has twice the pixels it needs)."""
    W, H = _turned(size, orientation)
    draft = None
    if max(W, H) > side:
        f = side / max(W, H)
        shrink = _turned((max(1, round(W * f)), max(1, round(H * f))), orientation)
        draft = shrink if drafts("all", fmt, mode) else None
    decoded = draft_size(fmt, mode, size, draft, info=info) if draft is not None else tuple(size)
    factor = max(1, max(decoded) // (2 * side))
    return DecodePlan(draft, (int(decoded[0]), int(decoded[1])), factor, None)


def _av1_layout(path) -> tuple[int, float]:
    """(bytes per sample, chroma samples per luma sample) of an AVIF file, from its first ``av1C`` box (high bit
    depth, monochrome, chroma subsampling); the worst case (2, 2.0) when it is not found in the first 256 KB."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 18)
    except OSError:
        return 2, 2.0
    i = head.find(b"av1C")
    if i < 0 or i + 7 > len(head):
        return 2, 2.0
    flags = head[i + 6]   # seq_tier_0, high_bitdepth, twelve_bit, monochrome, subsampling_x, subsampling_y, ...
    depth = 2 if flags & 0x40 else 1
    if flags & 0x10:
        return depth, 0.0
    sx, sy = bool(flags & 0x08), bool(flags & 0x04)
    return depth, 0.5 if sx and sy else 1.0 if sx else 2.0


def _tiff_buffer(img, width: int, height: int) -> int:
    """Bytes of the strip or tile buffer libtiff decodes a compressed TIFF's first page through (in RGBA for JPEG /
    YCbCr files); none for an uncompressed one (Pillow reads its rows itself)."""
    tags = getattr(img, "tag_v2", {})
    compression = int(tags.get(259) or 1)
    if compression == 1:
        return 0
    bits = tags.get(258) or (8,)
    bits = max(bits) if isinstance(bits, tuple) else int(bits)
    per_pixel = int(tags.get(277) or 1) * bits / 8
    if compression in (6, 7) or int(tags.get(262) or 0) == 6:
        per_pixel = max(per_pixel, 4.0)
    if tags.get(322) and tags.get(323):
        return int(int(tags[322]) * int(tags[323]) * per_pixel)
    rows = min(height, int(tags.get(278) or height))
    return int(rows * width * per_pixel)


def raw_bytes(source, decoded: tuple[int, int]) -> int:
    """What decoding a camera RAW file (its header ``source``, a :class:`retrieval.features.raw_files.RawSource`)
    at the size ``decoded`` holds at its peak besides the decoded image (module docstring): the way
    :meth:`~retrieval.features.raw_files.RawSource.choose` takes to that size, then

    - a development (``half`` or ``full``): LibRaw's sensor data (:data:`RAW_SENSOR_BYTES` per photosite, margins
      included), its working image (4 16-bit channels, :data:`RAW_IMAGE_BYTES`, per pixel developed) and the 8-bit
      RGB result (3 bytes per pixel), plus a full development's demosaic buffers (:data:`RAW_DEMOSAIC_BYTES` in each
      of LibRaw's OpenMP threads, one per core); LibRaw's memory is freed before the decoded image is made of its
      result, so the decoded image's 4 bytes per pixel are taken off (the result, 3 bytes per pixel, lives with it);
    - a JPEG preview: the preview's bytes three times (LibRaw's buffer, its copy, Python's bytes) and its decoder's
      (:func:`decoder_bytes` of the preview's header: rows, and every coefficient of a progressive one); a bitmap
      preview: its RGB pixels twice (LibRaw's buffer and its copy);

    and the file once more when it is given as bytes (LibRaw's buffer)."""
    extra = source.file_bytes if isinstance(source.source, (bytes, bytearray)) else 0
    dw, dh = decoded
    # a Bayer sensor's data is one 16-bit value per photosite; the others' (X-Trans, Foveon, linear DNG) counted as
    # four (LibRaw keeps a Foveon's or a linear DNG's as four channels)
    sensor = RAW_SENSOR_BYTES * source.raw_size[0] * source.raw_size[1] * (1 if source.halvable else 4)
    if tuple(decoded) == tuple(source.size) or (source.halvable and tuple(decoded) == source.half_size):
        full = tuple(decoded) == tuple(source.size)
        demosaic = RAW_DEMOSAIC_BYTES * (os.cpu_count() or 1) if full else 0
        libraw = sensor + (RAW_IMAGE_BYTES + 3 - STORED_BYTES.get("RGB", 4)) * dw * dh + demosaic
        return int(max(libraw, 3 * dw * dh)) + extra
    preview = source.whole_preview()
    if preview is None:   # not the way choose() takes: the most a development needs
        return raw_bytes(source, source.size)
    if preview.kind == "BITMAP":
        return 2 * preview.nbytes + extra
    return 3 * preview.nbytes + decoder_bytes(preview.header, None, preview.size, decoded) + extra


def decoder_bytes(img, path, full: tuple[int, int], decoded: tuple[int, int]) -> int:
    """What the decoder of the (header-only) Pillow image ``img`` of the file ``path`` holds at its peak besides
    the decoded image (module docstring). ``full``: the file's size; ``decoded``: the size it is decoded at."""
    fmt = img.format or ""
    W, H = full
    if fmt in RAW_FORMAT_NAMES:
        return raw_bytes(img.info["raw"], decoded)
    try:
        file_bytes = os.path.getsize(path)
    except (OSError, TypeError):
        file_bytes = 0
    rows = ROW_BYTES * W
    if fmt in DRAFT_FORMATS:
        if not (img.info.get("progressive") or img.info.get("progression")):
            return rows
        layers = getattr(img, "layer", None) or [(0, 1, 1, 0)] * len(img.getbands())
        hmax = max(h for _, h, _, _ in layers)
        vmax = max(v for _, _, v, _ in layers)
        coefficients = sum(math.ceil(math.ceil(W * h / hmax) / 8) * math.ceil(math.ceil(H * v / vmax) / 8) * 128
                           for _, h, v, _ in layers)
        return rows + coefficients
    alpha = img.mode in ("RGBA", "LA", "PA")
    if fmt == "WEBP":
        return 12 * W * H + 2 * file_bytes + rows
    if fmt == "AVIF":
        depth, chroma = _av1_layout(path)
        planes = depth * (1 + chroma + (1 if alpha else 0))
        return int((8 + planes) * W * H) + 2 * file_bytes + rows
    if fmt == "HEIF":
        depth = 2 if int(img.info.get("bit_depth") or 8) > 8 else 1
        chroma = {420: 0.5, 422: 1.0, 444: 2.0, 400: 0.0}.get(img.info.get("chroma"), 2.0)
        channels = 4 if alpha else 3
        planes = depth * (1 + chroma + (1 if alpha else 0))
        interleaved = channels * depth + (channels if depth > 1 else 0)
        return int((interleaved + planes) * W * H) + 2 * file_bytes + rows
    if fmt == "TIFF":   # the first page's strips or tiles are what is read of the file
        counts = getattr(img, "tag_v2", {}).get(279) or getattr(img, "tag_v2", {}).get(325)
        pages = sum(counts) if isinstance(counts, tuple) else int(counts or 0)
        return min(file_bytes, pages or file_bytes) + _tiff_buffer(img, W, H) + rows
    if fmt == "GIF":
        return rows + file_bytes
    if fmt == "PNG":   # read as a stream; its text chunks (already parsed in the header) are read again
        return rows + sum(len(v) for v in img.info.values() if isinstance(v, (str, bytes)))
    return file_bytes + rows   # BMP, PPM (a file mapped into memory), others


def _estimate(img, path, plan: DecodePlan, out_bytes_per_pixel: float) -> int:
    dw, dh = plan.decoded
    stored = dw * dh * STORED_BYTES.get(img.mode, 4)
    band = min(dh, band_rows(dw, plan.factor)) * dw * band_bytes_per_pixel(img.mode, img.info)
    reduced = plan.reduced[0] * plan.reduced[1]
    final = plan.target[0] * plan.target[1] if plan.target is not None else 0
    model = (decoder_bytes(img, path, img.size, plan.decoded) + stored + band
             + out_bytes_per_pixel * (reduced + final))
    return FIXED_BYTES + int(MARGIN * model)


def decode_cost(path, *, max_side: int | None = DEFAULT_MAX_SIDE, draft_box: tuple[int, int] | None = None,
                reduce: str = "all", upscale_to: int | None = None, name: str | None = None) -> DecodeCost:
    """An upper bound of the memory :func:`retrieval.features.image.load_image` needs for ``path`` with
    ``max_side``, ``upscale_to`` and ``reduce``, computed from the header (no pixel is decoded; module
    docstring). ``decoded`` is the size decoded (a JPEG's draft size). ``draft_box``: the size asked of a JPEG's
    draft instead of the working size. ``name``: the file's own name when ``path`` is a temporary file (an upload;
    a RAW file is recognised by it). Raises :class:`~retrieval.features.image_files.ImageReadError` when the
    header is unreadable."""
    if reduce not in REDUCE_MODES:
        raise ValueError(f"decode_cost: reduce must be one of {', '.join(REDUCE_MODES)}; got {reduce!r}.")
    with peek_image(path, name=name) as img:   # the header only: no decoding
        orientation = exif_orientation(img)   # read without decoding (a PNG's eXIf chunk too)
        plan = feature_plan(img.size, img.mode, img.format, img.info, orientation, max_side=max_side,
                            upscale_to=upscale_to, reduce=reduce)
        if draft_box is not None:
            decoded = draft_size(img.format or "", img.mode, img.size, tuple(draft_box), reduce, img.info)
            plan = DecodePlan(tuple(draft_box), decoded, 1, plan.target)
        # the gray result (1 byte per pixel), its turned copy, the resize's
        nbytes = _estimate(img, path, plan, 2 + (orientation != 1))
        return DecodeCost(tuple(img.size), plan.reduced, img.mode, img.format or "", nbytes)


def display_cost(path, side: int) -> DecodeCost:
    """An upper bound of the memory :func:`retrieval.features.image.load_display` (a thumbnail of larger side
    ``side``) needs for ``path``, from its header (module docstring)."""
    with peek_image(path) as img:
        orientation = exif_orientation(img)
        plan = display_plan(img.size, img.mode, img.format, orientation, side, img.info)
        # the reduced RGB picture (4 bytes per pixel), its turned copy, the resampling's (a quarter of it)
        nbytes = _estimate(img, path, plan, 6 + 4 * (orientation != 1))
        return DecodeCost(tuple(img.size), plan.reduced, img.mode, img.format or "", nbytes)
