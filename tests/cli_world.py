"""A small indexed photo folder shared by the CLI output tests: real photos and generated views, an exact copy
under a non-ASCII name with a space, and one unreadable file."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner
from conftest import FEATURE_CACHE
from helpers import make_pool, small_preset

from retrieval.cli.main import main


def run(args, **kw):
    """``retrieval ARGS`` in-process; stderr apart from stdout and not a terminal (as in a pipe)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kw)


def build_world(d):
    """Index 14 pool photos, an exact copy of one under a non-ASCII name with a space and an unreadable file
    (the ``cli_world`` fixture of tests/conftest.py)."""
    pool = make_pool(d / "pool")
    photos = d / "photos"
    photos.mkdir()
    for p in pool[:14]:
        shutil.copy(p, photos)
    shutil.copy(pool[1], photos / "Müller copy.jpg")
    (photos / "broken.jpg").write_text("not an image")
    preset = d / "p.json"
    preset.write_text(json.dumps(small_preset("cli-small")))
    res = run(["index", photos, "--index", d / "idx", "--preset", preset, "--feature-store", FEATURE_CACHE,
               "--workers", "1"])
    assert res.exit_code == 0, res.output
    return {"dir": d, "photos": photos, "index": str(d / "idx"), "pool": pool, "index_run": res}
