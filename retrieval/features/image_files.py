"""Image files: which names are images, and opening one. The one list of readable formats of the library, the CLI
and the web page (folder walks, outside query files, thumbnails, uploads).

- :func:`is_image_name`: whether a file name has one of :data:`IMAGE_EXTENSIONS` (any case);
- :func:`open_image`: a path, bytes or binary file -> a decoded Pillow image: the HEIC / HEIF and AVIF decoders
  registered, a camera RAW file read by LibRaw, the pixel count checked on the header before any pixel is decoded,
  the first frame of an animation (GIF, WebP), the EXIF orientation applied;
- :func:`peek_image`: the same opening, header only (size, format, EXIF), for callers that decode nothing;
- :func:`display_rgb`: a decoded image in any mode -> the 8-bit RGB image a screen shows.

Files are recognised by their content, not by their name: an upload in a temporary ``*.part`` file opens as well
as ``IMG_0001.HEIC``. Camera RAW files are the exception: they are recognised by their name
(:data:`~retrieval.features.raw_files.RAW_EXTENSIONS`; most are TIFF files whose first image is a small thumbnail,
which Pillow alone would open), an upload's by the name its client gave (``name``), and read through LibRaw
(:mod:`retrieval.features.raw_files`). :func:`retrieval.features.image.load_image` (the features' gray working
image) opens through the same function.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import warnings

from retrieval.features.raw_files import RAW_EXTENSIONS, RAW_FORMATS, RawError, is_raw_name, open_raw

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".webp", ".bmp", ".ppm", ".pgm", ".gif", ".heic",
                    ".heif", ".avif") + RAW_EXTENSIONS
"""File extensions (lower case) of the images the library reads: JPEG, PNG, TIFF, WebP, BMP, the Netpbm PPM / PGM
formats, GIF (its first frame), HEIC / HEIF (through the pillow-heif plugin, a dependency) and AVIF (Pillow's own
decoder: Pillow 11.3 and later ship it in their wheels; else the pillow-avif-plugin package when installed), all
decoded by Pillow; and the camera RAW files of :data:`~retrieval.features.raw_files.RAW_EXTENSIONS` (CR2, CR3, NEF,
ARW, DNG, RAF, ORF, RW2), read through LibRaw (the rawpy package, a dependency). Test a name with
:func:`is_image_name`."""

FORMAT_EXTENSIONS = {"JPEG": ".jpg", "MPO": ".jpg", "PNG": ".png", "TIFF": ".tif", "WEBP": ".webp", "BMP": ".bmp",
                     "PPM": ".ppm", "GIF": ".gif", "HEIF": ".heic", "AVIF": ".avif",
                     **{fmt: ext for ext, fmt in RAW_FORMATS.items()}}
"""The format name of each format :data:`IMAGE_EXTENSIONS` lists (Pillow's; a RAW file's is its extension's,
``"DNG"``) -> the extension a file of it is stored with (an image added through ``retrieval serve``)."""

HEIF_EXTENSIONS = (".heic", ".heif")
AVIF_EXTENSIONS = (".avif",)

DEFAULT_MAX_MEGAPIXELS = 150.0

DRAFT_FORMATS = ("JPEG", "MPO")
DRAFT_MODES = ("L", "RGB", "YCbCr")
RAW_FORMAT_NAMES = tuple(RAW_FORMATS.values())
"""The format names of RAW files: decoded for a size asked (Pillow's ``draft``), as a JPEG is
(:mod:`retrieval.features.raw_files`)."""


class ImageReadError(ValueError):
    """An image file could not be read: it names the file and the reason (empty, truncated, not an image, ...)."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot read image {self.path!r}: {reason}")

    def __reduce__(self):  # picklable across worker processes
        return (type(self), (self.path, self.reason))


def is_image_name(name) -> bool:
    """Whether the file name (or path) ``name`` ends with one of :data:`IMAGE_EXTENSIONS`, in any case
    (``"IMG_0001.HEIC"``: True; ``"notes.txt"``, ``"jpg"``: False). The test of every folder walk, of the CLI's
    query and match images and of the web page's uploads."""
    return os.fspath(name).lower().endswith(IMAGE_EXTENSIONS)


