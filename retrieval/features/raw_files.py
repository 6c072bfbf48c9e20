"""Camera RAW files (CR2, CR3, NEF, ARW, DNG, RAF, ORF, RW2), read through LibRaw (the ``rawpy`` package).

A RAW file is opened as a Pillow image (:func:`open_raw`, called by :func:`retrieval.features.image_files.opened` for
a name with one of :data:`RAW_EXTENSIONS`) whose header is LibRaw's (:func:`read_header`): its size is the developed photo's
(``sizes.width`` x ``sizes.height``, as the camera's sensor holds it, before its orientation), its orientation
LibRaw's (``sizes.flip``, as the EXIF ``Orientation`` tag of :data:`FLIP_ORIENTATION`), its EXIF the camera's make,
model and dates (:func:`raw_exif`). Nothing else is read until it is decoded.

Decoding is asked like a JPEG's, for a size (Pillow's ``draft``): the first of these (the cheapest first) that is at
least that size (:meth:`RawSource.choose`):

1. ``preview``: the image the camera embedded (LibRaw's ``extract_thumb``, the largest one), when it shows the whole
   frame (its aspect ratio within :data:`PREVIEW_ASPECT_TOLERANCE` of the photo's); a JPEG preview is decoded by
   Pillow, reduced by 2, 4 or 8 in its decoder when it is much larger (Pillow's ``draft``);
2. ``half``: LibRaw's half-size development (``half_size=True``: each 2 x 2 block of photosites becomes one pixel,
   no interpolation), for the Bayer sensors (2 x 2 pattern: not X-Trans, Foveon nor linear DNG);
3. ``full``: LibRaw's full development (AHD demosaic).

A development uses the white balance the camera recorded, LibRaw's default tone curve and brightness, sRGB, 8 bits,
unturned (the orientation is applied by the caller, as for any photo). The memory each way needs is bounded in
:mod:`retrieval.features.decode_plan`. What LibRaw cannot read raises :class:`RawError` with a one-line reason
(LibRaw's own message to stderr, about corrupt data, is captured into it when the process has one thread).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass, field

RAW_EXTENSIONS = (".cr2", ".cr3", ".nef", ".arw", ".dng", ".raf", ".orf", ".rw2")
"""The camera RAW files the library reads (lower case): Canon CR2 and CR3, Nikon NEF, Sony ARW, Adobe DNG, Fujifilm
RAF, Olympus ORF, Panasonic RW2."""

RAW_FORMATS = {ext: ext[1:].upper() for ext in RAW_EXTENSIONS}
"""Extension -> the format name of a RAW file (its Pillow image's ``format``: ``"DNG"``, ``"CR2"``, ...)."""

FLIP_ORIENTATION = {0: 1, 3: 3, 5: 8, 6: 6}
"""LibRaw's ``sizes.flip`` (0 none, 3 a half turn, 5 a quarter turn to the left, 6 to the right) -> the EXIF
orientation that displays the photo upright."""

PREVIEW_ASPECT_TOLERANCE = 0.01
"""A preview whose aspect ratio differs from the photo's by more than this (relative) is not the whole frame (a
crop, black bars): it is not used for the photo's pixels."""

DEVELOP = {"use_camera_wb": True, "user_flip": 0, "output_bps": 8}
"""LibRaw's development of a RAW file (module docstring); ``half_size`` for the half-size one."""


class RawError(ValueError):
    """A RAW file LibRaw cannot read; ``reason`` is one line (the caller names the file)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def raw_format(name) -> str | None:
    """The RAW format of a file name (``"IMG_0001.CR2"`` -> ``"CR2"``); None for any other name."""
    return RAW_FORMATS.get(os.path.splitext(os.fspath(name))[1].lower())


def is_raw_name(name) -> bool:
    """Whether the file name (or path) ``name`` has one of :data:`RAW_EXTENSIONS`, in any case."""
    return raw_format(name) is not None


# ---------------------------------------------------------------------------------------------------- LibRaw calls
_quiet_lock = threading.Lock()


@contextlib.contextmanager
def _captured_stderr(said: list):
    """LibRaw prints what it finds wrong with a file (``x.dng: Unexpected end of file``) to the process's stderr
    itself; in a process with a single thread (the CLI, a worker of an extraction pool) that line is captured into
    ``said`` (the reason then says it once); with other threads running (a server) stderr is left alone."""
    if threading.active_count() != 1 or not _quiet_lock.acquire(blocking=False):
        yield
        return
    try:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:
            yield
            return
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                sink.seek(0)
                said.append(" ".join(sink.read(2000).decode("utf-8", "replace").split()))
    finally:
        _quiet_lock.release()


def _reason(exc: BaseException, said: list, opening: bool = False) -> str:
    """One line for a LibRaw error ``exc``, with what LibRaw printed (``said``); ``opening``: raised while LibRaw
    read the header."""
    import rawpy

    text = exc.args[0] if exc.args else ""
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    detail = "; ".join(s.split(": ", 1)[-1] for s in said if s)
    full = f"{text}: {detail}" if detail and detail not in text else text
    if isinstance(exc, rawpy.LibRawFileUnsupportedError):
        return f"not a camera RAW file LibRaw reads ({full})"
    if isinstance(exc, (rawpy.LibRawTooBigError, rawpy.LibRawUnsufficientMemoryError, MemoryError)):
        return f"too large: LibRaw could not allocate it ({full})"
    if opening:
        return f"not a camera RAW file LibRaw reads, or a truncated one ({full or type(exc).__name__})"
    return f"corrupt or truncated RAW data ({full or type(exc).__name__})"


def _libraw(source):
    """A ``rawpy.RawPy`` with ``source`` (a path, or bytes) opened: its header read, nothing decoded."""
    try:
        import rawpy
    except ImportError:
        raise RawError("camera RAW files need the rawpy package (pip install rawpy)") from None
    raw = rawpy.RawPy()
    said: list = []
    try:
        with _captured_stderr(said):
            if isinstance(source, (bytes, bytearray)):
                raw.open_buffer(io.BytesIO(bytes(source)))
            else:
                raw.open_file(os.fspath(source))
    except (rawpy.LibRawError, MemoryError) as exc:
        raw.close()
        raise RawError(_reason(exc, said, opening=True)) from None
    return raw


def _call(raw, fn, *args, **kw):
    """``fn(*args, **kw)`` on an open LibRaw handle, its errors as :class:`RawError`."""
    import rawpy

    said: list = []
    try:
        with _captured_stderr(said):
            return fn(*args, **kw)
    except (rawpy.LibRawError, MemoryError) as exc:
        raise RawError(_reason(exc, said)) from None
    except NotImplementedError as exc:   # rawpy: a thumbnail of another type than JPEG or bitmap
        raise RawError(f"unsupported embedded preview ({exc})") from None


# ---------------------------------------------------------------------------------------------------- the header
@dataclass
class RawPreview:
    """The image a camera embedded in its RAW file: ``kind`` (``"JPEG"`` or ``"BITMAP"``), ``size`` (width,
    height), ``data`` (the JPEG's bytes, or an RGB ndarray of shape (h, w, 3), dtype uint8) and, for a JPEG, its
    Pillow ``header`` (opened, nothing decoded)."""

    kind: str
    size: tuple[int, int]
    data: object
    header: object = None

    @property
    def nbytes(self) -> int:
        return len(self.data) if self.kind == "JPEG" else int(self.data.nbytes)


@dataclass
class RawSource:
    """A RAW file's header as LibRaw reads it (module docstring).

    ``label``: the name errors give; ``source``: its path (or bytes); ``format``: ``"DNG"``, ``"CR2"``, ...;
    ``size``: (width, height) of the developed photo, unturned; ``orientation``: the EXIF orientation that displays
    it upright; ``raw_size``: (width, height) of the sensor data with its margins; ``halvable``: a Bayer sensor, so
    that the half-size development is half the size; ``file_bytes``: the file's size."""

    label: str
    source: object
    format: str
    size: tuple[int, int]
    orientation: int
    raw_size: tuple[int, int]
    halvable: bool
    file_bytes: int
    _preview: object = field(default=False, repr=False)

    @property
    def half_size(self) -> tuple[int, int]:
        """(width, height) of the half-size development (each side halved, rounded up)."""
        return -(-self.size[0] // 2), -(-self.size[1] // 2)

    def preview(self) -> RawPreview | None:
        """The embedded preview (read once; None when the file has none, or one LibRaw cannot give)."""
        if self._preview is False:
            self._preview = self._read_preview()
        return self._preview

    def _read_preview(self) -> RawPreview | None:
        import rawpy

        raw = _libraw(self.source)
        try:
            thumb = _call(raw, raw.extract_thumb)
        except RawError:
            return None
        finally:
            raw.close()
        if thumb.format == rawpy.ThumbFormat.JPEG:
            from PIL import Image

            try:
                header = Image.open(io.BytesIO(thumb.data))
                if header.format != "JPEG":
                    return None
            except Exception:  # noqa: BLE001 - a preview Pillow cannot open is not used
                return None
            return RawPreview("JPEG", tuple(header.size), thumb.data, header)
        data = thumb.data
        if getattr(data, "ndim", 0) != 3 or data.shape[2] != 3:
            return None
        return RawPreview("BITMAP", (int(data.shape[1]), int(data.shape[0])), data)

    def whole_preview(self) -> RawPreview | None:
        """The preview when it shows the whole frame (:data:`PREVIEW_ASPECT_TOLERANCE`), else None."""
        p = self.preview()
        if p is None or min(p.size) < 1:
            return None
        ratio = (p.size[0] / p.size[1]) / (self.size[0] / self.size[1])
        return p if abs(ratio - 1.0) <= PREVIEW_ASPECT_TOLERANCE else None

    def choose(self, box) -> tuple[str, tuple[int, int]]:
        """How to decode for a picture of at least ``box`` = (width, height) (unturned): ``(kind, decoded size)``,
        the first of preview, half-size and full development that covers it (module docstring; a preview, even a
        larger one, costs less than a development). A preview covers it when its larger side does (its aspect ratio
        is the photo's, within the tolerance)."""
        bw, bh = int(box[0]), int(box[1])
        if bw >= self.size[0] and bh >= self.size[1]:
            return "full", self.size
        preview = self.whole_preview()
        if preview is not None:
            big = 0 if self.size[0] >= self.size[1] else 1
            if preview.size[big] >= (bw, bh)[big]:
                return "preview", _jpeg_draft(preview, (bw, bh))
        if self.halvable and self.half_size[0] >= bw and self.half_size[1] >= bh:
            return "half", self.half_size
        return "full", self.size

    def decode(self, kind: str, box=None):
        """The photo as a Pillow image (RGB; L for a gray preview), unturned: the ``kind`` of :meth:`choose`
        (``box``: the size asked, for a JPEG preview's draft)."""
        from PIL import Image

        if kind == "preview":
            preview = self.whole_preview()
            if preview is None:
                raise RawError("its embedded preview cannot be read")
            if preview.kind == "BITMAP":
                return Image.fromarray(preview.data, "RGB")
            img = Image.open(io.BytesIO(preview.data))
            if box is not None:
                img.draft(img.mode, tuple(box))
            try:
                img.load()
            except Exception as exc:  # noqa: BLE001 - Pillow fails on a broken JPEG with any type
                raise RawError(f"its embedded preview is corrupt ({' '.join(str(exc).split())[:200]})") from None
            return img if img.mode in ("RGB", "L") else img.convert("RGB")
        raw = _libraw(self.source)
        try:
            rgb = _call(raw, raw.postprocess, half_size=kind == "half", **DEVELOP)
        finally:
            raw.close()   # the sensor data and LibRaw's working image freed before the Pillow copy
        img = Image.fromarray(rgb[..., 0] if rgb.shape[2] == 1 else rgb, "L" if rgb.shape[2] == 1 else "RGB")
        del rgb
        return img


def _jpeg_draft(preview: RawPreview, box) -> tuple[int, int]:
    """The size a preview is decoded at for ``box``: a JPEG reduced by the largest of 8, 4 and 2 that both its sides
    hold at least that many times the box's (Pillow's ``draft`` rule), else its own size."""
    w, h = preview.size
    if preview.kind == "JPEG" and box[0] > 0 and box[1] > 0:
        scale = min(w // int(box[0]), h // int(box[1]))
        for k in (8, 4, 2):
            if scale >= k:
                return -(-w // k), -(-h // k)
    return w, h


def read_header(source, label: str) -> RawSource:
    """The :class:`RawSource` of a RAW file (a path, or its bytes); :class:`RawError` when LibRaw cannot read it.
    Only what LibRaw parses when it opens a file is read (rawpy's ``raw_type`` and ``raw_pattern`` would unpack
    the whole sensor data first), so whether the half-size development halves the photo is told by the file: a
    three-colour sensor, not Fujifilm's (X-Trans: LibRaw develops it at full size) nor a linear DNG's (demosaiced
    already)."""
    raw = _libraw(source)
    try:
        s = raw.sizes
        colors = int(raw.num_colors)
    finally:
        raw.close()
    if s.width < 1 or s.height < 1:
        raise RawError(f"LibRaw found no image in it ({s.width}x{s.height})")
    fmt = raw_format(label) or "RAW"
    halvable = colors == 3 and fmt != "RAF" and not (fmt == "DNG" and _linear_dng(source))
    file_bytes = len(source) if isinstance(source, (bytes, bytearray)) else os.path.getsize(source)
    return RawSource(label=label, source=source, format=fmt, size=(int(s.width), int(s.height)),
                     orientation=FLIP_ORIENTATION.get(int(s.flip), 1), raw_size=(int(s.raw_width), int(s.raw_height)),
                     halvable=halvable, file_bytes=int(file_bytes))


def _linear_dng(source) -> bool:
    """Whether a DNG's main image (``NewSubfileType`` 0, in IFD 0 or a sub-IFD) is ``LinearRaw`` (photometric
    34892: already demosaiced, as Apple's ProRAW): LibRaw develops it at full size even when asked for half."""
    from PIL import TiffImagePlugin

    with contextlib.suppress(Exception):
        fp = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb")
        with fp:
            head = fp.read(8)
            if head[:4] not in (b"II*\0", b"MM\0*"):
                return False
            offset = struct.unpack(("<" if head[:2] == b"II" else ">") + "I", head[4:8])[0]
            todo = [offset]
            for _ in range(16):   # IFD 0 and its sub-IFDs
                if not todo:
                    break
                ifd = TiffImagePlugin.ImageFileDirectory_v2(head)
                fp.seek(todo.pop(0))
                ifd.load(fp)
                if int(ifd.get(254, 0) or 0) == 0 and ifd.get(262) is not None:
                    return int(ifd.get(262)) == 34892
                subs = ifd.get(330)
                todo += list(subs) if isinstance(subs, tuple) else [subs] if isinstance(subs, int) else []
    return False


# ---------------------------------------------------------------------------------------------------- Pillow image
def open_raw(source, label: str):
    """The Pillow image of a RAW file (:func:`raw_image_class`) of ``source`` (a path, bytes or a binary file)
    named ``label``; its ``info["raw"]`` is its :class:`RawSource`. :class:`RawError` when LibRaw cannot read it."""
    if not isinstance(source, (str, os.PathLike, bytes, bytearray)):
        source.seek(0)
        source = source.read()
    return raw_image_class()(source, label)


@functools.cache
def raw_image_class():
    """The Pillow image class of RAW files (made once, when Pillow is first needed: the library imports Pillow
    only where it decodes)."""
    from PIL import Image, ImageFile

    class RawImageFile(ImageFile.ImageFile):
        """A RAW file as a Pillow image (module docstring): its header from LibRaw; ``draft(mode, size)`` chooses how
        it is decoded (:meth:`RawSource.choose`) and gives the image that size; ``load()`` decodes it."""

        format = "RAW"
        format_description = "camera RAW (LibRaw)"

        def __init__(self, source, label: str):
            self._raw_source = source
            self._label = label
            if isinstance(source, (bytes, bytearray)):
                super().__init__(io.BytesIO(bytes(source)), label)
            else:
                super().__init__(os.fspath(source))

        def _open(self):
            header = read_header(self._raw_source, self._label)
            self.format = header.format
            self._mode = "RGB"
            self._size = header.size
            self.info["raw"] = header
            from retrieval.features.raw_exif import raw_exif

            self.info["exif"] = raw_exif(self._raw_source, header)
            self.tile = []
            self._decode = ("full", None)

        def draft(self, mode, size):
            if self._im is not None or size is None:
                return None
            kind, decoded = self.info["raw"].choose(size)
            self._decode = (kind, tuple(size))
            self._size = decoded
            return None

        def load(self):
            if self._im is None:
                kind, box = self._decode
                img = self.info["raw"].decode(kind, box)
                self.im = img.im
                self._mode = img.mode
                self._size = img.size
                self.readonly = 0
            return Image.Image.load(self)

    return RawImageFile
