"""Camera RAW test files made from real photos: DNG files whose sensor data is the photo itself, mosaicked into an
RGGB Bayer pattern, so that a RAW and the JPEG written beside it really are the same shot.

Two writers, so that the reader is checked on files it did not write itself:

- :func:`pidng_dng`: PiDNG (the DNG writer of the Raspberry Pi cameras' ``picamera2``), one IFD holding the Bayer
  data, uncompressed, no preview: LibRaw develops it (the half-size demosaic). PiDNG 4.0.9 cannot write a sub-IFD
  (its IFD-typed tags fail with a TypeError) nor, on Python 3.10 and later, its lossless JPEG (its C extension
  fails with "PY_SSIZE_T_CLEAN macro must be defined"), hence the second writer;
- :func:`preview_dng`: the layout of Adobe's DNG files, written here tag by tag (:func:`tiff_file`, little-endian
  TIFF 6.0 with the DNG 1.4 tags): IFD 0 the preview (a baseline JPEG of the photo, ``NewSubfileType`` 1, with the
  camera's make, model, date and orientation), its ``SubIFDs`` the Bayer data and its ``ExifIFD`` the date the photo
  was taken.

The mosaic (:func:`bayer`): the photo's sRGB values made linear (gamma 2.2), each pixel enlarged to a 2 x 2 block
of which each photosite keeps one colour (R G / G B), 12-bit (white level 4095, black level 0); the colour matrix
is the identity and the white balance neutral, so LibRaw's development is close to the photo.
"""

from __future__ import annotations

import io
import struct

import numpy as np

WHITE = 4095
MAKE, MODEL, DATE = "Canon", "Canon EOS R5", "2024:05:01 10:11:12"
FLIP_OF_ORIENTATION = {1: 0, 3: 3, 6: 6, 8: 5}
"""EXIF orientation -> LibRaw's ``sizes.flip`` for it (0 none, 3 half turn, 5 quarter turn left, 6 right)."""


def bayer(rgb, scale: int = 2) -> np.ndarray:
    """An RGGB Bayer mosaic (uint16, 12 bits) of ``rgb`` (h, w, 3) uint8, each pixel enlarged ``scale`` times
    (even): ndarray of shape (scale * h, scale * w), dtype uint16."""
    lin = (np.asarray(rgb, np.float64) / 255.0) ** 2.2
    up = lin.repeat(scale, 0).repeat(scale, 1)
    m = np.empty(up.shape[:2], np.float64)
    m[0::2, 0::2] = up[0::2, 0::2, 0]
    m[0::2, 1::2] = up[0::2, 1::2, 1]
    m[1::2, 0::2] = up[1::2, 0::2, 1]
    m[1::2, 1::2] = up[1::2, 1::2, 2]
    return np.round(m * WHITE).astype(np.uint16)


def pidng_dng(path, rgb, *, scale: int = 2, orientation: int = 1) -> None:
    """A DNG of the photo ``rgb`` written by PiDNG (module docstring): no preview."""
    from pidng.core import RAW2DNG
    from pidng.defs import CalibrationIlluminant, CFAPattern, DNGVersion, PhotometricInterpretation
    from pidng.dng import DNGTags, Tag

    data = bayer(rgb, scale)
    h, w = data.shape
    t = DNGTags()
    for tag, value in ((Tag.ImageWidth, w), (Tag.ImageLength, h), (Tag.TileWidth, w), (Tag.TileLength, h),
                       (Tag.Orientation, orientation), (Tag.SamplesPerPixel, 1), (Tag.BitsPerSample, 16),
                       (Tag.PhotometricInterpretation, PhotometricInterpretation.Color_Filter_Array),
                       (Tag.CFARepeatPatternDim, [2, 2]), (Tag.CFAPattern, CFAPattern.RGGB), (Tag.BlackLevel, 0),
                       (Tag.WhiteLevel, WHITE),
                       (Tag.ColorMatrix1, [[1, 1], [0, 1], [0, 1], [0, 1], [1, 1], [0, 1], [0, 1], [0, 1], [1, 1]]),
                       (Tag.CalibrationIlluminant1, CalibrationIlluminant.D65),
                       (Tag.AsShotNeutral, [[1, 1], [1, 1], [1, 1]]), (Tag.Make, MAKE), (Tag.Model, MODEL),
                       (Tag.UniqueCameraModel, MODEL), (Tag.DateTime, DATE), (Tag.DNGVersion, DNGVersion.V1_4),
                       (Tag.DNGBackwardVersion, DNGVersion.V1_2)):
        t.set(tag, value)
    writer = RAW2DNG()
    writer.options(t, path="", compress=False)
    with open(path, "wb") as fh:
        fh.write(writer.convert(data))


