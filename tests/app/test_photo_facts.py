"""Photo facts and the keeper rule on real files generated here: a camera JPEG (EXIF date, make, model), its PNG,
WebP and smaller copies, a sideways JPEG (EXIF orientation 6), a corrupt file and a 20000 x 20000 PNG header; the
facts come from headers only (no pixel decoded), and every rule criterion changes the choice as documented."""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from retrieval.app.photo_facts import (
    KEEPER_CRITERIA,
    KEEPER_RULE,
    choose_keeper,
    keeper_reason,
    keeper_rule_with,
    parse_keeper_rule,
    photo_facts,
)

OLD, NEW = 1_500_000_000, 1_700_000_000   # file modification times (2017, 2023)


def _exif(make=None, model=None, taken=None, dt=None, orientation=None) -> Image.Exif:
    exif = Image.Exif()
    for tag, value in ((271, make), (272, model), (306, dt), (0x0112, orientation)):
        if value is not None:
            exif[tag] = value
    if taken is not None:
        exif.get_ifd(0x8769)[36867] = taken
    return exif


def _save(img, path, mtime=NEW, **kw):
    img.save(path, **kw)
    os.utime(path, (mtime, mtime))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("facts")
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8))
    camera = _exif("Canon", "Canon EOS 5D", "2019:05:01 10:11:12", "2020:01:01 00:00:00")
    (d / "lib").mkdir()
    f = {
        "camera": _save(img, d / "camera.jpg", OLD, exif=camera, quality=95),
        "png": _save(img, d / "copy.png"),
        "webp": _save(img, d / "copy.webp", quality=80),
        "small": _save(img.resize((160, 120)), d / "small.jpg", OLD, exif=camera),
        "plain": _save(img, d / "lib" / "plain.jpg"),   # no EXIF at all: the file date is used
        "datetime": _save(img, d / "datetime.jpg", exif=_exif("Apple", "iPhone 12", dt="2018:02:03 04:05:06")),
        "zero": _save(img, d / "zero.jpg", exif=_exif(taken="0000:00:00 00:00:00")),
        "sideways": _save(img, d / "sideways.jpg", exif=_exif(orientation=6)),
        "nikon": _save(img, d / "nikon.jpg", exif=_exif("NIKON CORPORATION", "NIKON D750")),
        "exif_png": _save(img, d / "exif.png", exif=camera),
    }
    (d / "corrupt.jpg").write_bytes(b"this is not a JPEG" * 10)
    (d / "empty.png").write_bytes(b"")
    f.update(corrupt=str(d / "corrupt.jpg"), empty=str(d / "empty.png"), missing=str(d / "missing.heic"))
    return f


def test_facts_of_a_camera_jpeg(files):
    facts = photo_facts(files["camera"])
    assert facts == {"path": files["camera"], "width": 320, "height": 240, "megapixels": 0.1,
                     "bytes": os.path.getsize(files["camera"]), "format": "JPEG", "date": "2019-05-01T10:11:12",
                     "camera": "Canon EOS 5D", "mtime": facts["mtime"], "error": None}
    assert facts["mtime"] == photo_facts(files["small"])["mtime"] != photo_facts(files["png"])["mtime"]
    assert facts["mtime"][:4] == "2017" and len(facts["mtime"]) == 19


def test_facts_of_copies_and_exif_variants(files):
    png, webp, small = (photo_facts(files[k]) for k in ("png", "webp", "small"))
    assert (png["format"], png["width"], png["height"], png["date"], png["camera"]) == ("PNG", 320, 240, None, None)
    assert (webp["format"], webp["width"], webp["height"]) == ("WEBP", 320, 240)
    assert (small["width"], small["height"], small["megapixels"]) == (160, 120, 0.0)
    assert photo_facts(files["exif_png"])["camera"] == "Canon EOS 5D"
    dt = photo_facts(files["datetime"])
    assert (dt["date"], dt["camera"]) == ("2018-02-03T04:05:06", "Apple iPhone 12")   # DateTime fallback
    assert photo_facts(files["zero"])["date"] is None   # a placeholder date is no date
    assert photo_facts(files["nikon"])["camera"] == "NIKON D750"
    sideways = photo_facts(files["sideways"])
    assert (sideways["width"], sideways["height"]) == (240, 320)   # as displayed


def test_unreadable_files_give_a_reason_and_never_raise(files):
    corrupt, empty, missing = (photo_facts(files[k]) for k in ("corrupt", "empty", "missing"))
    assert corrupt["error"] == "not an image file (unknown format)"
    assert (corrupt["format"], corrupt["bytes"], corrupt["width"]) == ("JPG", 180, None)
    assert "empty" in empty["error"] and empty["format"] == "PNG"
    assert "not found" in missing["error"] and missing["format"] == "HEIC" and missing["mtime"] is None
    for facts in (corrupt, empty, missing):
        assert "\n" not in facts["error"]
    facts = [photo_facts(files[k]) for k in ("corrupt", "small", "missing")]
    assert choose_keeper(facts) == 1 and keeper_reason(facts, 1) == "the only readable copy"


