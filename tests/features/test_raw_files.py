"""Camera RAW files read through LibRaw (rawpy), on DNG files made from real photos (tests/raw_photos.py: the photo
mosaicked into its Bayer data, so that the RAW and the JPEG of a shot are the same photo), written by PiDNG and in
Adobe's layout with a JPEG preview: the header (size, orientation, camera and dates), the way each decode takes (the
embedded preview when it is large enough, else LibRaw's half-size development, else the full one), the working
image against the JPEG's, the thumbnail picture, an upload's temporary file recognised by the name its client gave,
unreadable files in one line, and the reasons a folder walk gives for the files it leaves out."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import shared_path
from PIL import Image
from raw_photos import DATE, MAKE, MODEL, jpeg_of, pidng_dng, preview_dng

from retrieval.features.image import (
    IMAGE_EXTENSIONS,
    ImageReadError,
    decode_cost,
    display_cost,
    is_image_name,
    load_display,
    load_image,
    open_image,
    peek_image,
    skip_reason,
)
from retrieval.features.raw_exif import _cr3_ifds, _raf_ifds
from retrieval.features.raw_files import RAW_EXTENSIONS, RawPreview, RawSource, is_raw_name


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """DNG files and the camera's JPEG of the same photos: ``preview`` (Adobe's layout, a 1024-pixel JPEG preview,
    3424 x 2736 photosites, orientation 6), ``developed`` (PiDNG, no preview, 3008 x 2000), ``bitmap`` (a 256-pixel
    uncompressed preview, 650 x 486)."""
    folder = tmp_path_factory.mktemp("raw")
    boston = np.asarray(Image.open(shared_path("homogr", "BostonA.jpg")).convert("RGB"))
    library = np.asarray(Image.open(shared_path("homogr", "BostonLibA.png")).convert("RGB"))
    holidays = np.asarray(Image.open(shared_path("real", "holidays805", "jpg", "100300.jpg")).convert("RGB"))
    out = {}
    for name, rgb, write, kw in (("preview", boston, preview_dng, {"orientation": 6}),
                                 ("developed", library, pidng_dng, {}),
                                 ("bitmap", holidays, preview_dng, {"preview_side": None})):
        raw, jpeg = folder / f"{name}.dng", folder / f"{name}.jpg"
        write(raw, rgb, **kw)
        jpeg_of(jpeg, rgb, orientation=kw.get("orientation", 1))
        out[name] = (raw, jpeg, rgb)
    return out


def correlation(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.corrcoef(a, b)[0, 1])


def test_raw_names_are_image_names():
    assert set(RAW_EXTENSIONS) == {".cr2", ".cr3", ".nef", ".arw", ".dng", ".raf", ".orf", ".rw2"}
    assert set(RAW_EXTENSIONS) <= set(IMAGE_EXTENSIONS)
    for name in ("IMG_0001.CR2", "a.cr3", "DSC_1.NEF", "x.ARW", "y.dng", "DSCF1.RAF", "P1.ORF", "P2.RW2"):
        assert is_raw_name(name) and is_image_name(name), name
    assert not is_raw_name("IMG_0001.JPG") and not is_raw_name("x.pef")


def test_the_header_is_libraws(shots):
    raw, _, rgb = shots["preview"]
    with peek_image(raw) as im:
        assert im.format == "DNG" and im.mode == "RGB"
        assert im.size == (2 * rgb.shape[1], 2 * rgb.shape[0])    # the photosites, not the preview's 1024 pixels
        exif = im.getexif()
        assert exif[0x0112] == 6 and exif[271] == MAKE and exif[272] == MODEL and exif[306] == DATE
        assert exif.get_ifd(0x8769)[36867] == DATE
    raw, _, rgb = shots["developed"]   # PiDNG: no EXIF IFD; IFD 0's date
    with peek_image(raw) as im:
        assert im.size == (2 * rgb.shape[1], 2 * rgb.shape[0]) and im.getexif()[306] == DATE


def test_the_preview_is_used_when_it_is_large_enough(shots):
    raw, jpeg, rgb = shots["preview"]
    cost = decode_cost(raw)
    assert cost.format == "DNG" and cost.decoded == (1024, round(1024 * rgb.shape[0] / rgb.shape[1]))
    a, b = load_image(raw), load_image(jpeg)
    # orientation 6 applied to both; sizes in the RAW's pixels (twice the JPEG's)
    assert a.orientation == b.orientation == 6
    assert a.original_size == (2 * rgb.shape[0], 2 * rgb.shape[1]) and b.original_size == (rgb.shape[0], rgb.shape[1])
    assert a.pixels.shape == b.pixels.shape == (1024, round(1024 * rgb.shape[0] / rgb.shape[1]))
    assert a.scale == pytest.approx(2 * b.scale, rel=1e-3)
    assert correlation(a.pixels, b.pixels) > 0.98
    # a small thumbnail: the JPEG preview decoded reduced by its decoder
    small = display_cost(raw, 320)
    assert small.decoded == (512, 409)
    pic = load_display(raw, 320)
    assert pic.size == (409, 512)                      # turned upright


def test_without_a_large_enough_preview_libraw_develops_it_at_half_size(shots):
    raw, jpeg, rgb = shots["developed"]
    assert decode_cost(raw).decoded == (rgb.shape[1], rgb.shape[0])     # half of the 2x photosites
    a, b = load_image(raw), load_image(jpeg)
    assert a.pixels.shape == b.pixels.shape and correlation(a.pixels, b.pixels) > 0.97
    raw, _, rgb = shots["bitmap"]                                       # a 256-pixel preview: too small for 1024
    assert decode_cost(raw).decoded == (2 * rgb.shape[1], 2 * rgb.shape[0])   # smaller than 1024: full size
    assert display_cost(raw, 320).decoded == (rgb.shape[1], rgb.shape[0])     # half size covers 320
    assert open_image(raw, draft=(200, 150)).size == (256, 191)               # the bitmap preview covers it


def test_the_developed_photo_is_the_photo(shots):
    raw, _, rgb = shots["developed"]
    developed = open_image(raw, draft=(rgb.shape[1], rgb.shape[0]))          # half size: one pixel per 2x2 block
    assert developed.size == (rgb.shape[1], rgb.shape[0])
    assert correlation(np.asarray(developed.convert("L")), np.asarray(Image.fromarray(rgb).convert("L"))) > 0.99


def toy_source(preview_size) -> RawSource:
    data = np.zeros((preview_size[1], preview_size[0], 3), np.uint8)
    return RawSource(label="x.dng", source="x.dng", format="DNG", size=(3000, 2000), orientation=1,
                     raw_size=(3000, 2000), halvable=True, file_bytes=0,
                     _preview=RawPreview("BITMAP", preview_size, data))


@pytest.mark.parametrize(("preview", "box", "expected"), [
    ((1500, 1000), (1024, 683), ("preview", (1500, 1000))),   # the whole frame, large enough
    ((1000, 1000), (1024, 683), ("half", (1500, 1000))),      # a square crop: not the whole frame
    ((1500, 1000), (1200, 800), ("preview", (1500, 1000))),   # the half size covers it too: the preview first
    ((600, 400), (1024, 683), ("half", (1500, 1000))),        # too small
    ((600, 400), (2000, 1334), ("full", (3000, 2000))),       # larger than half: the full development
])
def test_the_choice_of_a_decode(preview, box, expected):
    assert toy_source(preview).choose(box) == expected


def test_an_upload_is_recognised_by_the_name_its_client_gave(shots, tmp_path):
    raw, _, _ = shots["preview"]
    part = tmp_path / ".upload-x.part"
    part.write_bytes(raw.read_bytes())
    named = load_image(part, name="IMG_0001.DNG")
    assert named.original_size == load_image(raw).original_size
    assert decode_cost(part, name="IMG_0001.DNG").format == "DNG"
    with peek_image(part) as im:       # without its name: the TIFF structure, whose first image is the preview
        assert im.format == "TIFF"


def test_unreadable_raw_files_are_one_line_naming_them(shots, tmp_path):
    garbage = tmp_path / "DSC_0001.NEF"
    garbage.write_bytes(b"II*\0" + bytes(200))
    with pytest.raises(ImageReadError) as e:
        load_image(garbage)
    assert str(garbage) in str(e.value) and "not a camera RAW file" in str(e.value) and "\n" not in str(e.value)
    text = tmp_path / "notes.CR2"
    text.write_text("not a RAW file at all\n")
    with pytest.raises(ImageReadError, match="not a camera RAW file"):
        decode_cost(text)
    data = shots["developed"][0].read_bytes()
    cut = tmp_path / "cut.dng"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError) as e:
        load_image(cut)
    assert "corrupt or truncated RAW data" in e.value.reason and "\n" not in str(e.value)


def test_a_truncated_raw_file_is_one_line_on_the_command_line(shots, tmp_path):
    """LibRaw prints its own line about a truncated file to stderr: captured into the one line the CLI prints."""
    data = shots["developed"][0].read_bytes()
    cut = tmp_path / "cut.dng"
    cut.write_bytes(data[: len(data) // 2])
    code = ("import sys\nfrom retrieval.features.image import ImageReadError, load_image\n"
            "try:\n    load_image(sys.argv[1])\nexcept ImageReadError as exc:\n    print(exc, file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", code, str(cut)], capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(cut) in lines[0] and "Unexpected end of file" in lines[0], res.stderr


def test_exif_of_cr3_and_raf_headers():
    """The camera and dates of formats that are not TIFF files: CR3's CMT1 / CMT2 boxes and the JPEG a RAF header
    points to (headers built here with Pillow's EXIF writer)."""
    ifd0 = Image.Exif()
    ifd0[271], ifd0[272], ifd0[306] = "Canon", "Canon EOS R6", "2023:01:02 03:04:05"
    sub = Image.Exif()
    sub[36867] = "2023:01:02 03:04:05"
    t0, t1 = ifd0.tobytes()[6:], sub.tobytes()[6:]                # TIFF structures (without "Exif\0\0")
    box = b"".join((8 + len(b)).to_bytes(4, "big") + n + b for n, b in ((b"CMT1", t0), (b"CMT2", t1)))
    head = bytes(4) + b"ftypcrx " + bytes(20) + box
    a, b = _cr3_ifds(head)
    assert a[272] == "Canon EOS R6" and b[36867] == "2023:01:02 03:04:05"
    exif = Image.Exif()
    exif[271], exif[272] = "FUJIFILM", "X-T5"
    exif.get_ifd(0x8769)[36867] = "2024:02:03 04:05:06"
    buf = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buf, format="JPEG", exif=exif.tobytes())
    jpeg = buf.getvalue()
    header = b"FUJIFILMCCD-RAW 0201FF383501" + bytes(84 - 28) + (100).to_bytes(4, "big") + len(jpeg).to_bytes(4, "big")
    data = header + bytes(100 - len(header)) + jpeg
    a, b = _raf_ifds(io.BytesIO(data), data[:65536])
    assert a[271] == "FUJIFILM" and a[272] == "X-T5" and b[36867] == "2024:02:03 04:05:06"


