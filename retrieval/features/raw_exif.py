"""The EXIF of a camera RAW file without developing it: make, model and dates from its TIFF structure (CR2, NEF, ARW,
DNG, ORF, RW2), from its ``CMT`` boxes (CR3) or from the JPEG its header points to (RAF); the orientation LibRaw's
(:func:`raw_exif`, read by :mod:`retrieval.features.raw_files`)."""

from __future__ import annotations

import contextlib
import io
import struct

__all__ = ["raw_exif"]

# ---------------------------------------------------------------------------------------------------- EXIF
MAKE, MODEL, DATE_TIME, ORIENTATION, EXIF_IFD = 271, 272, 306, 0x0112, 0x8769
DATE_TIME_ORIGINAL, DATE_TIME_DIGITIZED = 36867, 36868
HEAD_BYTES = 1 << 16
"""Bytes read from the start of a RAW file to find its EXIF (CR3's boxes, RAF's header)."""


def _tiff_ifds(fp, base: int = 0) -> tuple[dict, dict]:
    """(IFD 0, EXIF IFD) of the TIFF structure starting at ``base`` in ``fp`` (CR2, NEF, ARW, DNG; ORF and RW2,
    whose header has another magic number), as ``{tag: value}``; empty when it is not one."""
    from PIL import TiffImagePlugin

    fp.seek(base)
    head = fp.read(8)
    if len(head) < 8 or head[:2] not in (b"II", b"MM"):
        return {}, {}
    header = head[:2] + (b"*\0" if head[:2] == b"II" else b"\0*") + head[4:8]
    offset = struct.unpack(("<" if head[:2] == b"II" else ">") + "I", head[4:8])[0]

    class Based:   # offsets in the structure are from its start
        def __init__(self, f):
            self.f = f

        def seek(self, pos, whence=0):
            return self.f.seek(pos + base if whence == 0 else pos, whence) - base

        def tell(self):
            return self.f.tell() - base

        def read(self, n=-1):
            return self.f.read(n)

    f = Based(fp)

    def ifd_at(pos):
        d = TiffImagePlugin.ImageFileDirectory_v2(header)
        f.seek(pos)
        d.load(f)
        return dict(d)

    ifd0 = ifd_at(offset)
    exif = {}
    if isinstance(ifd0.get(EXIF_IFD), int):
        with contextlib.suppress(Exception):
            exif = ifd_at(ifd0[EXIF_IFD])
    return ifd0, exif


def _cr3_ifds(head: bytes) -> tuple[dict, dict]:
    """(IFD 0, EXIF IFD) of a CR3 file from its ``CMT1`` and ``CMT2`` boxes (each a TIFF structure)."""
    out = []
    for name in (b"CMT1", b"CMT2"):
        i = head.find(name)
        if i < 4:
            out.append({})
            continue
        size = struct.unpack(">I", head[i - 4:i])[0]
        blob = head[i + 4:i - 4 + size]
        out.append(_tiff_ifds(io.BytesIO(blob))[0] if len(blob) >= 8 else {})
    return out[0], out[1]


def _raf_ifds(fp, head: bytes) -> tuple[dict, dict]:
    """(IFD 0, EXIF IFD) of a RAF file: from the EXIF of the JPEG its header points to (offset at byte 84)."""
    if len(head) < 92:
        return {}, {}
    offset = struct.unpack(">I", head[84:88])[0]
    fp.seek(offset)
    jpeg = fp.read(HEAD_BYTES)
    i = jpeg.find(b"Exif\0\0")
    if jpeg[:2] != b"\xff\xd8" or i < 0:
        return {}, {}
    return _tiff_ifds(io.BytesIO(jpeg[i + 6:]))


def raw_exif(source, header) -> bytes:
    """EXIF bytes (``Exif\\0\\0`` + TIFF, as Pillow keeps a photo's in ``info["exif"]``) of a RAW file: the make,
    model and dates of its TIFF structure (CR2, NEF, ARW, DNG, ORF, RW2), of its ``CMT`` boxes (CR3) or of the JPEG
    its header points to (RAF); the orientation always LibRaw's (``header``: the file's
    :class:`~retrieval.features.raw_files.RawSource`)."""
    from PIL import Image

    ifd0, sub = {}, {}
    with contextlib.suppress(Exception):   # a broken EXIF structure leaves the camera and dates unknown
        fp = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb")
        with fp:
            head = fp.read(HEAD_BYTES)
            if head[4:12] == b"ftypcrx ":
                ifd0, sub = _cr3_ifds(head)
            elif head[:15] == b"FUJIFILMCCD-RAW":
                ifd0, sub = _raf_ifds(fp, head)
            else:
                ifd0, sub = _tiff_ifds(fp)
    exif = Image.Exif()
    for tag in (MAKE, MODEL, DATE_TIME):
        if isinstance(ifd0.get(tag), str) and ifd0[tag].strip("\0 "):
            exif[tag] = ifd0[tag]
    exif[ORIENTATION] = header.orientation
    dates = {t: sub[t] for t in (DATE_TIME_ORIGINAL, DATE_TIME_DIGITIZED) if isinstance(sub.get(t), str)}
    if dates:
        exif.get_ifd(EXIF_IFD).update(dates)
    return exif.tobytes()