class Decoded(BaseException):
    """Raised by a patched pixel loader: a BaseException, so no ``except Exception`` can hide it."""


def _huge_png_header(path, side=20000):
    """A PNG whose header says side x side RGB (1.2 GB decoded) followed by an empty IDAT."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))
    return str(path)


def test_facts_decode_no_pixels(files, tmp_path, monkeypatch):
    from PIL import ImageFile

    def refuse(self, *args, **kwargs):
        raise Decoded("pixels decoded")

    monkeypatch.setattr(Image.Image, "load", refuse)
    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)
    for key in ("camera", "png", "webp", "sideways", "exif_png"):
        assert photo_facts(files[key])["error"] is None
    assert photo_facts(files["camera"])["date"] == "2019-05-01T10:11:12"
    huge = photo_facts(_huge_png_header(tmp_path / "huge.png"))
    assert (huge["width"], huge["height"], huge["megapixels"], huge["error"]) == (20000, 20000, 400.0, None)
    assert Image.MAX_IMAGE_PIXELS is not None   # Pillow's limit restored


def _facts(path, w=320, h=240, fmt="JPEG", date=None, camera=None, size=1000, mtime="2024-01-01T00:00:00"):
    return {"path": path, "width": w, "height": h, "megapixels": round(w * h / 1e6, 1), "bytes": size,
            "format": fmt, "date": date, "camera": camera, "mtime": mtime, "error": None}


def test_default_rule_keeps_the_largest_then_the_original(files):
    assert KEEPER_RULE == ("raw", "resolution", "not-backup", "oldest", "path")
    facts = [photo_facts(files[k]) for k in ("small", "png", "webp", "camera")]
    assert choose_keeper(facts) == 3   # the same pixels: the camera's file is the one taken first
    assert keeper_reason(facts, 3) == "oldest (2019-05-01)"
    facts = [photo_facts(files[k]) for k in ("small", "png")]   # the small one is older and has EXIF
    assert choose_keeper(facts) == 1 and keeper_reason(facts, 1) == "largest resolution (320x240)"


def test_the_default_keeper_rules_decide_in_turn(tmp_path):
    """A photo in its album, its copy in a backup folder, a half-size copy and the RAW it was developed from: each
    rule of the default keeper decides in turn, and says so."""
    album = str(tmp_path / "Famille" / "Noël 2020" / "100200.jpg")
    backup = str(tmp_path / "Backup (copie)" / "copy of 100200.jpg")   # shorter path, same pixels, same date
    half = str(tmp_path / "Famille" / "Noël 2020" / "small" / "100200.jpg")
    raw = str(tmp_path / "Famille" / "Noël 2020" / "IMG_100200.CR2")
    date = "2020-12-24T19:00:00"
    original, copy = _facts(album, 4000, 3000, date=date), _facts(backup, 4000, 3000, date=date)
    resized = _facts(half, 2000, 1500, date=date)
    raw_file = {**_facts(raw, fmt="CR2", date=date), "width": None, "height": None, "megapixels": None}

    facts = [copy, original]   # same pixels, same date; the backup's path is shorter
    assert choose_keeper(facts) == 1
    assert keeper_reason(facts, 1) == "not in a copies folder (the other is in 'Backup (copie)')"
    facts = [resized, copy]    # more pixels decide before the folder
    assert choose_keeper(facts) == 1 and keeper_reason(facts, 1) == "largest resolution (4000x3000)"
    facts = [original, raw_file, copy, resized]   # the RAW of a RAW + JPEG pair, whatever its unknown size
    assert choose_keeper(facts) == 1 and keeper_reason(facts, 1) == "the RAW original (CR2 over JPG)"
    facts = [_facts(album, date="2020-12-25T10:00:00"), _facts(half, date=date)]   # same pixels, both in the album
    assert choose_keeper(facts) == 1 and keeper_reason(facts, 1) == "oldest (2020-12-24)"
    facts = [_facts(half), _facts(album)]
    assert choose_keeper(facts) == 1 and keeper_reason(facts, 1) == "shortest path"


def test_preferred_and_never_kept_folders(tmp_path):
    library, disk = str(tmp_path / "Pictures"), str(tmp_path / "BackupDisk")
    in_library, on_disk = _facts(library + "/trip/a.jpg"), _facts(disk + "/a.jpg")
    bigger_on_disk = _facts(disk + "/b.jpg", 640, 480)
    rule = keeper_rule_with(KEEPER_RULE, prefer_folders=[library], never_keep_in=[disk])
    assert rule == ("not-under:" + disk, "raw", "resolution", "under:" + library, "not-backup", "oldest", "path")
    facts = [on_disk, in_library]   # the shorter path is on the disk
    assert choose_keeper(facts) == 0 and choose_keeper(facts, rule) == 1
    assert keeper_reason(facts, 1, rule) == f"not under {disk} (never kept there)"
    facts = [bigger_on_disk, in_library]   # never kept there, even when larger
    assert choose_keeper(facts, rule) == 1
    assert choose_keeper(facts, keeper_rule_with(prefer_folders=[library])) == 0   # the pixels decide first
    other = _facts(str(tmp_path / "elsewhere" / "a.jpg"))
    facts = [other, in_library]
    assert keeper_reason(facts, 1, keeper_rule_with(prefer_folders=[library])) == f"under {library} (preferred)"


def test_the_format_rule_orders_formats_then_date_then_path():
    rule = ("resolution", "format", "oldest", "path")   # the format criterion, named by the user
    order = ["x.gif", "x.webp", "x.png", "x.jpg", "x.heic", "x.tif", "x.dng"]
    formats = ["GIF", "WEBP", "PNG", "JPEG", "HEIF", "TIFF", "DNG"]
    for n in range(1, len(order)):
        facts = [_facts(p, fmt=f) for p, f in zip(order[:n + 1], formats[:n + 1], strict=True)]
        assert choose_keeper(facts, rule) == n
    assert keeper_reason([_facts("b.png", fmt="PNG"), _facts("a.jpg")], 1, rule) == "original format (JPEG over PNG)"
    facts = [_facts("a.png", fmt="PNG", camera="Canon EOS 5D"), _facts("b.jpg")]   # camera EXIF first
    assert choose_keeper(facts, rule) == 0
    facts = [_facts("a.jpg", date="2020-01-01T00:00:00"), _facts("b.jpg", date="2019-05-01T09:00:00")]
    assert choose_keeper(facts, rule) == 1 and keeper_reason(facts, 1, rule) == "oldest (2019-05-01)"
    facts = [_facts("a.jpg", date="2019-05-01T10:00:00"), _facts("b.jpg", mtime="2019-05-01T09:00:00")]
    assert choose_keeper(facts, rule) == 1 and keeper_reason(facts, 1, rule) == "oldest (modified 2019-05-01 09:00:00)"
    facts = [_facts("dir/a.jpg"), _facts("b.jpg"), _facts("a.jpg")]
    assert choose_keeper(facts, rule) == 2 and keeper_reason(facts, 2, rule) == "first path alphabetically"
    assert keeper_reason(facts[:2], 1, rule) == "shortest path"
    assert keeper_reason(facts, 0, rule) == "chosen by hand (the rule prefers a.jpg)"
    assert keeper_reason([facts[0]], 0, rule) == "the only copy"


def test_each_rule_criterion_changes_the_choice(files, tmp_path):
    keys = ("small", "png", "webp", "camera", "plain", "datetime")
    facts = [photo_facts(files[k]) for k in keys]

    def keeper(text):
        rule = parse_keeper_rule(text)
        i = choose_keeper(facts, rule)
        return keys[i], keeper_reason(facts, i, rule)

    assert keeper("oldest") == ("datetime", "oldest (2018-02-03)")
    del facts[-1]   # then two copies taken at the same time: the rule's next criterion, or the path
    assert keeper("oldest") == ("small", "shortest path")
    assert keeper("oldest, resolution") == ("camera", "largest resolution (320x240)")
    assert keeper("newest")[0] == "png"   # its file date (2023) is newer than every EXIF date
    assert keeper("smallest") == ("small", "smallest resolution (160x120)")
    assert keeper("bytes")[0] == max(keys, key=lambda k: os.path.getsize(files[k])) == "png"
    assert keeper("format")[0] == "small"   # a camera JPEG before the larger PNG copy
    assert keeper("path") == ("png", "shortest path")
    library = os.path.dirname(files["plain"])
    assert keeper(f"under:{library},resolution") == ("plain", f"under {library} (preferred)")
    assert keeper(f"under:{tmp_path}")[0] == "png"   # nothing under it: the path decides
    assert choose_keeper(facts, ("under:" + library,)) == 4   # a tuple rule works as well


def test_parse_keeper_rule():
    assert parse_keeper_rule(" Resolution , OLDEST,path") == ("resolution", "oldest", "path")
    assert parse_keeper_rule("under:~/Pictures,bytes") == ("under:" + os.path.expanduser("~/Pictures"), "bytes")
    assert parse_keeper_rule(",".join(KEEPER_RULE)) == KEEPER_RULE
    for bad in ("biggest", "resolution,,oldest", "", "under:", "under:  ", "not-under:"):
        with pytest.raises(ValueError, match="valid criteria: raw, resolution, smallest") as err:
            parse_keeper_rule(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="did you mean 'newest'"):
        parse_keeper_rule("newst")
    assert parse_keeper_rule("not-under:~/Backup, raw") == ("not-under:" + os.path.expanduser("~/Backup"), "raw")
    with pytest.raises(ValueError, match="unknown criterion"):
        choose_keeper([_facts("a.jpg")], ("largest",))
    with pytest.raises(ValueError, match="empty"):
        choose_keeper([])
    assert "under:DIR" in KEEPER_CRITERIA
