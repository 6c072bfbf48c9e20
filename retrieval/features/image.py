"""Image loading: any common file -> a gray uint8 working image plus the scale back to original pixels.

Which files are images and how one is opened (formats, plugins, guards) is :mod:`retrieval.features.image_files`;
its public names (:data:`IMAGE_EXTENSIONS`, :func:`is_image_name`, :func:`open_image`, :func:`peek_image`,
:class:`ImageReadError`, ...) are importable from here too.

Conventions (documented in docs/formats.md, "Features"):

- Orientation: the EXIF ``Orientation`` tag is applied first (``PIL.ImageOps.exif_transpose``); every size, frame
  and box in the library is in pixels of the *original image after EXIF rotation*.
- Pixel centres: the centre of the top-left pixel is ``(0, 0)``; the image covers ``[-0.5, w - 0.5]``. A working
  image downscaled by ``s`` (original pixels per working pixel) maps working coordinates to original ones by
  ``x_orig = s * (x_work + 0.5) - 0.5`` (:func:`working_to_original`).
- Colour: gray = ITU-R 601-2 luma (Pillow's ``convert("L")``); transparent pixels are composited onto white;
  CMYK goes through Pillow's CMYK -> RGB conversion; 16-bit gray is scaled by 255 / 65535.
- Decoding at the size needed (``reduce``, :data:`REDUCE_MODES`): a file much larger than the working image is
  first decoded reduced by an integer factor that keeps both sides at least the working size, then resized exactly
  as a full decode would be. A JPEG (and a camera's multi-picture JPEG, MPO) is reduced by 2, 4 or 8 inside its
  decoder (Pillow's ``draft``: DCT scaling, about 3x faster than a full decode at 12 megapixels); any other
  format is decoded in full and box-averaged by ``Image.reduce(f)`` (``f >= 2`` dividing both sides) before its
  gray conversion (less memory, no faster). The working image differs from a full decode's by a few grey levels on edges, so the
  features do too: :class:`retrieval.features.FeatureExtractor` names its decoder in its configuration.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.image_files import (  # noqa: F401 - the public names of image files, read from here too
    AVIF_EXTENSIONS,
    DEFAULT_MAX_MEGAPIXELS,
    DRAFT_FORMATS,
    DRAFT_MODES,
    FORMAT_EXTENSIONS,
    HEIF_EXTENSIONS,
    IMAGE_EXTENSIONS,
    ImageReadError,
    check_pixels,
    display_rgb,
    exif_orientation,
    is_image_name,
    open_image,
    opened,
    peek_image,
    register_image_plugins,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_SIDE = 1024
DEFAULT_MIN_SIDE = 16

REDUCE_MODES = ("all", "jpeg", "none")
"""What :func:`load_image` decodes reduced (its ``reduce``): ``"all"`` (the default) a JPEG or MPO through its
decoder's DCT scaling and any other format through ``Image.reduce``; ``"jpeg"`` only files Pillow names ``JPEG``
(the decoder of the library up to 0.1, kept for the indexes made with it); ``"none"``: every file decoded in full,
then resized (for comparisons)."""

REDUCE_IMAGE_MODES = ("L", "RGB", "RGBA", "LA")
"""Pillow modes ``Image.reduce`` is used on (other modes, and files with a ``transparency`` colour key, are
resized from their full decode)."""


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image at the working scale.

    Attributes
    ----------
    pixels : ndarray of shape (h, w), dtype uint8
        Gray working image (C-contiguous).
    scale : float
        Original pixels per working pixel (>= 1; 1.0 when not downscaled): ``max(original_size) / max(h, w)``.
    original_size : tuple of int
        ``(width, height)`` of the original image after EXIF orientation.
    orientation : int
        The EXIF orientation tag that was applied (1 = none, 6 = rotate 90 degrees clockwise, ...).
    path : str or None
        The file it came from.
    scale_xy : tuple of float
        Exact per-axis scales ``(W / w, H / h)`` used to map frames back (they differ from ``scale`` only by
        the rounding of the working size).
    """

    pixels: np.ndarray
    scale: float
    original_size: tuple[int, int]
    orientation: int = 1
    path: str | None = None
    scale_xy: tuple[float, float] = (1.0, 1.0)

    @property
    def size(self) -> tuple[int, int]:
        """``(w, h)`` of the working image."""
        return (int(self.pixels.shape[1]), int(self.pixels.shape[0]))

    @classmethod
    def from_array(cls, pixels, *, path=None) -> LoadedImage:
        """Wrap a gray (h, w) or colour (h, w, 3) uint8 array already at original scale (scale 1)."""
        arr = np.asarray(pixels)
        if arr.ndim == 3 and arr.shape[2] in (3, 4):
            arr = (arr[..., :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)).round()
        if arr.ndim != 2:
            raise ValueError(f"pixels must have shape (h, w) or (h, w, 3); got {np.shape(pixels)}.")
        arr = np.ascontiguousarray(np.clip(arr, 0, 255).astype(np.uint8))
        h, w = arr.shape
        return cls(arr, 1.0, (int(w), int(h)), 1, None if path is None else str(path), (1.0, 1.0))


