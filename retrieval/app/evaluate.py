"""Run a benchmark end to end on the application's :class:`retrieval.Index`: extract (cached), train, index, query,
score with the official protocol, write the official result files and a JSON report.

Protocol choices (Jegou et al. 2012, Sec. 5; Zhu et al. 2013, Sec. 4):

- the model (local PCA, vocabulary, projection, codec) is trained on an independent image set when one is given
  (``train_images``: e.g. Flickr60k for Holidays, Paris6k for Oxford); otherwise it is trained on the benchmark's
  own database images and the report says so in ``warnings`` (figures are then optimistic);
- features are extracted once into a shared :class:`retrieval.features.FeatureStore` (``cache_dir``), keyed by
  content hash and extractor configuration, so re-runs and other presets with the same features reuse them;
- queries with a box (Oxford, Paris, Revisited) are searched with ``bbox`` = their box (the query image cropped to
  its box); Holidays / groups queries are whole images, and their own image is dropped from their list by the
  scorer;
- each ranked list has ``k`` entries (default: the whole database up to 10,000 images, else 1,000); positives
  beyond ``k`` count as not retrieved.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import statistics
import time
from pathlib import Path

from retrieval._version import __version__
from retrieval.app.index import Index
from retrieval.core.checks import ParamError
from retrieval.core.persistence import write_json_atomic
from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.engine.paper_presets import apply_overrides
from retrieval.engine.presets import (
    check_available,
    load_preset,
    preset_config,
    preset_digest,
)
from retrieval.evaluation.crops import load_crops, score_crops
from retrieval.evaluation.groups import load_groups_spec, score_groups
from retrieval.features import FeatureExtractor
from retrieval.features.image import IMAGE_EXTENSIONS, is_image_name
from retrieval.features.parallel import extract_many
from retrieval.features.store import FeatureStore

logger = logging.getLogger(__name__)


def groups_dataset(spec, distractors=None) -> RetrievalDataset:
    """A :class:`RetrievalDataset` for a minibench-format spec (see :mod:`retrieval.evaluation.groups`), with the
    images of the folder ``distractors`` (if given) added to the database as negatives of every query."""
    from retrieval.app.index_support import walk_photos

    bench = load_groups_spec(spec)
    missing = bench.missing_files()
    if missing:
        raise FileNotFoundError(f"{spec}: {len(missing)} of {len(bench.images)} images missing: "
                                + "; ".join(missing[:5]))
    paths = {n: bench.path(n) for n in bench.images}
    extra = {}
    if distractors is not None:
        top = Path(distractors).resolve()
        extra = {f"distractor:{Path(p).resolve().relative_to(top)}": Path(p) for p in walk_photos(top)}
        if not extra:
            raise ParamError("distractors", str(distractors), template="{value}: no image found ({distractors}).")
        paths.update(extra)

    def scorer(rankings):
        s = score_groups(bench, rankings, distractors=extra)
        return {"protocol": "groups", "mAP": s.mAP, "per_query": s.per_query}

    name = f"groups:{Path(spec).name}" + (f"+{Path(distractors).name}" if extra else "")
    return RetrievalDataset(name=name, root=bench.root, database=list(bench.images) + list(extra),
                            paths=paths, queries=[Query(name=q, path=paths[q], image=q) for q in bench.queries],
                            exclude_query=True, scorer=scorer,
                            notes=["Holidays protocol: query excluded from its own list"])


def crops_dataset(root, database) -> RetrievalDataset:
    """A :class:`RetrievalDataset` for query crops with true/false lists (:mod:`retrieval.evaluation.crops`).

    ``root`` holds the query images and their ``NAME_TP.txt`` / ``NAME_FP.txt``; ``database`` is the folder of
    database images (every image file directly in it), named in the lists by file name without extension. The
    query images are not in the database.
    """
    bench = load_crops(root, IMAGE_EXTENSIONS)
    database = Path(database)
    files = sorted(p for p in database.iterdir() if p.is_file() and is_image_name(p.name))
    paths = {}
    for p in files:
        if p.stem in paths:
            raise ValueError(f"{database}: two images named {p.stem!r} ({paths[p.stem].name}, {p.name}); "
                             "the lists name images without extension.")
        paths[p.stem] = p
    for q in bench.queries:
        unknown = sorted((bench.positives[q] | (bench.negatives[q] or set())) - set(paths))
        if unknown:
            raise FileNotFoundError(f"{root}: query {q} lists {len(unknown)} images not in {database} "
                                    f"(first: {unknown[0]}).")
    return RetrievalDataset(name=f"crops:{Path(root).name}", root=Path(root), database=sorted(paths),
                            paths=paths, queries=[Query(name=q, path=bench.query_files[q]) for q in bench.queries],
                            scorer=lambda rankings: score_crops(bench, rankings),
                            notes=["query crops against a separate database; AP over each query's true and "
                                   "false lists, other images ignored"])


def run_benchmark(dataset: RetrievalDataset, preset, *, work_dir, cache_dir=None, train_images=None, k=None,
                  workers: int | None = 1, out_dir=None, progress: bool = False, overrides=()) -> dict:
    """Evaluate ``preset`` on ``dataset``; returns the JSON report (also written to ``out_dir/report.json``).

    Parameters
    ----------
    dataset : RetrievalDataset
    preset : str, Path or dict
        A preset accepted by :func:`retrieval.engine.presets.load_preset`.
    work_dir : path
        Where the index is built (``work_dir/index-<preset>-<digest>``; reused when it exists).
    cache_dir : path or None
        Feature store shared across runs (default ``work_dir/features``).
    train_images : list of paths or None
        Independent training images; None trains on the database and adds a warning to the report.
    k : int or None
        Length of each ranked list.
    workers : int or None
        Feature-extraction processes (None = all cores).
    out_dir : path or None
        Official result files and ``report.json`` are written here.
    overrides : sequence of "KEY=VALUE"
        Strict preset overrides (:func:`retrieval.engine.paper_presets.apply_overrides`).

    Returns
    -------
    dict
        ``{"dataset", "preset", "mAP", "per_query", "score" (the protocol's full output), "images", "queries",
        "bytes_per_image", "extraction_seconds", "extraction_seconds_per_image", "index_seconds",
        "query_seconds_mean", "query_seconds_p50", "k", "training", "warnings", "configuration", "effective_parameters" (the preset
        parameters reduced to fit a small training set: ``{param: {"preset", "used", "reason"}}``, see
        :func:`retrieval.engine.presets.record_reduction`), "library_version", ...}``
    """
    preset = apply_overrides(load_preset(preset), overrides)
    check_available(preset)  # before any work: names the missing pieces
    preset_config(preset)  # strict: unknown keys, out-of-range values and unsupported methods refused before any work
    work_dir = Path(work_dir)
    cache_dir = Path(cache_dir) if cache_dir is not None else work_dir / "features"
    warnings = []
    if train_images is None:
        msg = ("no independent training set given: the model is trained on the benchmark's own "
               "database images, which is not the papers' protocol and gives optimistic figures")
        logger.warning(msg)
        warnings.append(msg)
        train_list = None
    else:
        train_list = sorted(str(Path(p).resolve()) for p in train_images)
        if not train_list:
            raise ParamError("train_root", None, template="the training set is empty (no image found under "
                                                          "{train_root}).")
    db_paths = [str(Path(dataset.paths[n]).resolve()) for n in dataset.database]
    name_of = {p: n for p, n in zip(db_paths, dataset.database, strict=True)}

    # 1. features, timed, into the shared cache (sync then reuses them)
    extractor = FeatureExtractor(**preset_config(preset).features.extractor_kwargs())
    store = FeatureStore(cache_dir)
    t0 = time.perf_counter()
    failures = []
    todo = db_paths + (train_list or [])
    for i, res in extract_many(todo, extractor, workers=workers, store=store):
        if isinstance(res, Exception):
            failures.append(f"{todo[i]}: {res}")
    extraction_seconds = time.perf_counter() - t0
    if failures:
        warnings.append(f"{len(failures)} images could not be read (first: {failures[0]})")

    # 2. index (trained on train_list, or on the database)
    key = hashlib.sha256(("\n".join(train_list or []) + "|" + dataset.name + "|" + str(dataset.root)).encode())
    index_dir = work_dir / f"index-{preset['name']}-{preset_digest(preset)}-{key.hexdigest()[:10]}"
    # the protocols are explicit: trained on train_list, or on the database (never the generic model)
    idx = Index.create(index_dir, preset, train_images=train_list, feature_store=cache_dir, exist_ok=True,
                       train_on="collection")
    try:
        t0 = time.perf_counter()
        sync = idx.sync(db_paths, workers=workers, skip_errors=True, progress=progress)
        index_seconds = time.perf_counter() - t0
        gen = idx.catalog.generation()
        state_bytes = idx.folder.state_bytes(gen)
        info = idx.info()
        n_indexed = info["indexed"]
        effective = dict((info.get("model") or {}).get("effective") or {})
        for param, e in effective.items():  # already logged once by the backend when it trained
            used = "dropped" if e["used"] is None else f"reduced to {e['used']}"
            warnings.append(f"preset parameter {param} = {e['preset']} {used}: {e['reason']}")

        # 3. queries
        n_db = len(dataset.database)
        kk = int(k) if k is not None else (n_db if n_db <= 10000 else 1000)
        rankings, qtimes = {}, []
        for q in dataset.queries:
            t0 = time.perf_counter()
            hits = idx.search(str(q.path), bbox=q.box, k=min(kk + (1 if dataset.exclude_query else 0), n_db))
            qtimes.append(time.perf_counter() - t0)
            rankings[q.name] = [name_of[h.path] for h in hits if h.path in name_of]
    finally:
        idx.close()

    score = dataset.score(rankings)
    report = {
        "dataset": dataset.name,
        "root": str(dataset.root),
        "preset": preset["name"],
        "mAP": score.get("mAP"),
        "per_query": score.get("per_query"),
        "score": score,
        "images": n_db,
        "indexed": n_indexed,
        "queries": len(dataset.queries),
        "k": kk,
        "bytes_per_image": state_bytes / max(n_indexed, 1),
        "bytes_per_image_note": "size of the index generation's search state (its folder and segments: codes or vectors + ids; manifests left out) / indexed images",
        "extraction_seconds": extraction_seconds,
        "extraction_seconds_per_image": extraction_seconds / max(len(todo), 1),
        "index_seconds": index_seconds,
        "query_seconds_mean": sum(qtimes) / max(len(qtimes), 1),
        "query_seconds_p50": statistics.median(qtimes) if qtimes else 0.0,
        "query_seconds_total": sum(qtimes),
        "training": {"independent": train_list is not None, "images": len(train_list) if train_list else None},
        "sync": sync.to_json(),
        "notes": list(dataset.notes),
        "warnings": warnings,
        "configuration": preset,
        "effective_parameters": effective,
        "index_folder": str(index_dir),
        "feature_cache": str(cache_dir),
        "library_version": __version__,
        "python": platform.python_version(),
    }
    if out_dir is not None:
        out_dir = Path(out_dir)
        files = dataset.write_results(rankings, out_dir / "results")
        report["results_files"] = [str(f) for f in files]
        write_json_atomic(out_dir / "report.json", report)
    return report
