"""A labelled duplicate set built from real photos (``retrieval bench duplicates --labelled``, and the tests of
:mod:`retrieval.app.duplicates`): which pairs of a folder are exact copies, near duplicates (the same photograph
edited) or photos of the same scene, known by construction.

For each source photo (the first shot of a UKBench group, 640 x 480), edited versions are written next to it:

- **exact**: a byte copy (under another folder and name);
- **near**: resized to 25-200 % (Lanczos), re-encoded (JPEG quality 30-95, PNG, WebP), cropped to 60-95 % of the
  area, rotated by 90, 180 or 270 degrees, brightness +-20 %; each source gets ``variants`` of these, cycling
  through the kinds so that every kind is equally represented;
- **scene**: the other shots of the source's UKBench group (same object, another viewpoint) and whole Holidays
  groups (the same place photographed again): never near.

Any two files of different sources and groups are unrelated. The labels are returned, not written with the photos,
so that the finder cannot read them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

EDITS = ("resize", "jpeg", "crop", "rotate", "png", "bright", "webp", "resize", "crop", "jpeg")
"""The near-duplicate edits, in the order they are dealt to the sources (resize and crop twice: their range is
wide)."""


def _sources(real: Path, n: int) -> list[tuple[Path, list[Path]]]:
    """``n`` source photos (at most 100): the first shot of each UKBench group, with the group's other three shots
    (same object, other viewpoints: scene)."""
    spec = json.loads((real / "ukbench400.json").read_text("utf-8"))
    out = []
    for g in spec["groups"][:n]:
        shots = [real / p for p in g["images"]]
        out.append((shots[0], shots[1:]))
    return out


def edit_photo(im, kind: str, rng):
    """``(image, save options, suffix, description)`` of one near-duplicate edit of the PIL image ``im``."""
    from PIL import Image, ImageEnhance

    if kind == "resize":
        f = float(rng.choice([0.25, 0.4, 0.6, 0.8, 1.5, 2.0]))
        size = (max(1, round(im.width * f)), max(1, round(im.height * f)))
        return im.resize(size, Image.LANCZOS), {"quality": 92}, ".jpg", f"resized {f:.0%}"
    if kind == "jpeg":
        q = int(rng.integers(30, 96))
        return im, {"quality": q}, ".jpg", f"JPEG quality {q}"
    if kind == "png":
        return im, {}, ".png", "PNG"
    if kind == "webp":
        return im, {"quality": 80}, ".webp", "WebP"
    if kind == "crop":
        area = float(rng.uniform(0.6, 0.95))
        s = area ** 0.5
        w, h = round(im.width * s), round(im.height * s)
        x, y = int(rng.integers(0, im.width - w + 1)), int(rng.integers(0, im.height - h + 1))
        return im.crop((x, y, x + w, y + h)), {"quality": 92}, ".jpg", f"cropped to {area:.0%} of the area"
    if kind == "rotate":
        a = int(rng.choice([90, 180, 270]))
        return im.rotate(a, expand=True), {"quality": 92}, ".jpg", f"rotated {a} degrees"
    if kind == "bright":
        f = float(rng.choice([0.8, 0.85, 1.15, 1.2]))
        return ImageEnhance.Brightness(im).enhance(f), {"quality": 92}, ".jpg", f"brightness {f - 1:+.0%}"
    raise ValueError(f"unknown edit {kind!r}")


def make_labelled_set(data_dir, out, *, n_sources: int = 100, variants: int = 4, holidays_groups: int = 40,
                      seed: int = 0) -> dict:
    """Write the labelled set under ``out`` (a new folder) from the real photos of ``data_dir`` (the shared data
    folder). Returns ``{"files": [relative paths], "source": {file: source key}, "role": {file: exact | near |
    scene | original}, "edit": {file: description}, "near": set of frozenset pairs, "exact": ..., "scene": ...}``:
    the pairs of each kind (two edits of one source are near to each other too; an exact copy is near to the
    source's edits)."""
    from PIL import Image

    real = Path(data_dir) / "real"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=False)
    rng = np.random.default_rng(seed)
    files, source, role, edit = [], {}, {}, {}
    deal = 0
    for s, (photo, shots) in enumerate(_sources(real, n_sources)):
        key = f"s{s:03d}"
        own = out / key
        own.mkdir()
        base = f"{key}/{photo.name}"
        shutil.copy(photo, out / base)
        files.append(base)
        source[base], role[base], edit[base] = key, "original", "original"
        if s % 4 == 0:   # an exact copy in another folder, for a quarter of the sources
            (out / "backup").mkdir(exist_ok=True)
            rel = f"backup/{key} copy{photo.suffix}"
            shutil.copy(photo, out / rel)
            files.append(rel)
            source[rel], role[rel], edit[rel] = key, "exact", "byte copy"
        im = Image.open(photo).convert("RGB")
        for v in range(variants):
            what = EDITS[deal % len(EDITS)]
            deal += 1
            img, opts, suffix, desc = edit_photo(im, what, rng)
            rel = f"{key}/{photo.stem}_{v}{suffix}"
            img.save(out / rel, **opts)
            files.append(rel)
            source[rel], role[rel], edit[rel] = key, "near", desc
        for shot in shots:
            rel = f"{key}/shot_{shot.name}"
            shutil.copy(shot, out / rel)
            files.append(rel)
            source[rel], role[rel], edit[rel] = f"{key}/{shot.name}", "scene", "another shot"
    spec = json.loads((real / "holidays805.json").read_text("utf-8"))
    groups = [g for g in spec["groups"] if len(g["images"]) >= 2]
    for gi in sorted(rng.permutation(len(groups))[:holidays_groups]):
        g = groups[int(gi)]
        folder = out / f"h{g['name']}"
        folder.mkdir()
        for p in g["images"]:
            rel = f"h{g['name']}/{Path(p).name}"
            shutil.copy(real / p, out / rel)
            files.append(rel)
            source[rel], role[rel], edit[rel] = rel, "scene", f"Holidays group {g['name']}"
    return {"files": files, "source": source, "role": role, "edit": edit, **_pairs(out, files, source)}


def _pairs(out: Path, files: list[str], source: dict) -> dict:
    """The labelled pairs: ``exact`` (same decoded pixels), ``near`` (same source photo, edited), ``scene`` (the
    same group but different photographs); everything else is unrelated."""
    from retrieval.app.duplicates import pixel_digest

    group = {f: f.split("/")[0] if f.startswith("h") else source[f].split("/")[0] for f in files}
    digest = {f: pixel_digest(out / f) for f in files if not f.startswith("h")}
    exact, near, scene = set(), set(), set()
    by_group: dict = {}
    for f in files:
        by_group.setdefault(group[f], []).append(f)
    for members in by_group.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                pair = frozenset((a, b))
                if source[a] != source[b]:
                    scene.add(pair)
                else:
                    (exact if digest[a] == digest[b] else near).add(pair)
    return {"exact": exact, "near": near, "scene": scene}