_plugins_lock = threading.Lock()
_plugins: dict = {}   # "heif" / "avif" -> whether a decoder is available; filled once per process


def register_image_plugins(path=None) -> None:
    """Make Pillow able to open every format of :data:`IMAGE_EXTENSIONS` (once per process): registers the
    pillow-heif opener for HEIC / HEIF and, when this Pillow has no AVIF decoder, the pillow-avif-plugin (when
    installed). Pillow then recognises these files by content, whatever their name. Raises
    :class:`ImageReadError` when ``path`` names a HEIC / HEIF or AVIF file and its decoder is missing."""
    with _plugins_lock:
        if not _plugins:
            try:
                import pillow_heif
            except ImportError:
                _plugins["heif"] = False
            else:
                pillow_heif.register_heif_opener()
                _plugins["heif"] = True
            from PIL import features

            avif = bool(features.check("avif"))
            if not avif:
                with contextlib.suppress(ImportError):
                    import pillow_avif  # noqa: F401 - registers its decoder with Pillow on import
                    avif = True
            _plugins["avif"] = avif
    name = "" if path is None else str(path).lower()
    if name.endswith(HEIF_EXTENSIONS) and not _plugins["heif"]:
        raise ImageReadError(path, "HEIC / HEIF images need the pillow-heif package (pip install pillow-heif)")
    if name.endswith(AVIF_EXTENSIONS) and not _plugins["avif"]:
        raise ImageReadError(path, "AVIF images need Pillow 11.3 or later built with libavif (its wheels are), or "
                                   "the pillow-avif-plugin package")


_limit_lock = threading.Lock()


def _source_name(source, name) -> str:
    if name is not None:
        return str(name)
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", None) or "<image bytes>")


@contextlib.contextmanager
def opened(source, *, name=None, max_megapixels: float | None = DEFAULT_MAX_MEGAPIXELS):
    """The lazily opened Pillow image of ``source`` (a path, bytes or a binary file; only its header is read),
    closed on exit; the plugins registered. ``max_megapixels``: Pillow's own decompression-bomb limit (an error
    above twice ``Image.MAX_IMAGE_PIXELS``, about 179 megapixels) is raised to it when lower (the caller checks
    the size itself before decoding); None: the limit is lifted while the header is read (nothing may be decoded
    then). Errors are :class:`ImageReadError` naming the file (``name``, the path, or the file object's name)."""
    from PIL import Image, UnidentifiedImageError

    label = _source_name(source, name)
    register_image_plugins(label if name is not None or isinstance(source, (str, os.PathLike)) else None)
    if isinstance(source, (str, os.PathLike)):
        try:
            if os.path.getsize(source) == 0:
                raise ImageReadError(label, "the file is empty (0 bytes)")
        except OSError as exc:
            raise ImageReadError(label, f"file not found or unreadable ({exc.strerror or exc})") from None
    elif isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise ImageReadError(label, "the file is empty (0 bytes)")
        source = io.BytesIO(bytes(source))
    if is_raw_name(label):   # a camera RAW file: its header read by LibRaw (retrieval.features.raw_files)
        try:
            img = open_raw(source, label)
        except RawError as exc:
            raise ImageReadError(label, exc.reason) from None
        except OSError as exc:
            raise ImageReadError(label, f"file not found or unreadable ({exc.strerror or exc})") from None
        with img:
            yield img
        return
    try:
        with warnings.catch_warnings():
            # the guard is max_megapixels, checked by the caller on the header before any pixel is decoded;
            # Pillow's own limits (a warning above Image.MAX_IMAGE_PIXELS = 89.5 MP, an error above twice that)
            # would refuse the 100+ MP photos of current phones below the documented 150 MP
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with _limit_lock:
                saved = Image.MAX_IMAGE_PIXELS
                if max_megapixels is None:
                    Image.MAX_IMAGE_PIXELS = None
                elif saved is not None and 2 * saved < max_megapixels * 1e6:
                    Image.MAX_IMAGE_PIXELS = saved = int(max_megapixels * 1e6 / 2) + 1
                try:
                    img = Image.open(source)
                finally:
                    Image.MAX_IMAGE_PIXELS = saved
    except UnidentifiedImageError:
        raise ImageReadError(label, "not an image file (unknown format)") from None
    except ImageReadError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin fails on malformed headers with any type (module doc)
        raise decode_error(label, exc, "unreadable") from None
    with img:
        yield img


