"""A small indexed folder with duplicates for the web tests of the duplicates routes and page: real Holidays photos
(one per scene, so unrelated to each other) plus two photos of one more scene, byte copies of two photos in a
subfolder and a half-size PNG of another; indexed with the small preset and model of ``cli_world``
(tests/cli_world.py), served by a :class:`web_support.ServerThread`."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from conftest import FEATURE_CACHE, shared_path
from PIL import Image

from retrieval.app.index import Index

SCENE = ("100400.jpg", "100401.jpg")
"""Two photos of one Holidays scene (a same-scene group)."""


def sources() -> list[Path]:
    by_scene = {}
    for p in sorted(shared_path("real", "holidays805", "jpg").glob("*.jpg")):
        by_scene.setdefault(p.name[:4], p)
    return [p for p in list(by_scene.values())[::9] if p.name[:4] != SCENE[0][:4]][:6]


def build_dup_world(d: Path, cli_world) -> dict:
    """Photos ``p0.jpg`` .. ``p5.jpg``, ``scene-a.jpg`` / ``scene-b.jpg`` (one scene), ``copies/p0.jpg`` and
    ``copies/p2.jpg`` (byte copies), ``copies/p1 small.png`` (half size); the index in ``d/idx``."""
    src = sources()
    photos = d / "photos"
    (photos / "copies").mkdir(parents=True)
    for i, p in enumerate(src):
        shutil.copy(p, photos / f"p{i}.jpg")
    for i in (0, 2):
        shutil.copy(src[i], photos / "copies" / f"p{i}.jpg")
    im = Image.open(src[1]).convert("RGB")
    im.resize((im.width // 2, im.height // 2), Image.LANCZOS).save(photos / "copies" / "p1 small.png")
    holidays = shared_path("real", "holidays805", "jpg")
    for name, dst in zip(SCENE, ("scene-a.jpg", "scene-b.jpg"), strict=True):
        shutil.copy(holidays / name, photos / dst)
    idx = Index.create(d / "idx", cli_world["dir"] / "p.json", model=cli_world["index"], feature_store=FEATURE_CACHE)
    report = idx.sync(photos, workers=1)
    idx.close()
    assert not report.errors, report.errors
    return {"photos": photos, "index": d / "idx", "sources": src}


def tree(folder: Path) -> dict:
    """{path relative to ``folder``: sha256} of every file under it."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}
