"""Benchmark ``retrieval bench generic``: from what folder size a new index should learn its own model.

A first index of a folder either imports the package's generic model (:mod:`retrieval.app.generic_models`) or
learns one from the folder. For each preset and each size N (25, 50, 100, 200, 400, 800 photos), the first N photos of
a real set, taken as whole groups (every group kept whole, so that each query has all its positives; the set's
distractors fill the remainder), are indexed twice: ``train_on="generic"`` and ``train_on="collection"``. Each
group's first photo is queried; mAP follows the Holidays protocol (query left out of its own list, trapezoidal AP,
:mod:`retrieval.evaluation.ap`). The training time the generic model saves is the difference of the two indexing
times, features being extracted once beforehand into one feature store (extraction costs the same either way).

Independence: the shipped generic models are learnt from the Holidays photos of the data folder
(:data:`~retrieval.app.generic_models.TRAINING_FOLDER`). On a set sharing photos with them (found by content hash)
the shipped model's mAP is flattered: it is reported, but the verdict uses a stand-in learnt as the shipped one is
(an index with explicit training images, as ``scripts/train_generic_models.py`` does) from the set's photos
outside the N measured: the same kind of photos and nearly as many as the shipped model's, when at least
:data:`MIN_REST` remain. Otherwise (800 of Holidays' 805) it uses a stand-in learnt from other benchmarks' photos
(:data:`retrieval.bench.peers.INDEPENDENT_TRAINING`: UKBench and Oxford for Holidays), also reported at every size:
photos of other kinds, a third fewer. UKBench, which shares no photo with the shipped models, is measured with the
shipped model itself (the case of a folder unlike the training photos).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.evaluation.ap import average_precision

logger = logging.getLogger(__name__)

SIZES = (25, 50, 100, 200, 400, 800)
PRESETS = ("default", "compact", "accurate", "object")
"""The bundled presets with a generic model."""
MIN_REST = 400
"""Fewest photos outside the N measured for the "rest of the set" stand-in (the shipped models learnt from 805)."""
SETS = {"holidays805": ("real", "holidays805.json"), "ukbench400": ("real", "ukbench400.json")}
"""The sets measured, as group specs under the data folder (``../shared/data``)."""


@dataclass(frozen=True)
class Subset:
    """The first photos of a group set: ``images`` (names in the spec), ``groups`` as ``(query, positives)``."""

    images: tuple
    groups: tuple


def set_groups(bench) -> tuple[list, list]:
    """``([(query, [positives in spec order]), ...], [distractors])`` of a loaded group spec
    (:class:`~retrieval.evaluation.groups.GroupsBenchmark`), in the spec's order."""
    member = {}
    for q in bench.queries:
        member[q] = q
        for p in bench.positives[q]:
            member[p] = q
    order = {n: i for i, n in enumerate(bench.images)}
    groups = [(q, sorted(bench.positives[q], key=order.__getitem__)) for q in bench.queries]
    return groups, [n for n in bench.images if n not in member]


def first_photos(groups, distractors, n: int) -> Subset | None:
    """The first whole groups holding at most ``n`` photos, then distractors up to ``n`` photos; None when the set
    has fewer than ``n`` photos or no group fits."""
    total = sum(1 + len(pos) for _, pos in groups) + len(distractors)
    if n > total:
        return None
    images, kept = [], []
    for q, pos in groups:
        if len(images) + 1 + len(pos) > n:
            break
        images += [q, *pos]
        kept.append((q, frozenset(pos)))
    if not kept:
        return None
    images += distractors[:n - len(images)]
    return Subset(images=tuple(images), groups=tuple(kept))


def subset_map(rank, subset: Subset) -> float:
    """Mean AP over ``subset``'s groups; ``rank(query, k)`` returns the names of the ranked database photos."""
    aps = []
    for q, positives in subset.groups:
        ranked = [name for name in rank(q, len(subset.images)) if name != q]
        aps.append(average_precision(ranked, positives, check=False))
    return float(np.mean(aps))