# TIFF field types: (code, struct format of one value)
BYTE, ASCII, SHORT, LONG, RATIONAL, UNDEFINED, SRATIONAL = (1, "B"), (2, "s"), (3, "H"), (4, "I"), (5, "II"), \
    (7, "B"), (10, "ii")


def _field(kind, values) -> tuple[int, int, bytes]:
    """(type code, count, little-endian bytes) of one tag's values."""
    code, fmt = kind
    if kind == ASCII:
        data = values.encode("ascii") + b"\0"
        return code, len(data), data
    if isinstance(values, (bytes, bytearray)):
        return code, len(values), bytes(values)
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    flat = [v for pair in values for v in pair] if len(fmt) == 2 else values
    return code, len(values), struct.pack("<" + fmt[0] * len(flat), *flat)


def tiff_file(ifds: list[dict], blocks: list[bytes]) -> bytes:
    """A little-endian TIFF file of ``ifds`` (each ``{tag: (kind, values)}``; IFD 0 first, the others reached
    through tags) and data ``blocks`` after them. A value ``("ifd", j)`` is the offset of ``ifds[j]`` (a LONG),
    ``("block", j)`` the offset of ``blocks[j]``."""
    def resolve(value, ifd_at, block_at):
        if isinstance(value, tuple) and len(value) == 2 and value[0] in ("ifd", "block"):
            return (ifd_at if value[0] == "ifd" else block_at)[value[1]]
        return value

    def layout(ifd_at, block_at):
        out, at = [], 8
        for ifd in ifds:
            entries, extra = [], b""
            start = at
            data_at = start + 2 + 12 * len(ifd) + 4
            for tag in sorted(ifd):
                kind, values = ifd[tag]
                if isinstance(values, list) and values and isinstance(values[0], tuple) and values[0][0] in (
                        "ifd", "block"):
                    values = [resolve(v, ifd_at, block_at) for v in values]
                else:
                    values = resolve(values, ifd_at, block_at)
                code, count, data = _field(kind, values)
                if len(data) <= 4:
                    entries.append(struct.pack("<HHI", tag, code, count) + data.ljust(4, b"\0"))
                else:
                    entries.append(struct.pack("<HHII", tag, code, count, data_at + len(extra)))
                    extra += data + b"\0" * (len(data) % 2)
            body = struct.pack("<H", len(ifd)) + b"".join(entries) + struct.pack("<I", 0) + extra
            out.append((start, body))
            at = start + len(body) + len(body) % 2
        return out, at

    placed, end = layout([0] * len(ifds), [0] * len(blocks))
    ifd_at = [start for start, _ in placed]
    block_at, at = [], end
    for b in blocks:
        block_at.append(at)
        at += len(b) + len(b) % 2
    placed, _ = layout(ifd_at, block_at)
    buf = bytearray(b"II*\0" + struct.pack("<I", ifd_at[0]))
    for start, body in placed:
        buf += b"\0" * (start - len(buf)) + body
    for at, b in zip(block_at, blocks, strict=True):
        buf += b"\0" * (at - len(buf)) + b
    return bytes(buf)


def preview_dng(path, rgb, *, scale: int = 2, preview_side: int | None = 1024, orientation: int = 1,
                make: str = MAKE, model: str = MODEL, date: str = DATE) -> None:
    """A DNG of the photo ``rgb`` in Adobe's layout (module docstring): a JPEG preview of larger side
    ``preview_side`` in IFD 0 (None: a 256-pixel uncompressed RGB thumbnail instead, as some converters write),
    the Bayer data (``scale`` times the photo's size) in its sub-IFD, the camera and dates in IFD 0 and its EXIF
    IFD. ``orientation``: the EXIF orientation of the shot (the preview and the data are stored unturned)."""
    from PIL import Image

    data = bayer(rgb, scale)
    h, w = data.shape
    photo = Image.fromarray(np.asarray(rgb, np.uint8))
    side = preview_side or 256
    preview = photo.resize((side, round(side * photo.height / photo.width)) if photo.width >= photo.height
                           else (round(side * photo.width / photo.height), side), Image.Resampling.LANCZOS)
    if preview_side is None:
        pixels, compression, photometric, bits = preview.tobytes(), 1, 2, (8, 8, 8)
    else:
        buf = io.BytesIO()
        preview.save(buf, format="JPEG", quality=90)
        pixels, compression, photometric, bits = buf.getvalue(), 7, 6, (8, 8, 8)
    ifd0 = {254: (LONG, 1), 256: (LONG, preview.width), 257: (LONG, preview.height), 258: (SHORT, bits),
            259: (SHORT, compression), 262: (SHORT, photometric), 271: (ASCII, make), 272: (ASCII, model),
            273: (LONG, ("block", 1)), 274: (SHORT, orientation), 277: (SHORT, 3), 278: (LONG, preview.height),
            279: (LONG, len(pixels)), 284: (SHORT, 1), 306: (ASCII, date), 330: (LONG, [("ifd", 1)]),
            34665: (LONG, ("ifd", 2)), 50706: (BYTE, (1, 4, 0, 0)), 50707: (BYTE, (1, 2, 0, 0)),
            50708: (ASCII, model), 50721: (SRATIONAL, [(1, 1), (0, 1), (0, 1), (0, 1), (1, 1), (0, 1), (0, 1),
                                                       (0, 1), (1, 1)]),
            50728: (RATIONAL, [(1, 1), (1, 1), (1, 1)]), 50778: (SHORT, 21)}
    raw = data.tobytes()
    ifd_raw = {254: (LONG, 0), 256: (LONG, w), 257: (LONG, h), 258: (SHORT, 16), 259: (SHORT, 1),
               262: (SHORT, 32803), 273: (LONG, ("block", 0)), 277: (SHORT, 1), 278: (LONG, h), 279: (LONG, len(raw)),
               284: (SHORT, 1), 33421: (SHORT, (2, 2)), 33422: (BYTE, (0, 1, 1, 2)), 50714: (SHORT, 0),
               50717: (SHORT, WHITE)}
    exif = {36864: (UNDEFINED, b"0231"), 36867: (ASCII, date), 36868: (ASCII, date)}
    with open(path, "wb") as fh:
        fh.write(tiff_file([ifd0, ifd_raw, exif], [raw, pixels]))