@pytest.mark.parametrize(("name", "reason"), [
    ("notes.txt", "not an image"), ("clip.MOV", "not an image"), ("IMG_0001.xmp", "not an image"),
    ("IMG_0001.AAE", "not an image"), ("scan.pdf", "not an image"), ("Thumbs.db", "not an image"),
    ("data.xyz", "unsupported"), ("drawing.svg", "unsupported"), ("layers.psd", "unsupported"),
    ("IMGP0001.PEF", "unsupported"), ("README", "unsupported"),
])
def test_why_a_walk_leaves_a_file_out(name, reason):
    assert not is_image_name(name)
    assert skip_reason(name) == reason


def test_the_walk_counts_what_it_leaves_out(tmp_path):
    from retrieval.app.index_support import skipped_json, skipped_summary, walk_photos

    for name in ("a.jpg", "b.DNG", "notes.txt", "todo.txt", "data.xyz", ".hidden.txt"):
        (tmp_path / name).write_bytes(b"x")
    skipped: dict = {}
    files = walk_photos(tmp_path, skipped=skipped)
    assert [p.rsplit("/", 1)[-1] for p in files] == ["a.jpg", "b.DNG"]
    assert skipped_summary(skipped.items()) == "3 skipped: 2 not images (.txt), 1 unsupported (.xyz)"
    doc = skipped_json(sorted(skipped.items()))
    assert doc["count"] == 3 and [(r["reason"], r["count"], r["extensions"]) for r in doc["reasons"]] == [
        ("not an image", 2, [".txt"]), ("unsupported", 1, [".xyz"])]
    assert json.loads(json.dumps(doc)) == doc