def working_to_original(xy, scale_xy) -> np.ndarray:
    """Map working-image coordinates to original-image coordinates (pixel-centre convention, module doc).

    Parameters
    ----------
    xy : ndarray of shape (n, 2), float
    scale_xy : (float, float)

    Returns
    -------
    ndarray of shape (n, 2), dtype float32
    """
    xy = np.asarray(xy, dtype=np.float64)
    s = np.asarray(scale_xy, dtype=np.float64)
    return (s * (xy + 0.5) - 0.5).astype(np.float32)


def _to_gray(img, path) -> np.ndarray:
    from PIL import Image

    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img)
        if arr.dtype.kind in "ui" and mode.startswith("I;16"):
            arr = arr.astype(np.float32) * (255.0 / 65535.0)
        else:  # 32-bit integer mode: Pillow opens 16-bit PNG/TIFF gray into it
            arr = arr.astype(np.float64)
            top = 65535.0 if arr.max(initial=0) > 255 else 255.0
            arr = arr * (255.0 / top)
        return np.clip(np.rint(arr), 0, 255).astype(np.uint8)
    if mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        top = 1.0 if arr.max(initial=0) <= 1.0 else 255.0
        return np.clip(np.rint(arr * (255.0 / top)), 0, 255).astype(np.uint8)
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


def load_image(path, *, max_side: int | None = DEFAULT_MAX_SIDE, max_megapixels: float = DEFAULT_MAX_MEGAPIXELS,
               min_side: int = DEFAULT_MIN_SIDE, upscale_to: int | None = None, reduce: str = "all") -> LoadedImage:
    """Read an image file into a gray uint8 working image, EXIF orientation applied, downscaled to ``max_side``
    (and, with ``upscale_to``, a small image enlarged).

    The usual Holidays/Oxford practice: images are processed with their larger side at most 1024 px and
    features reported in original coordinates (Jegou et al. 2012, section II, "experimental setup of [12]").

    Parameters
    ----------
    path : str or Path
        JPEG, PNG, TIFF, WebP, BMP, PPM / PGM, GIF (its first frame), HEIC / HEIF, AVIF (:data:`IMAGE_EXTENSIONS`,
        recognised by content; anything else Pillow reads is accepted too), opened as
        :func:`retrieval.features.image_files.open_image` opens them, in modes L, RGB, RGBA, P (+transparency), CMYK, I;16 / I (16-bit), F, 1.
    max_side : int or None
        The working image's larger side is at most this (area-averaging downscale); None keeps full size.
    max_megapixels : float
        Images larger than this (width * height / 1e6, read from the header before decoding) are refused
        (decompression-bomb guard; Pillow's own limit, about 179 MP, is raised to it when lower).
    min_side : int
        Images whose smaller side is below this are refused.
    upscale_to : int or None
        An image whose larger side is below this is enlarged (bicubic) so that its larger side is this; None (the
        default) never enlarges. Thumbnails (Holidays' 325x243) then give the detector structures of a few pixels
        more room (docs/results.md, "Small images").
    reduce : {"all", "jpeg", "none"}, default "all"
        Which files are decoded reduced when the working image is at most half their size (:data:`REDUCE_MODES`,
        module doc). ``original_size``, ``scale`` and ``scale_xy`` always refer to the original file.

    Returns
    -------
    LoadedImage

    Raises
    ------
    ImageReadError
        0-byte, truncated, corrupt or non-image file, too large or too small; the message names the file.
    """
    from PIL import ImageOps

    if max_side is not None:
        check_scalar(max_side, "max_side", "load_image", low=8)
    check_scalar(max_megapixels, "max_megapixels", "load_image", kind=numbers.Real, low=0.0, closed="neither")
    check_scalar(min_side, "min_side", "load_image", low=1)
    if upscale_to is not None:
        check_scalar(upscale_to, "upscale_to", "load_image", low=8)
    if reduce not in REDUCE_MODES:
        raise ValueError(f"load_image: reduce must be one of {', '.join(REDUCE_MODES)}; got {reduce!r}.")
    path = Path(path)
    with opened(path, max_megapixels=max_megapixels) as img:
        w0, h0 = img.size
        check_pixels(path, w0, h0, max_megapixels, min_side)
        orientation = exif_orientation(img)
        W, H = (h0, w0) if orientation in (5, 6, 7, 8) else (w0, h0)
        target = None
        if max_side is not None and max(W, H) > max_side:
            f = max_side / max(W, H)
            target = (max(1, round(W * f)), max(1, round(H * f)))
        elif upscale_to is not None and max(W, H) < upscale_to:
            f = upscale_to / max(W, H)
            target = (max(1, round(W * f)), max(1, round(H * f)))
        # the target in the file's own axes (before the EXIF rotation)
        shrink = None if target is None or target[0] >= W else (
            (target[1], target[0]) if orientation in (5, 6, 7, 8) else target)
        try:
            pixels = img
            if shrink is not None and _drafts(reduce, img.format, img.mode):
                # DCT-domain reduction by a power of two, never below the target (then exact resize below)
                img.draft(img.mode, shrink)
            img.load()
            factor = 1 if shrink is None else _reduce_factor(reduce, img.format, img.mode, img.info, img.size, shrink)
            if factor > 1:
                pixels = img.reduce(factor)   # box average; the exact resize below
            oriented = ImageOps.exif_transpose(pixels) if orientation != 1 else pixels
            gray = _to_gray(oriented, path)
        except ImageReadError:
            raise
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise ImageReadError(path, f"corrupt or truncated image data ({exc})") from None
    if target is not None and (gray.shape[1], gray.shape[0]) != target:
        gray = _resize(gray, target)
    h, w = gray.shape
    return LoadedImage(pixels=np.ascontiguousarray(gray), scale=max(W, H) / max(w, h), original_size=(W, H),
                       orientation=orientation, path=str(path), scale_xy=(W / w, H / h))


