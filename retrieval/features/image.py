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
  gray conversion (less memory, no faster). A camera RAW file is decoded for the working size whatever ``reduce``:
  its embedded preview when that is large enough, else LibRaw's half-size (or full) development
  (:mod:`retrieval.features.raw_files`); its sizes are the developed photo's. The working image differs from a
  full decode's by a few grey levels on edges, so the features do too: :class:`retrieval.features.FeatureExtractor`
  names its decoder in its configuration.
- Memory: the decoded image is reduced and converted to gray band by band (:mod:`retrieval.features.image_bands`:
  the same pixels as a conversion in one piece, without its full-size copies); :func:`decode_cost` bounds the
  peak from the header (:mod:`retrieval.features.decode_plan`, measured per format). :func:`load_display` decodes
  a file for a picture (thumbnails) the same way, in display colours.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.decode_plan import (  # noqa: F401 - the decode plans and costs, read from here too
    DEFAULT_MAX_SIDE,
    MAX_DRAFT_REDUCTION,
    REDUCE_IMAGE_MODES,
    REDUCE_MODES,
    DecodeCost,
    DecodePlan,
    decode_cost,
    display_cost,
    display_plan,
    feature_plan,
    reduce_factor,
)
from retrieval.features.image_bands import display_bands, gray_bands, oriented, oriented_gray
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
    decode_error,
    display_rgb,
    exif_orientation,
    is_image_name,
    open_image,
    opened,
    peek_image,
    register_image_plugins,
)
from retrieval.features.skipped_files import skip_reason  # noqa: F401 - read from here too

logger = logging.getLogger(__name__)

DEFAULT_MIN_SIDE = 16

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


def load_image(path, *, max_side: int | None = DEFAULT_MAX_SIDE, max_megapixels: float = DEFAULT_MAX_MEGAPIXELS,
               min_side: int = DEFAULT_MIN_SIDE, upscale_to: int | None = None, reduce: str = "all",
               name: str | None = None) -> LoadedImage:
    """Read an image file into a gray uint8 working image, EXIF orientation applied, downscaled to ``max_side``
    (and, with ``upscale_to``, a small image enlarged).

    The usual Holidays/Oxford practice: images are processed with their larger side at most 1024 px and
    features reported in original coordinates (Jegou et al. 2012, section II, "experimental setup of [12]").

    Parameters
    ----------
    path : str or Path
        JPEG, PNG, TIFF, WebP, BMP, PPM / PGM, GIF (its first frame), HEIC / HEIF, AVIF (:data:`IMAGE_EXTENSIONS`,
        recognised by content; anything else Pillow reads is accepted too), opened as
        :func:`retrieval.features.image_files.open_image` opens them, in modes L, RGB, RGBA, P (+transparency), CMYK, I;16 / I (16-bit), F, 1;
        a camera RAW file (recognised by its name: CR2, CR3, NEF, ARW, DNG, RAF, ORF, RW2) from its embedded
        preview when that is at least the working size, else from LibRaw's half-size (or full) development
        (:mod:`retrieval.features.raw_files`), whatever ``reduce``.
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
    name : str or None
        The file's own name when ``path`` is a temporary file (an upload): what errors say, and how a RAW file is
        recognised.

    Returns
    -------
    LoadedImage

    Raises
    ------
    ImageReadError
        0-byte, truncated, corrupt or non-image file, too large or too small; the message names the file.
    """

    if max_side is not None:
        check_scalar(max_side, "max_side", "load_image", low=8)
    check_scalar(max_megapixels, "max_megapixels", "load_image", kind=numbers.Real, low=0.0, closed="neither")
    check_scalar(min_side, "min_side", "load_image", low=1)
    if upscale_to is not None:
        check_scalar(upscale_to, "upscale_to", "load_image", low=8)
    if reduce not in REDUCE_MODES:
        raise ValueError(f"load_image: reduce must be one of {', '.join(REDUCE_MODES)}; got {reduce!r}.")
    path = Path(path)
    label = path if name is None else name
    with opened(path, name=name, max_megapixels=max_megapixels) as img:
        w0, h0 = img.size
        check_pixels(label, w0, h0, max_megapixels, min_side)
        orientation = exif_orientation(img)
        plan = feature_plan(img.size, img.mode, img.format, img.info, orientation, max_side=max_side,
                            upscale_to=upscale_to, reduce=reduce)
        W, H = (h0, w0) if orientation in (5, 6, 7, 8) else (w0, h0)
        shrink = None if plan.target is None or plan.target[0] >= W else (
            (plan.target[1], plan.target[0]) if orientation in (5, 6, 7, 8) else plan.target)
        try:
            if plan.draft is not None:
                # DCT-domain reduction by a power of two, never below the target (then exact resize below)
                img.draft(img.mode, plan.draft)
            img.load()
            factor = 1 if shrink is None else reduce_factor(reduce, img.format, img.mode, img.info, img.size, shrink)
            gray = gray_bands(img, factor)   # box average by factor, then gray: band by band
        except ImageReadError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin on malformed data: one line
            raise decode_error(label, exc) from None
    gray = oriented_gray(gray, orientation)
    target = plan.target
    if target is not None and (gray.shape[1], gray.shape[0]) != target:
        gray = _resize(gray, target)
    h, w = gray.shape
    return LoadedImage(pixels=np.ascontiguousarray(gray), scale=max(W, H) / max(w, h), original_size=(W, H),
                       orientation=orientation, path=str(path), scale_xy=(W / w, H / h))


def load_display(path, side: int, *, max_megapixels: float = DEFAULT_MAX_MEGAPIXELS):
    """Decode an image file for a picture of larger side ``side`` (thumbnails): an RGB Pillow image, EXIF
    orientation applied, display colours (:func:`retrieval.features.image_files.display_rgb`), reduced as it is
    decoded (:func:`retrieval.features.decode_plan.display_plan`: a JPEG by its decoder, any format box-averaged
    band by band) to a larger side of at least ``side`` and under ``4 * side`` (its own size when smaller): the
    caller resamples it to ``side``. Its peak memory is bounded by :func:`display_cost`. Raises
    :class:`ImageReadError` (one line, naming the file) when the file cannot be read."""
    check_scalar(side, "side", "load_display", low=8)
    with opened(path, max_megapixels=max_megapixels) as img:
        check_pixels(path, img.size[0], img.size[1], max_megapixels, 1)
        orientation = exif_orientation(img)
        plan = display_plan(img.size, img.mode, img.format, orientation, side, img.info)
        try:
            if plan.draft is not None:
                img.draft(img.mode, plan.draft)
            img.load()
            rgb = display_bands(img, max(1, max(img.size) // (2 * side)))
        except ImageReadError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin on malformed data: one line
            raise decode_error(path, exc) from None
    return oriented(rgb, orientation)


def _resize(gray: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A uint8 (h, w) image resized to ``size`` = (w, h): area averaging (OpenCV INTER_AREA) to shrink, bicubic
    (INTER_CUBIC) to enlarge."""
    import cv2

    grow = size[0] > gray.shape[1]
    return cv2.resize(gray, size, interpolation=cv2.INTER_CUBIC if grow else cv2.INTER_AREA)
