"""``retrieval bench duplicates``: how right and how fast ``retrieval duplicates`` is.

- :func:`evaluate_labelled`: the labelled set of :mod:`retrieval.bench.duplicate_set` (real photos and their edited
  copies, other shots, unrelated photos) indexed, its duplicates found, and every kind scored pair by pair:
  precision and recall of exact and near (a near pair counts as found when its two photos end up in one near
  group, or in one exact group, or one in an exact group whose keeper is in the other's near group), scene pairs
  labelled near or exact, unrelated pairs put in any group, and the different-shot pairs of UKBench labelled near or
  exact.
- :func:`bench_speed`: photos per second of ``find_duplicates`` on an index of ``n`` photos: the real photos of the
  shared data (Holidays 325 px, UKBench 640 px, Oxford 1,024 px), 5 % generated copies of them (edited, extracted
  for real), and beyond the real photos *synthetic distinct photos*: tiny files whose stored features mix four real
  photos' features with their positions shuffled (their global codes look like real photos', they match nothing
  geometrically). The sync keeps each photo's duplicate code as it adds it (``codes_s``: encoding every photo's code, by the sync
or, for the photos an earlier run's sync added, right after it); then
``find_duplicates`` is timed twice: first on a newly opened index (nothing cached but the codes: ``first``), then
again in the same process (``again``).
"""

from __future__ import annotations

import itertools
import shutil
import time
from pathlib import Path

import numpy as np