DECODE_BYTES_PER_PIXEL = {"RGBA": 18, "LA": 18, "PA": 18, "RGBa": 18, "La": 18, "alpha": 18, "RGB": 8, "YCbCr": 8,
                          "CMYK": 10, "L": 5, "P": 5, "1": 5, "I;16": 15, "I;16B": 15, "I;16L": 15, "I;16N": 15,
                          "I": 24, "F": 24}
"""Peak bytes per decoded pixel of :func:`load_image`, by Pillow mode: the decoded image, the conversions to gray
(compositing onto white for transparency, 16-bit scaling) and the gray copies; measured with the peak RSS of a
process loading 4000 x 3000, 8000 x 6000 and 12000 x 12000 images (RGBA 17.0 to 17.3, 16-bit gray 14.1, CMYK 9.1,
RGB 8.0, L 4.9), rounded up. Other
modes count as RGBA."""

REDUCE_BYTES_PER_PIXEL = {"L": 2, "RGB": 5, "RGBA": 9, "LA": 9}
"""Peak bytes per pixel of the *full* decode of a file that :func:`load_image` reduces with ``Image.reduce``
(:data:`REDUCE_IMAGE_MODES`): the decoded image and ``reduce``'s own copy (RGBA and LA are reduced premultiplied:
one more full-size copy); the reduced image then costs :data:`DECODE_BYTES_PER_PIXEL` per reduced pixel. Measured
as the table above, with the peak RSS of a process loading 4000 x 3000 and 8000 x 6000 PNGs to 1024 px, all pixels
counted: L 1.7, RGB 5.1, RGBA and LA 8.7 bytes per original pixel (3.3, 7.3, 17.3 decoded in full), rounded up."""

MAX_DRAFT_REDUCTION = 8
"""JPEG decoding can reduce by 2, 4 or 8 in the DCT domain (Pillow's ``draft``)."""


@dataclass(frozen=True)
class DecodeCost:
    """What decoding an image file costs, read from its header (:func:`decode_cost`).

    ``size``: (width, height) of the file; ``decoded``: (width, height) actually decoded (smaller for a JPEG decoded
    reduced); ``mode`` and ``format`` as Pillow names them; ``bytes``: the peak memory of :func:`load_image`."""

    size: tuple[int, int]
    decoded: tuple[int, int]
    mode: str
    format: str
    bytes: int


