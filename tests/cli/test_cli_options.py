"""Consistent options: one list of image formats (GIF first frame, HEIC/HEIF, AVIF) for index, query, match and
train; --top / -k; --scoring / --estimator with --method as a deprecated alias (one warning line); output files in
the format of their extension or refused; 'index FILE' is one line, exit 1; presets in aligned columns."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from cli_world import run
from PIL import Image

from retrieval.features.image import IMAGE_EXTENSIONS, load_image


def save_or_skip(im, path, **kw):
    try:
        im.save(path, **kw)
    except (KeyError, OSError, ValueError) as exc:
        pytest.skip(f"this Pillow cannot encode {path.suffix} here ({exc})")


def heif_or_skip():
    try:
        import pillow_heif
    except ImportError:
        pytest.skip("pillow-heif is not installed (pip install pillow-heif)")
    pillow_heif.register_heif_opener()


def test_one_format_list_gif_heic_avif_indexed_and_queried(cli_world, tmp_path):
    assert {".gif", ".heic", ".heif", ".avif", ".jpg", ".png"} <= set(IMAGE_EXTENSIONS)
    heif_or_skip()
    src = Image.open(cli_world["photos"] / "img04.jpg").convert("RGB")
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in cli_world["pool"][6:12]:
        shutil.copy(p, photos)
    # an animated GIF: the first frame is the photo, the second a flat grey frame
    frames = [src.convert("P", palette=Image.Palette.ADAPTIVE), Image.new("P", src.size, 128)]
    frames[0].save(photos / "anim.gif", save_all=True, append_images=frames[1:], duration=100)
    save_or_skip(src, photos / "photo.heic", quality=90)
    save_or_skip(src, photos / "photo.avif", quality=90)
    ref = load_image(cli_world["photos"] / "img04.jpg").pixels.astype(float)
    for name in ("anim.gif", "photo.heic", "photo.avif"):
        got = load_image(photos / name).pixels.astype(float)
        assert got.shape == ref.shape and np.abs(got - ref).mean() < 12, name   # the photo, not the grey frame
    idx = tmp_path / "idx"
    res = run(["index", photos, "--index", idx, "--preset", cli_world["dir"] / "p.json", "--model", cli_world["index"],
               "--workers", "1"])
    assert res.exit_code == 0, res.output
    listed = {r["path"].rsplit("/", 1)[-1]: r for r in
              (json.loads(ln) for ln in run(["list", "--index", idx, "--format", "jsonl"]).stdout.splitlines())}
    assert {"anim.gif", "photo.heic", "photo.avif"} <= set(listed)
    assert all(listed[n]["status"] == "ok" and listed[n]["features"] > 0 for n in ("anim.gif", "photo.heic",
                                                                                      "photo.avif"))
    for name in ("anim.gif", "photo.heic", "photo.avif"):
        hits = json.loads(run(["query", photos / name, "--index", idx, "-k", "3", "--format", "json"]).stdout)
        assert len(hits) == 3 and {h["path"].rsplit("/", 1)[-1] for h in hits} >= {"anim.gif", "photo.heic",
                                                                                 "photo.avif"} - {name} - set()
    res = run(["match", photos / "photo.heic", photos / "anim.gif", "--max-side", "400", "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["verified"] is True
    res = run(["train", "vocab", photos, "-o", tmp_path / "v.npz", "-k", "4", "--kind", "kmeans", "--pca-dim", "0",
               "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["n_images"] == 9


def test_unsupported_files_are_one_line(cli_world, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    img = cli_world["photos"] / "img01.jpg"
    for args in (["query", notes, "--index", cli_world["index"]], ["match", notes, img], ["extract", notes]):
        res = run(args)
        assert res.exit_code == 1 and res.stderr.count("\n") == 1 and "not a supported image format" in res.stderr
    res = run(["index", notes, "--index", tmp_path / "i"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1 and "is not a folder" in res.stderr
    res = run(["query", img, "--index", notes])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1 and "this is a file" in res.stderr


def test_output_files_follow_their_extension(cli_world, tmp_path):
    a, b = cli_world["photos"] / "img01.jpg", cli_world["photos"] / "Müller copy.jpg"
    for ext, fmt in ((".gif", "GIF"), (".png", "PNG"), (".jpg", "JPEG"), (".webp", "WEBP")):
        res = run(["match", a, b, "--max-side", "300", "--out", tmp_path / f"m{ext}"])
        assert res.exit_code == 0, res.output
        assert Image.open(tmp_path / f"m{ext}").format == fmt
    res = run(["match", a, b, "--out", tmp_path / "m.pdf"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1 and "--out" in res.stderr
    assert not (tmp_path / "m.pdf").exists()
    res = run(["query", a, "--index", cli_world["index"], "--html", tmp_path / "g.png"])
    assert res.exit_code == 1 and "--html" in res.stderr and not (tmp_path / "g.png").exists()


def test_top_k_and_renamed_method_options(cli_world):
    q = cli_world["photos"] / "img01.jpg"
    base = ["query", q, "--index", cli_world["index"], "--format", "jsonl"]
    by_top = run([*base, "--top", "4"]).stdout
    assert len(by_top.splitlines()) == 4 and run([*base, "-k", "4"]).stdout == by_top
    new = run([*base, "-k", "4", "--scoring", "ip"])
    assert new.exit_code == 0 and new.stdout == by_top and new.stderr == ""
    old = run([*base, "-k", "4", "--method", "ip"])
    assert old.exit_code == 0 and old.stdout == by_top
    assert old.stderr.splitlines() == ["warning: --method is deprecated, use --scoring"]
    bad = run([*base, "--scoring", "cosine"])
    assert bad.exit_code == 1 and "--scoring 'cosine': expected one of ip" in bad.stderr
    b = cli_world["photos"] / "Müller copy.jpg"
    m_new = run(["match", q, b, "--max-side", "300", "--estimator", "ransac", "--format", "json"])
    m_old = run(["match", q, b, "--max-side", "300", "--method", "ransac", "--format", "json"])
    assert json.loads(m_new.stdout)["params"]["method"] == json.loads(m_old.stdout)["params"]["method"] == "ransac"
    assert m_old.stderr.splitlines() == ["warning: --method is deprecated, use --estimator"]
    assert "--method" not in run(["query", "--help"]).stdout and "--scoring" in run(["query", "--help"]).stdout


def test_presets_aligned_plain_words():
    lines = run(["presets"]).stdout.splitlines()
    assert lines[0].split()[:3] == ["name", "kind", "ready"]
    rows = lines[1:-1]
    assert {ln.split()[0] for ln in rows} >= {"default", "object"} and len(rows) <= 6
    col = lines[0].index("what it is for")
    assert all(len(ln) > col and ln[col - 1] == " " and ln[col] != " " for ln in rows)
    assert all(len(ln) <= 100 for ln in lines[:-1])
    assert len(run(["presets", "--all"]).stdout.splitlines()) > len(lines)