def jpeg_of(path, rgb, *, orientation: int = 1, quality: int = 92) -> None:
    """The camera's JPEG of the same shot: ``rgb`` (stored unturned, like the RAW) with the camera's EXIF (make,
    model, date, ``orientation``)."""
    from PIL import Image

    exif = Image.Exif()
    exif[271], exif[272], exif[306], exif[0x0112] = MAKE, MODEL, DATE, orientation
    exif.get_ifd(0x8769)[36867] = DATE
    Image.fromarray(np.asarray(rgb, np.uint8)).save(path, format="JPEG", quality=quality, exif=exif.tobytes())


SHOTS = (("IMG_0001", ("homogr", "BostonA.jpg"), "preview", 6), ("IMG_0002", ("homogr", "BostonLibA.png"), "pidng", 1),
         ("IMG_0003", ("real", "holidays805", "jpg", "100300.jpg"), "preview", 1),
         ("IMG_0004", ("real", "holidays805", "jpg", "100100.jpg"), "pidng", 1))
"""The RAW + JPEG pairs of :func:`raw_library`: (name, its photo in ../shared/data, the DNG writer, orientation)."""

OTHERS = ("100001.jpg", "100101.jpg", "100200.jpg", "100201.jpg", "100301.jpg", "101000.jpg", "101001.jpg")
"""Other Holidays photos of :func:`raw_library` (100001, 100101 and 100301: other shots of pairs' scenes)."""


def raw_library(folder) -> dict:
    """A photographer's folder: each shot of :data:`SHOTS` as ``NAME.DNG`` beside ``NAME.JPG`` (the same photo,
    both stored unturned with the shot's EXIF orientation; the first DNG with a JPEG preview of 1024 pixels and
    3424 x 2736 photosites, the second without preview, developed by LibRaw at half size, the two Holidays ones at
    650 x 486), other photos, two text files, a file of an unknown type and a broken NEF. Returns ``{"pairs":
    [(raw path, jpeg path)], "others": [...], "skipped": {path: reason}, "broken": path}``; skips the test when
    ../shared/data is absent."""
    from pathlib import Path

    from conftest import shared_path
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = []
    for name, src, writer, orientation in SHOTS:
        rgb = np.asarray(Image.open(shared_path(*src)).convert("RGB"))
        raw, jpeg = folder / f"{name}.DNG", folder / f"{name}.JPG"
        if writer == "preview":
            preview_dng(raw, rgb, orientation=orientation)
        else:
            pidng_dng(raw, rgb, orientation=orientation)
        jpeg_of(jpeg, rgb, orientation=orientation)
        pairs.append((str(raw), str(jpeg)))
    others = []
    for name in OTHERS:
        dst = folder / name
        dst.write_bytes(shared_path("real", "holidays805", "jpg", name).read_bytes())
        others.append(str(dst))
    skipped = {}
    for name, reason in (("notes.txt", "not an image"), ("todo.txt", "not an image"), ("data.xyz", "unsupported")):
        (folder / name).write_text("not a photo\n")
        skipped[str(folder / name)] = reason
    broken = folder / "broken.NEF"
    broken.write_bytes(b"II*\0" + bytes(100))
    return {"pairs": pairs, "others": others, "skipped": skipped, "broken": str(broken)}
