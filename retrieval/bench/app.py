"""Benchmarks of the application, run by ``retrieval bench app``.

- ``minibench``: the images of ``minibench.json`` copied into a photo folder, indexed with a preset through
  :class:`~retrieval.app.index.Index` (what ``retrieval index`` runs), each group's first image queried (what
  ``retrieval query`` runs); mAP over the groups with the query removed from its own list (INRIA Holidays
  protocol), with and without re-ranking.
- ``throughput``: N small generated images (random textured scenes, each one a few views of a common
  pattern) indexed; images per second per stage, then query latency p50/p95 over Q queries.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from retrieval.app.index import Index
from retrieval.engine.presets import load_preset
from retrieval.evaluation.ap import average_precision


def _average_precision(ranked, positives) -> float:
    """Holidays-style AP (trapezoidal over recall, as holidays_map.py) of a ranked list of names."""
    return float(average_precision(list(ranked), set(positives), check=False))


def _copy_minibench(spec: dict, base: Path, photos: Path) -> dict:
    """Copy the spec's images into ``photos`` (flat names); returns {absolute copied path: name in the spec}."""
    if photos.exists():
        shutil.rmtree(photos)
    photos.mkdir(parents=True)
    name_of = {}
    for rel in spec["images"]:
        dst = photos / rel.replace("/", "__")
        shutil.copy(base / rel, dst)
        name_of[str(dst.resolve())] = rel
    return name_of


def minibench(spec_path, workdir, *, preset="default", reranks=None, feature_store=None,
              workers=None, progress=False) -> dict:
    """mAP of ``preset`` on minibench: a new index of the copied images, then one query per group.

    Returns ``{"preset", "n_images", "n_queries", "index_seconds", "map": {rerank: value},
    "query_seconds": {rerank: seconds per query}}`` and ``"spatial"`` (why it was not measured) when spatial
    re-ranking is unavailable. Raises RuntimeError when an image cannot be indexed.
    """
    spec_path = Path(spec_path)
    spec = json.loads(spec_path.read_text())
    workdir = Path(workdir)
    photos = workdir / "photos"
    name_of = _copy_minibench(spec, spec_path.parent, photos)
    index_dir = workdir / f"index-{Path(str(preset)).stem}"
    if index_dir.exists():
        shutil.rmtree(index_dir)
    t0 = time.perf_counter()
    idx = Index.create(index_dir, preset=preset, feature_store=feature_store)
    try:
        report = idx.sync(photos, workers=workers, progress=progress)
        index_seconds = time.perf_counter() - t0
        if report.errors:
            raise RuntimeError(f"{len(report.errors)} minibench image(s) could not be indexed, e.g. "
                               f"{report.errors[0][0]}: {report.errors[0][1]}")
        if reranks is None:
            kind = load_preset(preset)["kind"]
            reranks = ("none", "exact", "spatial") if kind == "object" else ("none", "spatial")
        out = {"preset": str(preset), "n_images": len(spec["images"]), "n_queries": len(spec["groups"]),
               "index_seconds": round(index_seconds, 1), "map": {}, "query_seconds": {}}
        for rerank in reranks:
            aps = []
            t0 = time.perf_counter()
            for g in spec["groups"]:
                q = str((photos / g["images"][0].replace("/", "__")).resolve())
                hits = idx.search(q, k=len(spec["images"]), rerank=rerank)
                ranked = [name_of[h.path] for h in hits if name_of[h.path] != g["images"][0]]
                aps.append(_average_precision(ranked, g["images"][1:]))
            out["map"][rerank] = round(float(np.mean(aps)), 4)
            out["query_seconds"][rerank] = round((time.perf_counter() - t0) / len(spec["groups"]), 3)
    finally:
        idx.close()
    return out


def make_synthetic_folder(folder, n: int, *, side: int = 96, views: int = 4, seed: int = 0) -> list[str]:
    """``n`` small PNG images: ``n / views`` random textured patterns, each seen through ``views`` random
    crops/zooms (so that queries have true matches)."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    n_patterns = max(1, n // views)
    for g in range(n_patterns):
        base = rng.random((side // 4 + 2, side // 4 + 2))
        big = np.kron(base, np.ones((6, 6)))  # blocky texture with corners and blobs
        big = (255 * (0.5 * big + 0.5 * rng.random(big.shape) * (rng.random() < 0.5))).astype(np.uint8)
        sub = folder / f"{g // 1000:03d}"
        sub.mkdir(exist_ok=True)
        for v in range(views):
            if len(paths) >= n:
                break
            H, W = big.shape
            s = int(side * rng.uniform(1.0, 1.4))
            y = int(rng.integers(0, max(1, H - s)))
            x = int(rng.integers(0, max(1, W - s)))
            im = Image.fromarray(big[y:y + s, x:x + s]).resize((side, side), Image.BILINEAR)
            p = sub / f"g{g:05d}_v{v}.png"
            im.save(p)
            paths.append(str(p))
    return paths


def throughput(workdir, *, n: int = 10000, queries: int = 200, preset="default", workers=None,
               progress=False) -> dict:
    """Index ``n`` generated images with ``preset``; report stage timings and query latency p50/p95 (ms)."""
    workdir = Path(workdir)
    photos = workdir / "photos"
    t0 = time.perf_counter()
    if not photos.exists():
        make_synthetic_folder(photos, n)
    t_gen = time.perf_counter() - t0
    index_dir = workdir / "index"
    if index_dir.exists():
        shutil.rmtree(index_dir)
    idx = Index.create(index_dir, preset=preset)
    t0 = time.perf_counter()
    report = idx.sync(photos, workers=workers, progress=progress)
    t_index = time.perf_counter() - t0
    rows = idx.catalog.rows()
    rng = np.random.default_rng(1)
    picks = rng.choice(len(rows), min(queries, len(rows)), replace=False)
    lat = {}
    for rerank in ("none", "spatial"):
        times = []
        for j in picks:
            t = time.perf_counter()
            idx.search(rows[int(j)]["path"], k=10, rerank=rerank)
            times.append(1000 * (time.perf_counter() - t))
        lat[rerank] = {"p50_ms": round(float(np.percentile(times, 50)), 2),
                       "p95_ms": round(float(np.percentile(times, 95)), 2)}
    info = idx.info()
    return {"n_images": len(rows), "indexed": info["indexed"], "generate_seconds": round(t_gen, 1),
            "index_seconds": round(t_index, 1), "images_per_second": round(len(rows) / t_index, 1),
            "ivfadc": bool(getattr(idx.searcher().backend, "ivf", None) is not None),
            "bytes_on_disk": info["bytes_on_disk"], "errors": len(report.errors), "latency": lat,
            "stage_seconds": report.stage_seconds,
            "queries": int(len(picks))}


def bench_app(*, minibench_json=None, n_images=None, queries: int = 200, presets=("default",), workdir="bench-app",
              feature_store=None, workers=None, progress=False) -> dict:
    """``{"minibench": [minibench(...) per preset], "throughput": throughput(...) with the first preset}``;
    each part only when its input (``minibench_json``, ``n_images``) is given."""
    if not minibench_json and not n_images:
        raise ValueError("bench_app needs a minibench spec and/or a number of images to generate.")
    out = {}
    if minibench_json:
        out["minibench"] = [minibench(minibench_json, workdir, preset=p, feature_store=feature_store, workers=workers,
                                      progress=progress) for p in presets]
    if n_images:
        out["throughput"] = throughput(f"{workdir}/throughput-{n_images}", n=n_images, queries=queries,
                                       preset=presets[0], workers=workers, progress=progress)
    return out