def _drafts(reduce: str, fmt, mode: str) -> bool:
    """Whether a file of Pillow format ``fmt`` and mode ``mode`` is decoded reduced by its JPEG decoder."""
    formats = DRAFT_FORMATS if reduce == "all" else ("JPEG",) if reduce == "jpeg" else ()
    return fmt in formats and mode in DRAFT_MODES


def _reduce_factor(reduce: str, fmt, mode: str, info, size, target) -> int:
    """The ``Image.reduce`` factor for a decoded image of ``size`` and working size ``target`` (same axes): the
    largest integer dividing both sides that keeps them at least the target (a partial block at the edge would
    shift the working image by up to half a pixel); 1 (no reduction) when there is none >= 2, for a JPEG already
    drafted and for the modes outside :data:`REDUCE_IMAGE_MODES`."""
    if reduce != "all" or fmt in DRAFT_FORMATS or mode not in REDUCE_IMAGE_MODES or "transparency" in info:
        return 1
    for f in range(min(size[0] // target[0], size[1] // target[1]), 1, -1):
        if size[0] % f == 0 and size[1] % f == 0:
            return f
    return 1


def _draft_size(fmt: str, mode: str, size, target, reduce: str = "all") -> tuple[int, int]:
    """The size Pillow's JPEG ``draft`` decodes at for a working size ``target`` (the full size otherwise)."""
    w, h = size
    if target is None or not _drafts(reduce, fmt, mode) or target[0] >= w:
        return w, h
    for k in (MAX_DRAFT_REDUCTION, 4, 2):
        dw, dh = -(-w // k), -(-h // k)
        if dw >= target[0] and dh >= target[1]:
            return dw, dh
    return w, h


def decode_cost(path, *, max_side: int | None = DEFAULT_MAX_SIDE, draft_box: tuple[int, int] | None = None,
                reduce: str = "all") -> DecodeCost:
    """The memory :func:`load_image` needs for ``path`` with ``max_side`` and ``reduce``, computed from the header
    (no pixel is decoded): the decoded size (a JPEG is decoded reduced, in the DCT domain, to what ``max_side``
    needs) times :data:`DECODE_BYTES_PER_PIXEL` of its mode; for a file reduced after a full decode
    (``Image.reduce``), the full decode (:data:`REDUCE_BYTES_PER_PIXEL`) plus the reduced image's conversions
    (``decoded`` is then the reduced size). ``draft_box``: the size asked of a JPEG's draft instead (a thumbnail
    asks ``(side, side)``; other formats are then costed in full). Raises :class:`ImageReadError` when the header
    is unreadable."""

    if reduce not in REDUCE_MODES:
        raise ValueError(f"decode_cost: reduce must be one of {', '.join(REDUCE_MODES)}; got {reduce!r}.")
    with peek_image(path) as im:   # the header only: no decoding
        w, h, mode, fmt = im.size[0], im.size[1], im.mode, im.format or ""
        info = dict(im.info)
        alpha = "transparency" in info
    target = None
    if max_side is not None and max(w, h) > max_side:
        f = max_side / max(w, h)
        target = (max(1, round(w * f)), max(1, round(h * f)))
    dw, dh = _draft_size(fmt, mode, (w, h), draft_box if draft_box is not None else target, reduce)
    per = DECODE_BYTES_PER_PIXEL["alpha"] if alpha else DECODE_BYTES_PER_PIXEL.get(mode, DECODE_BYTES_PER_PIXEL["RGBA"])
    factor = 1 if target is None or draft_box is not None else _reduce_factor(reduce, fmt, mode, info, (w, h), target)
    if factor > 1:   # the full decode, then the reduced image's conversions
        rw, rh = -(-w // factor), -(-h // factor)
        return DecodeCost((int(w), int(h)), (int(rw), int(rh)), mode, fmt,
                          int(w) * int(h) * REDUCE_BYTES_PER_PIXEL[mode] + int(rw) * int(rh) * per)
    return DecodeCost((int(w), int(h)), (int(dw), int(dh)), mode, fmt, int(dw) * int(dh) * per)


def _resize(gray: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A uint8 (h, w) image resized to ``size`` = (w, h): area averaging (OpenCV INTER_AREA) to shrink, bicubic
    (INTER_CUBIC) to enlarge."""
    import cv2

    grow = size[0] > gray.shape[1]
    return cv2.resize(gray, size, interpolation=cv2.INTER_CUBIC if grow else cv2.INTER_AREA)
