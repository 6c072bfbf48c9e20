"""A photographer's folder for the web tests of folders, names, originals and the information panel: real photos
(the Holidays samples and the OpenCV box pictures of ../shared/data) in sub-folders with accented names, a star and
spaces in names, a HEIC photo (written with pillow-heif) and a JPEG with an EXIF date, camera and orientation 6;
indexed once per session with the default preset (features kept in the shared test feature cache)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FEATURE_CACHE, shared_path

from retrieval.app.index import Index

LAYOUT = {
    "été/plage 1.jpg": ("holidays", "103300.jpg"),
    "été/coucher de soleil.png": ("holidays", "101402.png"),
    "été/île aux poissons.jpg": ("holidays", "103100.jpg"),
    "voyages/Égypte/pyramide.jpg": ("holidays", "108100.jpg"),
    "voyages/Syrie/palmyre.jpg": ("holidays", "115100.jpg"),
    "voyages/Croatie/dubrovnik.png": ("holidays", "119200.png"),
    "montagne/lac des Alpes.jpg": ("holidays", "112406.jpg"),
    "montagne/cascade*.jpg": ("holidays", "100200.jpg"),
    "téléphone/IMG_0001.heic": ("holidays", "100503.png"),
    "manège.png": ("holidays", "100600.png"),
    "bateau.jpg": ("holidays", "123600.png"),
    "objets/box.png": ("opencv_samples", "box.png"),
    "objets/box in scene.png": ("opencv_samples", "box_in_scene.png"),
}
"""Photo (relative to the photo folder) -> its source in ../shared/data."""

EXIF_PHOTO = "été/plage 1.jpg"
EXIF_DATE, EXIF_MAKE, EXIF_MODEL = "2023:07:14 18:32:05", "Canon", "Canon EOS 80D"
HEIC_PHOTO = "téléphone/IMG_0001.heic"
QUERY, RESULT = "objets/box in scene.png", "objets/box.png"


def write_photo(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` in the format of ``dst``'s extension (a copy when it is the same)."""
    from PIL import Image

    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix.lower() == dst.suffix.lower():
        shutil.copy(src, dst)
        return
    im = Image.open(src).convert("RGB")
    if dst.suffix.lower() == ".heic":
        import pillow_heif

        pillow_heif.register_heif_opener()
        im.save(dst, quality=90)
    else:
        im.save(dst, quality=92)


def write_exif_photo(src: Path, dst: Path) -> None:
    """A JPEG stored turned a quarter to the left with EXIF orientation 6 (so it displays upright), a date and a
    camera."""
    from PIL import Image

    im = Image.open(src).convert("RGB").transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[271], exif[272] = EXIF_MAKE, EXIF_MODEL
    exif.get_ifd(0x8769)[36867] = EXIF_DATE
    dst.parent.mkdir(parents=True, exist_ok=True)
    im.save(dst, quality=92, exif=exif.tobytes())


def build_photo_world(root: Path) -> dict:
    """The photo folder ``root/photos`` (:data:`LAYOUT`) and its index ``root/index``: ``{"photos", "index",
    "paths": {relative name: path}}``."""
    photos = root / "photos"
    paths = {}
    for rel, (kind, name) in LAYOUT.items():
        src = shared_path(kind, "images", name) if kind == "holidays" else shared_path(kind, name)
        paths[rel] = photos / rel
        (write_exif_photo if rel == EXIF_PHOTO else write_photo)(src, paths[rel])
    idx = Index.create(root / "index", preset="default", feature_store=FEATURE_CACHE)
    report = idx.sync(photos, workers=1)
    idx.close()
    assert not report.errors, report.errors
    return {"photos": photos, "index": root / "index", "paths": paths}


@pytest.fixture(scope="session")
def photo_world(tmp_path_factory):
    return build_photo_world(tmp_path_factory.mktemp("photoworld"))


def heic_bytes(seed: int, size=(360, 270)) -> bytes:
    """A HEIC file of a textured picture (pillow-heif)."""
    import io

    import pillow_heif
    from PIL import Image
    from web_support import textured

    pillow_heif.register_heif_opener()
    buf = io.BytesIO()
    Image.fromarray(textured(seed, size)).save(buf, format="HEIF", quality=90)
    return buf.getvalue()