# ------------------------------------------------------------------------------------------------ accuracy
def score(groups, labels: dict, root: Path) -> dict:
    """Pair-level figures of ``groups`` (:class:`DuplicateGroup`) against ``labels`` (module docstring)."""
    root = Path(root).resolve()

    def rel(p):
        return str(Path(p).resolve().relative_to(root))

    keeper_of, near_group, group_of = {}, {}, {}
    reported = {"exact": set(), "near": set(), "scene": set()}
    for g in groups:
        names = [rel(im["path"]) for im in g.images]
        for a, b in itertools.combinations(names, 2):
            reported[g.kind].add(frozenset((a, b)))
        for n in names:
            group_of.setdefault(n, set()).add(g.group)
        if g.kind == "exact":
            for n in names:
                keeper_of[n] = rel(g.keeper_path)
        elif g.kind == "near":
            for n in names:
                near_group[n] = g.group

    def rep(f):
        return keeper_of.get(f, f)

    def same_photo(a, b):
        ra, rb = rep(a), rep(b)
        return ra == rb or (ra in near_group and near_group.get(ra) == near_group.get(rb))

    exact_t, near_t, scene_t = labels["exact"], labels["near"], labels["scene"]
    related = exact_t | near_t | scene_t
    out = {"photos": len(labels["files"])}
    tp = len(reported["exact"] & exact_t)
    out["exact"] = {"pairs": len(exact_t), "reported": len(reported["exact"]),
                    "precision": tp / max(len(reported["exact"]), 1), "recall": tp / max(len(exact_t), 1)}
    same = reported["exact"] | reported["near"]
    wrong_near = {p for p in reported["near"] if p not in near_t and p not in exact_t}
    found = sum(same_photo(*sorted(p)) for p in near_t)
    out["near"] = {"pairs": len(near_t), "reported": len(reported["near"]),
                   "precision": 1 - len(wrong_near) / max(len(reported["near"]), 1),
                   "recall": found / max(len(near_t), 1)}
    out["scene_labelled_near_or_exact"] = len(same & scene_t)
    out["scene"] = {"pairs": len(scene_t), "reported": len(reported["scene"] & scene_t),
                    "recall": len(reported["scene"] & scene_t) / max(len(scene_t), 1)}
    everything = reported["exact"] | reported["near"] | reported["scene"]
    out["unrelated_in_groups"] = len(everything - related)
    role = labels["role"]
    ukb = {p for p in scene_t if all("ukbench" in f and role[f] in ("original", "scene") for f in p)}
    out["ukbench_shots_near_or_exact"] = len(same & ukb)
    out["ukbench_shot_pairs"] = len(ukb)
    rng = np.random.default_rng(0)
    files = labels["files"]
    unrelated = set()
    while len(unrelated) < min(1000, len(files) * (len(files) - 1) // 2 - len(related)):
        a, b = (files[int(i)] for i in rng.choice(len(files), 2, replace=False))
        if frozenset((a, b)) not in related:
            unrelated.add(frozenset((a, b)))
    out["unrelated_sampled"] = len(unrelated)
    out["unrelated_sampled_in_one_group"] = sum(bool(group_of.get(a, set()) & group_of.get(b, set()))
                                                for a, b in map(sorted, unrelated))
    return out


def evaluate_labelled(data_dir, workdir, *, preset: str = "default", n_sources: int = 100, variants: int = 4,
                      holidays_groups: int = 40, workers: int | None = None, feature_store=None) -> dict:
    """Build the labelled set in ``workdir`` (a new folder), index it with ``preset``, find its duplicates and
    :func:`score` them; with ``seconds`` (finding) and the labels' counts."""
    from retrieval.app.duplicates import find_duplicates
    from retrieval.app.index import Index
    from retrieval.bench.duplicate_set import make_labelled_set

    workdir = Path(workdir)
    labels = make_labelled_set(data_dir, workdir / "photos", n_sources=n_sources, variants=variants,
                               holidays_groups=holidays_groups)
    idx = Index.create(workdir / "index", preset=preset, feature_store=feature_store)
    idx.sync(workdir / "photos", workers=workers)
    t0 = time.perf_counter()
    groups = find_duplicates(idx)
    seconds = time.perf_counter() - t0
    out = score(groups, labels, workdir / "photos")
    out.update({"preset": preset, "seconds": round(seconds, 2), "groups": len(groups),
                "edits": sorted({e.split(" ")[0] for e in labels["edit"].values()})})
    idx.close()
    return out


# ------------------------------------------------------------------------------------------------ speed
COPY_SHARE = 0.05
MIX = 4


def _synthetic(i: int, sources: list, rng_seed: int = 0):
    """Features of synthetic photo ``i``: a quarter of the features of each of :data:`MIX` real photos, their
    positions shuffled among them (module docstring)."""
    from retrieval.features.types import LocalFeatures

    rng = np.random.default_rng((rng_seed, i))
    picks = [sources[int(j)] for j in rng.choice(len(sources), MIX, replace=False)]
    frames, desc = [], []
    for f in picks:
        n = len(f)
        keep = rng.choice(n, max(1, n // MIX), replace=False) if n else np.zeros(0, np.int64)
        frames.append(f.frames[keep])
        desc.append(f.descriptors[keep])
    frames, desc = np.concatenate(frames), np.concatenate(desc)
    frames = frames[rng.permutation(len(frames))]
    return LocalFeatures(frames=np.ascontiguousarray(frames), descriptors=np.ascontiguousarray(desc),
                         image_size=picks[0].image_size, config=picks[0].config)


def _prepare(data_dir, workdir: Path, n: int, extractor, store, workers) -> Path:
    """``workdir/photos-N``: real photos (links), generated copies, synthetic photos (module docstring)."""
    from PIL import Image

    from retrieval.bench.duplicate_set import EDITS, edit_photo
    from retrieval.bench.library_photos import hash_bytes, prepare_sources, replica_png
    from retrieval.features.parallel import extract_many
    from retrieval.features.store import file_hash

    src = prepare_sources(data_dir, store, extractor, workdir / "extract.json", workers=workers)
    paths, hashes = src["paths"], src["hashes"]
    photos = workdir / f"photos-{n}"
    if (photos / ".complete").is_file():
        return photos
    n_copies = int(round(COPY_SHARE * n))
    n_real = min(len(paths), n - n_copies)
    n_synth = n - n_copies - n_real
    photos.mkdir(parents=True, exist_ok=True)
    for i in range(n_real):
        dst = photos / "real" / f"{i:05d}{Path(paths[i]).suffix}"
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(Path(paths[i]).resolve())
    rng = np.random.default_rng(1)
    todo = []
    for c in range(n_copies):
        dst = photos / "copies" / f"c{c:05d}.jpg"
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            im = Image.open(paths[c % n_real]).convert("RGB")
            img, opts, _, _ = edit_photo(im, EDITS[c % len(EDITS)], rng)
            img.save(dst, format="JPEG", **{k: v for k, v in opts.items() if k == "quality"})
        if (file_hash(dst), extractor.config_key) not in store:
            todo.append(dst)
    for j, res in extract_many(todo, extractor, workers=workers):
        if isinstance(res, Exception):
            raise ValueError(f"{todo[j]}: cannot extract the features of this generated copy ({res}).")
        store.put(file_hash(todo[j]), res, extractor.config_key)
    if n_synth:
        feats = [store.get(h, extractor.config_key) for h in hashes]
        for s in range(n_synth):
            data = replica_png(s)
            dst = photos / "synthetic" / f"{s // 1000:04d}" / f"s{s:07d}.png"
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
            h = hash_bytes(data)
            if (h, extractor.config_key) not in store:
                store.put(h, _synthetic(s, feats), extractor.config_key)
    (photos / ".complete").write_text("ok\n")
    return photos


def candidate_search(idx, *, k: int | None = None, sample: int = 2000) -> dict:
    """How the finder searched the candidates of ``idx``: ``{"inverted_file", "cells", "seconds", ...}``; through the
    inverted file (:mod:`retrieval.app.duplicates.candidates`), also the share of a sample of photos' exact
    candidates it found (:func:`~retrieval.app.duplicates.candidates.sampled_recall`)."""
    from retrieval.app.duplicates import DEFAULT_CANDIDATES, DEFAULT_THRESHOLD
    from retrieval.app.duplicates.candidates import candidate_pairs, sampled_recall, search_cells
    from retrieval.app.duplicates.codes import CodeSpace, centred

    k = DEFAULT_CANDIDATES if k is None else k
    rows = [r for r in idx.catalog.snapshot()[1] if r["status"] == "indexed"]
    reps = {}
    for r in sorted(rows, key=lambda r: r["id"]):
        reps.setdefault(r["hash"], r["id"])
    Q = centred(CodeSpace(idx.searcher(), idx.path).codes(list(reps.values()), list(reps)))
    C = np.ascontiguousarray(Q[:, 0])
    t0 = time.perf_counter()
    cells = search_cells(C)
    pairs = candidate_pairs(Q, C, k=k, threshold=-1.0, cells=cells)
    out = {"inverted_file": cells is not None, "cells": 0 if cells is None else len(cells.centres),
           "pairs": len(pairs), "seconds": round(time.perf_counter() - t0, 1)}
    if cells is not None:
        out.update(sampled_recall(Q, C, pairs, k=k, threshold=DEFAULT_THRESHOLD, sample=sample))
    return out


def bench_speed(data_dir, workdir, sizes=(1000, 10000), *, preset: str = "default", workers: int | None = None,
                threads: int | None = None, again: bool = True) -> list[dict]:
    """Photos per second of ``find_duplicates`` at each size (module docstring): ``{"n", "preset", "index_s",
    "codes_s", "first_s", "first_photos_per_s", "again_s", "again_photos_per_s", "groups": {kind: n},
    "candidates": {...}}`` (``candidates``: :func:`candidate_search`; the ``again_`` keys only with ``again``);
    ``threads``: verification threads (None: the default of ``retrieval duplicates``)."""
    from retrieval.app.duplicates import find_duplicates
    from retrieval.app.duplicates.codes import CODES_DIR, LEGACY_FILE, CodeParts, codes_key, keep_codes
    from retrieval.app.index import Index
    from retrieval.features.extractor import FeatureExtractor
    from retrieval.features.store import FeatureStore

    workdir = Path(workdir)
    store_dir = workdir / "features"
    store = FeatureStore(store_dir)
    out = []
    for n in sizes:
        idx_dir = workdir / f"index-{preset}-{n}"
        idx = Index.open(idx_dir) if idx_dir.exists() else Index.create(idx_dir, preset=preset,
                                                                          feature_store=store_dir)
        extractor = idx.extractor if isinstance(idx.extractor, FeatureExtractor) else FeatureExtractor()
        photos = _prepare(data_dir, workdir, n, extractor, store, workers)
        shutil.rmtree(idx_dir / CODES_DIR, ignore_errors=True)    # every photo's code encoded in this run
        (idx_dir / LEGACY_FILE).unlink(missing_ok=True)
        t0 = time.perf_counter()
        report = idx.sync(photos, workers=workers)
        index_s = time.perf_counter() - t0
        codes_s = report.stage_seconds.get("codes", 0.0)
        # the photos of an earlier run's sync: their codes kept now, as that sync does
        kept = set(CodeParts(idx_dir, codes_key()).load(hashes_only=True))
        missing = [r["hash"] for r in idx.catalog.snapshot()[1] if r["status"] == "indexed" and r["hash"] not in kept]
        t0 = time.perf_counter()
        keep_codes(idx_dir, store, extractor.config_key, missing)
        codes_s += time.perf_counter() - t0
        idx.close()
        row = {"n": 0, "preset": preset, "index_s": round(index_s, 1), "codes_s": round(codes_s, 1)}
        idx = Index.open(idx_dir)
        row["n"] = idx.catalog.count("indexed")
        for label in ("first", "again") if again else ("first",):
            t0 = time.perf_counter()
            groups = find_duplicates(idx) if threads is None else find_duplicates(idx, threads=threads)
            s = time.perf_counter() - t0
            row[f"{label}_s"] = round(s, 2)
            row[f"{label}_photos_per_s"] = round(row["n"] / s, 1)
        row["groups"] = {k: sum(g.kind == k for g in groups) for k in ("exact", "near", "scene")}
        row["candidates"] = candidate_search(idx)
        idx.close()
        out.append(row)
    return out

