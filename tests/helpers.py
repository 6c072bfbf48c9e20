"""Helpers shared by several test modules (real photo pools, small presets, small benchmark specs)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_path

from retrieval.app.index import Index
from retrieval.engine.presets import load_preset, missing_pieces


def small_preset(name="test-small"):
    p = load_preset("default")
    p.update(name=name, version=1)
    p["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
    p["projection"] = None
    p["training"] = {"max_images": 200, "max_descriptors": 6000, "random_state": 0}
    p["search"] = dict(p["search"], rerank="none")
    return p


def make_pool(folder: Path, side: int = 200) -> list[Path]:
    """Distinct real photos (scikit-image) and generated views, as small JPEG/PNG files."""
    from PIL import Image

    from retrieval.app.demo_data import build_demo_folder

    src = folder / "src"
    made = build_demo_folder(src)
    out = []
    paths = made["photos"] + [p for v in made["views"].values() for p in v]
    for i, p in enumerate(paths):
        im = Image.open(p).convert("RGB")
        im.thumbnail((side, side))
        dst = folder / f"img{i:02d}{'.png' if i % 3 == 0 else '.jpg'}"
        im.save(dst, quality=90)
        out.append(dst)
    shutil.rmtree(src)
    return out


def catalog_view(idx: Index) -> list[tuple]:
    return sorted((r["path"], r["hash"], r["size"], r["status"], r["n_features"], r["width"], r["height"])
                  for r in idx.catalog.rows())


def results_view(idx: Index, queries, k: int = 6) -> list:
    out = []
    for q in queries:
        hits = idx.search(str(q), k=k)
        out.append([(h.path, float(h.score)) for h in hits])
    return out


def assert_same_results(got: list, want: list, atol: float = 1e-5) -> None:
    """Same paths in the same order; scores equal up to float rounding (training sums in another order)."""
    assert [[p for p, _ in row] for row in got] == [[p for p, _ in row] for row in want]
    for row_g, row_w in zip(got, want, strict=True):
        np.testing.assert_allclose([s for _, s in row_g], [s for _, s in row_w], rtol=0, atol=atol)


def small_spec(tmp_path, n_groups=4, n_distractors=2):
    data = shared_path("minibench.json").parent
    spec = json.loads((data / "minibench.json").read_text())
    groups = [g for g in spec["groups"] if g["name"].startswith("boofcv_triple")][:n_groups]
    distractors = spec["distractors"][:n_distractors]
    for name in [i for g in groups for i in g["images"]] + distractors:
        link = tmp_path / "bench" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(data / name, link)
    out = tmp_path / "bench" / "spec.json"
    out.write_text(json.dumps({"groups": groups, "distractors": distractors}))
    return out


def fast_overrides(name, max_side=480):
    """Small settings so that a whole run fits the test budget (the full presets run in docs/results.md)."""
    kind = load_preset(name)["kind"]
    small = ["object_search.n_words=1000"] if kind == "object" else ["aggregation.n_components=16"]
    return [f"features.max_side={max_side}", *small]


def first_available(names=("object", "default", "compact")):
    for name in names:
        if not missing_pieces(load_preset(name)):
            return name
    pytest.skip(f"none of the presets {names} is available in this installation yet")


def copy_index(src, dst) -> Path:
    """A copy of the index folder ``src`` at ``dst`` while other code may hold it open: ``catalog.db`` through
    SQLite's online backup (its committed state, WAL included), the other files as they are. A plain
    ``shutil.copytree`` can list ``catalog.db-wal`` and then fail to find it, when the last connection to the
    catalog closes (and checkpoints) in between."""
    import sqlite3
    from contextlib import closing

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("catalog.db", "catalog.db-wal", "catalog.db-shm",
                                                            "catalog.db-journal"))
    if (src / "catalog.db").exists():
        with closing(sqlite3.connect(src / "catalog.db")) as a, closing(sqlite3.connect(dst / "catalog.db")) as b:
            a.backup(b)
    return dst


def publish_state(backend, root: Path, gen: int = 1) -> Path:
    """``backend``'s state saved as generation ``gen`` of an index folder ``root``, its new segments renamed into
    place as a publish does (retrieval.engine.segments; no manifest, no catalog); returns the generation folder."""
    folder = root / "gens" / f"{gen:08d}"
    folder.mkdir(parents=True)
    backend.save_state(folder)
    for seg in (root / "segments").glob("*.tmp"):
        seg.rename(seg.with_name(seg.name[:-len(".tmp")]))
    return folder


def pattern_images(n, seed=0, *, patterns=5, size=60, clutter=(10, 30)):
    """``n`` synthetic images (32-d descriptors) drawn from ``patterns`` shared patterns of ``size`` descriptors:
    each image holds half to all of one pattern plus noise, and ``clutter`` (low, high) random descriptors."""
    from retrieval.features import LocalFeatures

    rng = np.random.default_rng(seed)
    shared = [rng.normal(size=(size, 32)).astype(np.float32) for _ in range(patterns)]
    out = []
    for j in range(n):
        base = shared[j % patterns][rng.permutation(size)[:int(rng.integers(size // 2, size))]]
        desc = np.concatenate([base + 0.05 * rng.normal(size=base.shape),
                               rng.normal(size=(int(rng.integers(*clutter)), 32))])
        frames = np.zeros((len(desc), 6), np.float32)
        frames[:, :2] = rng.uniform(0, 300, (len(desc), 2))
        frames[:, 2] = frames[:, 5] = 3.0
        out.append(LocalFeatures(frames=frames, descriptors=desc.astype(np.float32), image_size=(320, 320)))
    return out


def photo_index(folder: Path, pool: list, batches, preset: str = "test-faults") -> tuple[Path, Path]:
    """``folder/index``, an index (:func:`small_preset`) of the ``pool``'s photos copied into ``folder/photos``,
    one sync per batch: ``batches`` counts the photos each sync adds (``(6, 2)``: two generations). Returns
    ``(index, photos)``."""
    import shutil

    from retrieval.app.index import Index

    photos = folder / "photos"
    photos.mkdir()
    idx = Index.create(folder / "index", small_preset(preset))
    start = 0
    for n in batches:
        for p in pool[start:start + n]:
            shutil.copy(p, photos)
        idx.sync(photos, workers=1)
        start += n
    idx.close()
    return folder / "index", photos