def crossover(rows, preset: str) -> int | None:
    """The largest size N asked for in ``rows`` (:func:`bench_generic` results, ``"size"``) such that, at N and
    every smaller size, the generic model's mAP is at least the folder-trained model's on every set; None when it
    loses at the smallest size."""
    sizes = sorted({r["size"] for r in rows if r["preset"] == preset})
    best = None
    for n in sizes:
        if any(r["map_generic"] < r["map_folder"] for r in rows if r["preset"] == preset and r["size"] == n):
            break
        best = n
    return best


def training_overlap(set_paths, data) -> int:
    """How many of ``set_paths`` (files) are, by content, among the shipped models' training photos."""
    from retrieval.app.generic_models import TRAINING_FOLDER
    from retrieval.features.image import is_image_name
    from retrieval.features.store import file_hash

    folder = Path(data).joinpath(*TRAINING_FOLDER)
    if not folder.is_dir():
        return 0
    trained = {file_hash(p) for p in folder.iterdir() if is_image_name(p.name)}
    return sum(file_hash(p) in trained for p in set_paths)


def stand_in_model(preset: str, data, set_name: str, workdir: Path, feature_store) -> tuple[Path, int]:
    """A generic model for ``preset`` learnt, as ``scripts/train_generic_models.py`` learns the shipped one, from
    the photos of other benchmarks than ``set_name`` (kept in ``workdir`` for reruns); ``(model folder, photos)``."""
    from retrieval.app.index import Index
    from retrieval.bench.peers import training_images

    images = [str(p.resolve()) for p in training_images(set_name, data, "independent")]
    folder = workdir / f"stand-in-{preset}-{set_name}"
    if not (folder / "model" / "model.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        idx = Index.create(folder, preset, train_images=images, train_on="collection", feature_store=feature_store)
        try:
            idx.sync([images[0]])
        finally:
            idx.close()
    return folder / "model", len(images)


def measure(folder: Path, preset: str, bench, subset: Subset, model, *, feature_store,
            workers) -> tuple[float, float, float]:
    """Index ``subset``'s photos in ``folder`` (removed afterwards) with ``model``: "generic" (the shipped model),
    "collection" (learnt on the photos), a model folder, or a list of training images. Returns ``(mAP, indexing
    seconds, training seconds)``."""
    from retrieval.app.index import Index

    shutil.rmtree(folder, ignore_errors=True)
    path_of = {n: str(bench.path(n).resolve()) for n in subset.images}
    name_of = {p: n for n, p in path_of.items()}
    if isinstance(model, Path):
        idx = Index.create(folder, preset, model=model, train_on="collection", feature_store=feature_store)
    elif isinstance(model, list):
        idx = Index.create(folder, preset, train_images=model, train_on="collection", feature_store=feature_store)
    else:
        idx = Index.create(folder, preset, train_on=model, feature_store=feature_store)
    try:
        t0 = time.perf_counter()
        report = idx.sync(list(path_of.values()), workers=workers)
        seconds = time.perf_counter() - t0
        if report.errors:
            raise RuntimeError(f"{len(report.errors)} photo(s) could not be indexed, e.g. {report.errors[0][0]}: "
                               f"{report.errors[0][1]}")
        generic = bool((idx.catalog.get_meta("model") or {}).get("generic"))
        if report.trained != (model == "collection" or isinstance(model, list)) or generic != (model == "generic"):
            raise RuntimeError(f"{folder}: the index was not built with the model asked for.")

        def rank(q, k):
            return [name_of[h.path] for h in idx.search(path_of[q], k=k) if h.path in name_of]

        m = subset_map(rank, subset)
    finally:
        idx.close()
        shutil.rmtree(folder, ignore_errors=True)
    return m, seconds, float(report.stage_seconds.get("train", 0.0))


def bench_generic(data, workdir, *, presets=PRESETS, sets=tuple(SETS), sizes=SIZES,
                  feature_store=None, workers: int | None = 1):
    """Yield one row per (preset, set, size): the generic model against the folder-trained one.

    Parameters
    ----------
    data : path — the shared data folder (``real/holidays805.json``, ``real/ukbench400.json`` and their photos)
    workdir : path — scratch folder: the indexes (removed after each measure), the stand-in models
    presets : names of bundled presets with a generic model
    sets : names among :data:`SETS`
    sizes : photo counts N (a size larger than a set is skipped for that set)
    feature_store : path or None — feature store shared by every index (default ``workdir/features``)
    workers : extraction processes

    Yields
    ------
    dict
        ``{"preset", "set", "size" (the N asked for), "n" (photos indexed: whole groups, at most N), "groups",
        "overlap" (of the set's photos with the shipped models' training photos), "map_shipped" (the shipped model;
        flattered when ``overlap``), "map_other_sets" (stand-in learnt from other benchmarks, or None without
        overlap), "other_images", "map_rest_of_set" (stand-in learnt from the set's photos outside the N, when
        overlapping and at least :data:`MIN_REST` of them; else None), "rest_images", "map_generic" (what the
        verdict uses: the shipped model's mAP without overlap, else the rest-of-set stand-in's when measured, else
        the other-sets one's), "map_folder" (the model
        learnt on the N photos), "index_s_generic" (indexing with the shipped model), "index_s_folder", "train_s"
        (the folder-trained index's training stage), "saved_s" (index_s_folder - index_s_generic)}``.
    """
    from retrieval.app.generic_models import provenance
    from retrieval.engine.presets import load_preset, preset_config
    from retrieval.evaluation.groups import load_groups_spec
    from retrieval.features import FeatureExtractor
    from retrieval.features.parallel import extract_many
    from retrieval.features.store import FeatureStore

    data, workdir = Path(data), Path(workdir)
    store_dir = Path(feature_store) if feature_store else workdir / "features"
    for name in presets:
        if provenance(load_preset(name)) is None:
            raise ValueError(f"preset {name!r} has no generic model: run 'make setup' (or "
                             f"'python scripts/train_generic_models.py').")
    for set_name in sets:
        if set_name not in SETS:
            raise ValueError(f"unknown set {set_name!r}: expected one of {', '.join(SETS)}.")
        spec = data.joinpath(*SETS[set_name])
        if not spec.is_file():
            raise FileNotFoundError(f"{spec}: not found (set {set_name!r} of --data {data}).")
        bench = load_groups_spec(spec)
        groups, distractors = set_groups(bench)
        paths = [str(bench.path(n).resolve()) for n in bench.images]
        overlap = training_overlap(paths, data)
        logger.info("%s: %d photos, %d of them among the shipped models' training photos", set_name, len(paths),
                    overlap)
        for preset in presets:
            extractor = FeatureExtractor(**preset_config(load_preset(preset)).features.extractor_kwargs())
            for i, res in extract_many(paths, extractor, workers=workers, store=FeatureStore(store_dir)):
                if isinstance(res, Exception):
                    raise RuntimeError(f"{paths[i]}: {res}")
            other, n_other = (stand_in_model(preset, data, set_name, workdir, store_dir) if overlap
                              else (None, None))
            for n in sizes:
                subset = first_photos(groups, distractors, n)
                if subset is None:
                    continue
                kw = {"feature_store": store_dir, "workers": workers}
                index = workdir / "index"
                m_ship, s_gen, _ = measure(index, preset, bench, subset, "generic", **kw)
                m_own, s_own, s_train = measure(index, preset, bench, subset, "collection", **kw)
                row = {"preset": preset, "set": set_name, "size": n, "n": len(subset.images),
                       "groups": len(subset.groups),
                       "overlap": overlap, "map_shipped": round(m_ship, 4), "map_other_sets": None,
                       "other_images": n_other, "map_rest_of_set": None, "rest_images": None}
                if overlap:
                    row["map_other_sets"] = round(measure(index, preset, bench, subset, other, **kw)[0], 4)
                    inside = {str(bench.path(x).resolve()) for x in subset.images}
                    rest = [p for p in paths if p not in inside]
                    if len(rest) >= MIN_REST:
                        row["map_rest_of_set"] = round(measure(index, preset, bench, subset, rest, **kw)[0], 4)
                        row["rest_images"] = len(rest)
                verdict = "map_shipped" if not overlap else (
                    "map_rest_of_set" if row["map_rest_of_set"] is not None else "map_other_sets")
                row.update(map_generic=row[verdict], map_folder=round(m_own, 4),
                           index_s_generic=round(s_gen, 1), index_s_folder=round(s_own, 1),
                           train_s=round(s_train, 1), saved_s=round(s_own - s_gen, 1))
                logger.info("%s", row)
                yield row
