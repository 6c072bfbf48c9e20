"""Reading a file's header decodes no pixel, and every way a file breaks a decoder is one ImageReadError naming it:
a PNG text or ICC chunk that decompresses past Pillow's limit (Pillow raises ValueError), a decompression bomb,
truncated or corrupt data, an exception of another type from a plugin. The EXIF orientation of a PNG whose eXIf
chunk follows its pixels is read from the file, not by decoding the image (Pillow's getexif decodes it all)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from retrieval.features.image import (
    ImageReadError,
    decode_cost,
    display_cost,
    exif_orientation,
    load_display,
    load_image,
    open_image,
    peek_image,
)
from retrieval.features.image_files import decode_error


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(arr=None) -> bytes:
    arr = np.random.default_rng(0).integers(0, 256, (120, 160, 3), np.uint8) if arr is None else arr
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


BOMB = zlib.compress(b"\0" * (16 << 20), 9)   # 16 MB of zeros in 16 KB: past Pillow's 1 MB per chunk


@pytest.mark.parametrize("kind,payload", [(b"zTXt", b"Comment\0\0" + BOMB), (b"iCCP", b"icc\0\0" + BOMB),
                                          (b"iTXt", b"Comment\0\1\0\0\0" + BOMB)])
def test_a_chunk_that_decompresses_past_pillows_limit_is_too_large(tmp_path, kind, payload):
    data = png()
    path = tmp_path / "bomb.png"
    path.write_bytes(data[:33] + chunk(kind, payload) + data[33:])
    for read in (decode_cost, lambda p: display_cost(p, 320), load_image, lambda p: load_display(p, 320),
                 open_image):
        with pytest.raises(ImageReadError) as err:
            read(path)
        assert err.value.reason.startswith("too large") and "Pillow's limit" in err.value.reason
        assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("exc,start", [
    (ValueError("Decompressed data too large for PngImagePlugin.MAX_TEXT_CHUNK"), "too large: a compressed chunk"),
    (Image.DecompressionBombError("Image size (1 pixels) exceeds limit"), "too large: Image size"),
    (MemoryError(), "too large: memory ran out"),
    (OSError("image file is truncated"), "corrupt or truncated image data (image file is truncated)"),
    (struct.error("unpack requires a buffer of 4 bytes"), "corrupt or truncated image data (error: unpack"),
    (KeyError(7), "corrupt or truncated image data (KeyError: 7)"),
])
def test_every_exception_of_a_plugin_is_one_line(exc, start):
    err = decode_error("x.png", exc)
    assert isinstance(err, ImageReadError) and err.reason.startswith(start), err.reason
    assert "\n" not in str(err) and "x.png" in str(err)


@pytest.mark.parametrize("cut", [0.3, 0.7])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "TIFF", "GIF"])
def test_a_truncated_file_is_one_clean_error(tmp_path, fmt, cut):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (200, 300, 3), np.uint8)).save(buf, format=fmt)
    path = tmp_path / f"cut.{fmt.lower()}"
    path.write_bytes(buf.getvalue()[: int(len(buf.getvalue()) * cut)])
    for read in (load_image, lambda p: load_display(p, 320)):
        with pytest.raises(ImageReadError) as err:
            read(path)
        assert "\n" not in str(err.value)


def test_a_trailing_exif_orientation_is_read_without_decoding(tmp_path, decodes):
    exif = Image.Exif()
    exif[0x0112] = 6
    data = png()
    path = tmp_path / "trailing.png"
    path.write_bytes(data[:-12] + chunk(b"eXIf", exif.tobytes()) + data[-12:])   # before IEND, after the pixels
    with peek_image(path) as im:
        assert exif_orientation(im) == 6
    assert decode_cost(path).size == (160, 120)
    assert decodes == []   # the header alone: no pixel decoded
    loaded = load_image(path)
    assert loaded.orientation == 6 and loaded.original_size == (120, 160)
    assert decodes == [(160, 120)]   # one decode of the pixels
    with Image.open(path) as im:   # as Pillow reads it once decoded
        im.load()
        assert im.getexif().get(0x0112) == 6
    plain = tmp_path / "plain.png"
    plain.write_bytes(data)
    with peek_image(plain) as im:
        assert exif_orientation(im) == 1
    assert open_image(plain).size == (160, 120)