def decode_error(label, exc: BaseException, what: str = "corrupt or truncated image data") -> ImageReadError:
    """The :class:`ImageReadError` naming ``label`` for an exception a Pillow plugin raised while opening or
    decoding a file: ``too large: ...`` (answered 413 by the server) for a decompression bomb -- too many pixels,
    or a compressed chunk (PNG zTXt / iTXt / iCCP) that decompresses past Pillow's limit (``ValueError``
    "Decompressed data too large") -- or for memory running out; ``what (Type: message)`` otherwise. Plugins raise
    OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, TypeError, ... on malformed
    data: every one of them is a file that cannot be read, in one line."""
    from PIL import Image

    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, RawError):   # LibRaw's reason, already one line
        return ImageReadError(label, exc.reason)
    if isinstance(exc, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return ImageReadError(label, f"too large: {text}")
    if "decompressed data too large" in text.lower() or "too much memory" in text.lower():
        return ImageReadError(label, f"too large: a compressed chunk decompresses past Pillow's limit ({text})")
    if isinstance(exc, MemoryError):
        return ImageReadError(label, "too large: memory ran out while decoding it")
    kind = "" if isinstance(exc, (OSError, ValueError, SyntaxError, EOFError)) else f"{type(exc).__name__}: "
    return ImageReadError(label, f"{what} ({kind}{text})")


def _png_exif_chunk(fp) -> bytes | None:
    """The data of a PNG file's ``eXIf`` chunk, found chunk by chunk (their data skipped, the file position kept);
    None when there is none or the file cannot be read so."""
    try:
        position = fp.tell()
    except (AttributeError, OSError, ValueError):
        return None
    try:
        fp.seek(8)
        while True:
            head = fp.read(8)
            if len(head) < 8 or head[4:8] == b"IEND":
                return None
            if head[4:8] == b"eXIf":
                return fp.read(int.from_bytes(head[:4], "big"))
            fp.seek(int.from_bytes(head[:4], "big") + 4, os.SEEK_CUR)
    except (OSError, ValueError):
        return None
    finally:
        with contextlib.suppress(OSError, ValueError):
            fp.seek(position)


def exif_orientation(img) -> int:
    """The EXIF orientation tag (1 to 8) of an opened Pillow image; 1 when absent or broken. (pillow-heif applies a
    HEIC's orientation when decoding and reports 1.) Nothing is decoded: a PNG whose ``eXIf`` chunk follows its
    pixels, which Pillow's ``getexif`` reads by decoding the whole image first, has the chunk read from the file
    (put in ``info`` as that decode would)."""
    from PIL import Image

    try:
        if img.format == "PNG" and "exif" not in img.info and getattr(img, "fp", None) is not None:
            found = _png_exif_chunk(img.fp)
            if found is not None:
                img.info["exif"] = b"Exif\x00\x00" + found
            exif = Image.Image.getexif(img)   # the info's EXIF, text profile or XMP; not PngImageFile's decode
        else:
            exif = img.getexif()
        orientation = int(exif.get(0x0112, 1) or 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not prevent reading the pixels
        return 1
    return orientation if orientation in range(1, 9) else 1


@contextlib.contextmanager
def peek_image(source, *, name=None):
    """:func:`opened` for a header only (``size``, ``mode``, ``format``, ``info``, ``getexif()``): Pillow's
    decompression-bomb limit is lifted while the header is read; decode nothing from it."""
    with opened(source, name=name, max_megapixels=None) as img:
        yield img


def check_pixels(label, w: int, h: int, max_megapixels: float, min_side: int) -> None:
    """Raise :class:`ImageReadError` naming ``label`` when a ``w`` x ``h`` image has more than ``max_megapixels``
    (the decompression-bomb guard, read from the header) or a side under ``min_side`` pixels."""
    if w * h > max_megapixels * 1e6:
        raise ImageReadError(label, f"too large: {w}x{h} = {w * h / 1e6:.1f} megapixels, more than "
                                    f"max_megapixels={max_megapixels} (decompression-bomb guard)")
    if min(w, h) < min_side:
        raise ImageReadError(label, f"too small: {w}x{h} pixels, expected at least min_side={min_side} "
                                    f"pixels per side")


def open_image(source, *, name=None, max_megapixels: float = DEFAULT_MAX_MEGAPIXELS, min_side: int = 1,
               draft: tuple[int, int] | None = None):
    """Decode an image file: the one way the library, the CLI and the web page open a photo to show it.

    Parameters
    ----------
    source : str, Path, bytes or binary file object
        Any format of :data:`IMAGE_EXTENSIONS`, recognised by its content (an upload's temporary name does not
        matter).
    name : str or None
        The name error messages give (an upload's own file name); default: the path or the file object's name.
    max_megapixels : float
        Images of more pixels (read from the header, before decoding) are refused: the decompression-bomb guard of
        :func:`retrieval.features.image.load_image`.
    min_side : int
        Images whose smaller side is below this are refused.
    draft : (int, int) or None
        The size (after orientation) the caller needs at least: a JPEG is then decoded reduced by 2, 4 or 8 in its
        decoder (Pillow's ``draft``), never below it (for thumbnails).

    Returns
    -------
    PIL.Image.Image
        The first frame (GIF, animated WebP), decoded, in its own mode (RGB, L, P, RGBA, CMYK, I;16, ...), with
        the EXIF orientation applied; its ``format`` is the file's (``"JPEG"``, ``"HEIF"``, ``"AVIF"``, ...).

    Raises
    ------
    ImageReadError
        Empty, truncated, corrupt or non-image data, too many pixels, too small; the message names the file.
    """
    from PIL import ImageOps

    label = _source_name(source, name)
    with opened(source, name=label, max_megapixels=max_megapixels) as img:
        fmt = img.format
        w, h = img.size
        check_pixels(label, w, h, max_megapixels, min_side)
        orientation = exif_orientation(img)
        try:
            if draft is not None and (fmt in DRAFT_FORMATS or fmt in RAW_FORMAT_NAMES) and img.mode in DRAFT_MODES:
                box = (draft[1], draft[0]) if orientation in (5, 6, 7, 8) else tuple(draft)
                img.draft(img.mode, box)
            img.load()   # the first frame
            out = ImageOps.exif_transpose(img) if orientation != 1 else img.copy()
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin on malformed data (decode_error)
            raise decode_error(label, exc) from None
    out.format = fmt
    return out


def value_top(img) -> float | None:
    """The value shown as white for a 32-bit gray image (modes ``I`` and ``F``), from its largest value
    (``getextrema``: no copy of the pixels): ``I``: 65535 when a value is above 255 (16-bit gray read into 32 bits),
    else 255; ``F``: 1.0 when no value is above 1, else 255. None for the other modes. An image converted band by
    band (:mod:`retrieval.features.image_bands`) passes it to every band."""
    if img.mode not in ("I", "F"):
        return None
    high = max(0, img.getextrema()[1])
    if img.mode == "I":
        return 65535.0 if high > 255 else 255.0
    return 1.0 if high <= 1.0 else 255.0


def display_rgb(img, top: float | None = None):
    """A Pillow image in any mode -> an 8-bit RGB image that looks like the original on screen (thumbnails,
    galleries): 16-bit and 32-bit gray scaled to 8 bits (as :func:`retrieval.features.image.load_image` sees
    them), transparency composited onto white, CMYK through Pillow's CMYK -> RGB. ``top``: the value shown as
    white for modes ``I`` and ``F`` (:func:`value_top` of the whole image when ``img`` is one band of it)."""
    import numpy as np
    from PIL import Image

    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        if mode.startswith("I;16"):
            top = 65535.0
        elif top is None:
            top = value_top(img)
        gray = np.clip(np.rint(arr * (255.0 / top)), 0, 255).astype(np.uint8)
        return Image.fromarray(gray, "L").convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")
