"""The bad-input catalogue of docs/user-guide.md ("Bad input"), one case each: the exit status, the one line that
names the file or value and says what was expected, no traceback, and nothing stored lost."""

from __future__ import annotations

import json
import shutil
import struct
import zlib

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FEATURE_CACHE
from helpers import make_pool, small_preset
from PIL import Image

from retrieval.cli.main import main


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def png_header(path, w, h):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    pool = make_pool(d / "pool")
    photos = d / "photos"
    photos.mkdir()
    for p in pool[:6]:
        shutil.copy(p, photos)
    (photos / "empty.jpg").write_bytes(b"")
    buf = photos / "half.jpg"
    Image.open(pool[2]).convert("RGB").save(buf, quality=90)
    buf.write_bytes(buf.read_bytes()[: len(buf.read_bytes()) // 3])
    (photos / "notes.jpg").write_text("not an image")
    Image.new("RGB", (1, 1)).save(photos / "dot.png")
    png_header(photos / "bomb.png", 20000, 20000)
    png_header(photos / "wide.png", 16000, 10000)
    Image.open(pool[3]).convert("CMYK").save(photos / "cmyk.jpg")
    arr = (np.asarray(Image.open(pool[4]).convert("L"), np.uint16) * 257)
    Image.fromarray(arr).save(photos / "deep16.png")
    im = Image.open(pool[5]).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6
    im.save(photos / "rotated.jpg", exif=exif)
    preset = d / "p.json"
    preset.write_text(json.dumps(small_preset()))
    res = run(["-q", "index", str(photos), "--index", str(d / "i"), "--preset", str(preset), "--feature-store",
               str(FEATURE_CACHE)])
    return d, photos, pool, res


def error_lines(res):
    return [ln for ln in res.output.splitlines() if ln.startswith(("Error", "error:"))]


@pytest.mark.parametrize("name, reason", [
    ("empty.jpg", "the file is empty (0 bytes)"),
    ("half.jpg", "corrupt or truncated"),
    ("notes.jpg", "not an image file"),
    ("dot.png", "too small: 1x1 pixels"),
    ("bomb.png", "too large"),
    ("wide.png", "160.0 megapixels, more than max_megapixels=150"),
])
def test_unreadable_files_are_listed_once_and_the_rest_indexed(world, name, reason):
    d, photos, _, res = world
    assert res.exit_code == 0 and "Traceback" not in res.output
    lines = [ln for ln in error_lines(res) if name in ln]
    assert len(lines) == 1 and reason in lines[0], lines


@pytest.mark.parametrize("name", ["cmyk.jpg", "deep16.png", "rotated.jpg"])
def test_unusual_but_valid_images_are_indexed(world, name):
    d, photos, _, res = world
    assert not [ln for ln in error_lines(res) if name in ln]
    info = json.loads(run(["info", "--index", str(d / "i"), "--json"]).output)
    assert name not in json.dumps(info["error_files"])


def test_exif_orientation_is_applied(world):
    d, photos, pool, _ = world
    w, h = Image.open(pool[5]).size
    res = run(["query", str(photos / "rotated.jpg"), "--index", str(d / "i"), "--bbox", f"0,0,{h - 1},{w - 1}",
               "--top", "1"])
    assert res.exit_code == 0      # the box spans the rotated image exactly: it is h x w after the EXIF rotation


@pytest.mark.parametrize("args, code, message", [
    (["index", "{d}/nope"], 1, "does not exist"),
    (["index", "{d}/emptydir"], 1, "holds no images"),
    (["index", "{photos}/cmyk.jpg"], 1, "is not a folder (expected a folder of photos)"),
    (["query", "{photos}/missing.jpg", "--index", "{d}/i"], 1, "does not exist"),
    (["query", "{photos}/cmyk.jpg", "--index", "{d}/nope"], 1, "index folder"),
    (["query", "{q}", "--index", "{d}/i", "--bbox", "10,10,5,40"], 1, "x1 <= x2"),
    (["query", "{q}", "--index", "{d}/i", "--bbox", "10,10,10,40"], 1, "x2 > x1"),
    (["query", "{q}", "--index", "{d}/i", "--bbox", "5000,5000,6000,6000"], 1, "outside the query image"),
    (["query", "{q}", "--index", "{d}/i", "--bbox", "a,b,c,d"], 1, "x1,y1,x2,y2"),
    (["query", "{q}", "--index", "{d}/i", "--bbox", "0,0,5000,40"], 0, "clipped to"),
    (["query", "{q}", "--index", "{d}/i", "--method", "cosine"], 1, "--scoring 'cosine': expected one of ip"),
    (["index", "{d}/other", "--index", "{d}/i"], 1, "--add-root"),
    (["index", "{photos}", "--index", "{photos}/cmyk.jpg"], 1, "this is a file; an index is a folder"),
    (["query", "{q}", "--index", "{photos}/cmyk.jpg"], 1, "this is a file; an index is a folder"),
    (["index", "{photos}", "--index", "{d}/i2", "--preset", "nosuch"], 2, "nosuch"),
])
def test_bad_arguments_are_one_line(world, tmp_path, args, code, message):
    d, photos, pool, _ = world
    (d / "emptydir").mkdir(exist_ok=True)
    (d / "other").mkdir(exist_ok=True)
    shutil.copy(pool[7], d / "other")
    q = photos / pool[1].name
    res = run([a.format(d=d, photos=photos, q=q) for a in args])
    assert res.exit_code == code, res.output
    assert message in res.output and "Traceback" not in res.output
    if code:
        assert len(error_lines(res)) == 1


def test_no_features_in_the_box(world, tmp_path):
    d, photos, _, _ = world
    flat = tmp_path / "flat.png"
    Image.new("RGB", (300, 200), (120, 120, 120)).save(flat)
    res = run(["query", str(flat), "--index", str(d / "i"), "--bbox", "10,10,100,100"])
    assert res.exit_code == 1 and "no local features inside the box" in res.output and len(error_lines(res)) == 1


def test_query_of_an_empty_index_and_a_concurrent_writer(world, tmp_path):
    from retrieval.app.index import Index

    d, photos, _, _ = world
    Index.create(tmp_path / "e", small_preset())
    res = run(["query", str(photos / "cmyk.jpg"), "--index", str(tmp_path / "e")])
    assert res.exit_code == 1 and "is empty" in res.output and len(error_lines(res)) == 1
    building = Index.open(tmp_path / "e")
    with building.folder.writer_lock():                   # a first build in progress, nothing committed yet
        res = run(["query", str(photos / "cmyk.jpg"), "--index", str(tmp_path / "e")])
    assert res.exit_code == 1 and "is being built by a running 'retrieval index'" in res.output
    idx = Index.open(d / "i")
    with idx.folder.writer_lock():
        res = run(["index", str(photos), "--index", str(d / "i")])
    assert res.exit_code == 1 and "another 'retrieval index' or 'remove' is writing" in res.output
    idx.close()
