"""Reference methods run in the same process, on the same features, images and queries as our presets.

ASMK* (Tolias, Avrithis and Jegou, ICCV 2013: aggregated selective match kernel with binary residual signatures)
through the ``asmk`` package published by the method's authors (PyPI ``asmk``; faiss k-means and search). Its
settings are those of the comparison in the benchmarks: 16,384 visual words learnt by k-means (faiss, 10
iterations) on the training images' descriptors, one word per database descriptor, 5 words per query descriptor
(multiple assignment), per-word aggregated residuals binarised by sign, selectivity alpha = 3 with threshold 0, no
idf. Descriptors: RootSIFT (128-d) of the preset's Hessian-affine features, read from the same feature store.

:func:`asmk_rankings` returns one ranked list per query in the dataset's names, so the dataset's own scorer (the
official protocol) scores both methods identically.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from retrieval.datasets.base import RetrievalDataset
from retrieval.features import FeatureExtractor
from retrieval.features.frames import select_in_box
from retrieval.features.rootsift import root_sift
from retrieval.features.store import FeatureStore

logger = logging.getLogger(__name__)

ASMK_STAR = {
    "index": {"gpu_id": None},
    "train_codebook": {"codebook": {"size": 16384}},
    "build_ivf": {"kernel": {"binary": True}, "ivf": {"use_idf": False},
                  "quantize": {"multiple_assignment": 1}, "aggregate": {}},
    "query_ivf": {"quantize": {"multiple_assignment": 5}, "aggregate": {},
                  "search": {"topk": None}, "similarity": {"similarity_threshold": 0.0, "alpha": 3.0}},
}
"""Parameters of ASMK* in the ``asmk`` package's format (Tolias et al. 2013, Sec. 4-5: binary signatures,
alpha = 3, tau = 0; query-side multiple assignment 5)."""

MAX_TRAIN_DESCRIPTORS = 2_000_000


def rootsift_of(features) -> np.ndarray:
    d = np.asarray(features.descriptors)
    return np.ascontiguousarray(root_sift(d) if d.dtype == np.uint8 else d, dtype=np.float32)


def asmk_index(train_descriptors, db_descriptors, *, codebook_size=None, seed=0):
    """ASMK* (:data:`ASMK_STAR`) trained on ``train_descriptors`` and indexing ``db_descriptors`` (lists of (n, d)
    float32 arrays, one per image; database image i gets id i). Returns ``(method, params, n_train)``."""
    try:
        from asmk import ASMKMethod
    except ImportError:  # pragma: no cover - the benchmark extra installs it
        raise ImportError("the ASMK* reference needs the 'asmk' package: pip install 'retrieval[bench]'") from None
    tdesc = np.concatenate([d for d in train_descriptors if len(d)])
    if len(tdesc) > MAX_TRAIN_DESCRIPTORS:
        rng = np.random.default_rng(seed)
        tdesc = tdesc[np.sort(rng.choice(len(tdesc), MAX_TRAIN_DESCRIPTORS, replace=False))]
    n_train = len(tdesc)
    size = codebook_size or min(ASMK_STAR["train_codebook"]["codebook"]["size"], max(64, n_train // 4))
    params = {**ASMK_STAR, "train_codebook": {"codebook": {"size": int(size)}}}
    method = ASMKMethod.initialize_untrained(params).train_codebook(tdesc)
    del tdesc
    imids = [np.full(len(d), i, np.int64) for i, d in enumerate(db_descriptors)]
    method = method.build_ivf(np.concatenate(db_descriptors), np.concatenate(imids))
    return method, params, n_train


def asmk_ranks(method, descriptors, n_db: int) -> np.ndarray:
    """Database rows (n_db,) ranked by ASMK* for one query's descriptors (all rows, in order, when it has none)."""
    if len(descriptors) == 0:
        return np.arange(n_db)
    _, _, ranks, _ = method.query_ivf(descriptors, np.zeros(len(descriptors), np.int64))
    return np.asarray(ranks[0])


def asmk_rankings(dataset: RetrievalDataset, *, extractor_kwargs: dict, cache_dir, train_paths=None,
                  codebook_size: int | None = None, k: int | None = None, seed: int = 0) -> dict:
    """Rank ``dataset``'s queries with ASMK* (:data:`ASMK_STAR`).

    Parameters
    ----------
    dataset : RetrievalDataset
    extractor_kwargs : dict
        :class:`~retrieval.features.FeatureExtractor` parameters (the preset's, so both methods see the same
        features).
    cache_dir : path
        Feature store (features missing from it are extracted and stored).
    train_paths : list of paths or None
        Images whose descriptors train the codebook (None: the database images, transductive).
    codebook_size : int or None
        Visual words (None: 16,384, capped at a quarter of the training descriptors for tiny sets).
    k : int or None
        Ranked-list length (None: the whole database).
    seed : int
        Seed of the descriptor sample when the training set has more than 2,000,000 descriptors.

    Returns
    -------
    dict
        ``{"rankings": {query name: [database names]}, "params", "codebook_size", "train_descriptors",
        "query_seconds_mean", "index_seconds"}``.
    """
    store = FeatureStore(Path(cache_dir))
    extractor = FeatureExtractor(**extractor_kwargs)
    db_paths = [Path(dataset.paths[n]) for n in dataset.database]
    train = [Path(p) for p in train_paths] if train_paths is not None else db_paths

    t0 = time.perf_counter()
    method, params, n_train = asmk_index([rootsift_of(store.get_or_extract(p, extractor)) for p in train],
                                         [rootsift_of(store.get_or_extract(p, extractor)) for p in db_paths],
                                         codebook_size=codebook_size, seed=seed)
    size = params["train_codebook"]["codebook"]["size"]
    index_seconds = time.perf_counter() - t0

    n_db = len(db_paths)
    kk = n_db if k is None else min(int(k) + (1 if dataset.exclude_query else 0), n_db)
    rankings, times = {}, []
    for q in dataset.queries:
        f = store.get_or_extract(Path(q.path), extractor)
        d = rootsift_of(f)
        if q.box is not None:
            d = d[select_in_box(f, q.box)]
        t1 = time.perf_counter()
        ranks = asmk_ranks(method, d, n_db)
        times.append(time.perf_counter() - t1)
        rankings[q.name] = [dataset.database[int(r)] for r in ranks[:kk]]
    return {"rankings": rankings, "params": params, "codebook_size": int(size),
            "train_descriptors": int(n_train), "index_seconds": index_seconds,
            "query_seconds_mean": float(np.mean(times)) if times else 0.0}


def compare_asmk(dataset: RetrievalDataset, report: dict, *, train_paths=None) -> dict:
    """ASMK* on the dataset, features and training images of an :func:`retrieval.app.evaluate.run_benchmark`
    ``report``; returns ``{"method": "ASMK*", "mAP", "score", "codebook_size", "query_seconds_mean", ...}``."""
    from retrieval.engine.presets import preset_config

    cfg = preset_config(report["configuration"])
    out = asmk_rankings(dataset, extractor_kwargs=cfg.features.extractor_kwargs(), cache_dir=report["feature_cache"],
                        train_paths=train_paths, k=report["k"])
    score = dataset.score(out.pop("rankings"))
    return {"method": "ASMK* (asmk package, Tolias et al. 2013)", "mAP": score.get("mAP"), "score": score,
            "training": "independent" if train_paths is not None else "transductive (the database images)", **out}


REAL_SETS = ("minibench", "holidays805", "ukbench400", "oxford_crops")
"""The sets of ``retrieval bench peers``, under the data folder (``../shared/data``): ``minibench.json``,
``real/holidays805.json``, ``real/ukbench400.json`` (group specs) and ``real/oxford_crops`` against
``real/oxford133/jpg`` (query crops with true/false lists)."""


def real_set(name: str, data) -> RetrievalDataset:
    """One of :data:`REAL_SETS` under the data folder ``data``; ``FileNotFoundError`` naming what is missing."""
    from retrieval.app.evaluate import crops_dataset, groups_dataset

    data = Path(data)
    specs = {"minibench": data / "minibench.json", "holidays805": data / "real" / "holidays805.json",
             "ukbench400": data / "real" / "ukbench400.json"}
    if name in specs:
        if not specs[name].is_file():
            raise FileNotFoundError(f"{specs[name]}: not found (set {name!r} of --data {data}).")
        return groups_dataset(specs[name])
    if name == "oxford_crops":
        crops, db = data / "real" / "oxford_crops", data / "real" / "oxford133" / "jpg"
        for p in (crops, db):
            if not p.is_dir():
                raise FileNotFoundError(f"{p}: not found (set {name!r} of --data {data}).")
        return crops_dataset(crops, db)
    raise ValueError(f"unknown set {name!r}: expected one of {', '.join(REAL_SETS)}.")


INDEPENDENT_TRAINING = {"minibench": ("real/holidays805/jpg",), "holidays805": ("real/ukbench400", "real/oxford133/jpg"),
                        "ukbench400": ("real/holidays805/jpg",), "oxford_crops": ("real/holidays805/jpg",)}
"""Training folders (under the data folder) of each set under the independent protocol: images of other
benchmarks, none of them in the set (Holidays for the others; UKBench and Oxford for Holidays)."""

PROTOCOLS = ("transductive", "independent")


def training_images(name: str, data, protocol: str):
    """The training images of set ``name`` under ``protocol`` (None: transductive, the set's own images)."""
    from retrieval.features.image import is_image_name

    if protocol == "transductive":
        return None
    if protocol != "independent":
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}; got {protocol!r}.")
    out = []
    for sub in INDEPENDENT_TRAINING[name]:
        folder = Path(data) / sub
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: not found (independent training images of set {name!r}).")
        out += sorted(p for p in folder.iterdir() if is_image_name(p.name))
    return out


def peers(data, *, presets=("default",), sets=REAL_SETS, work_dir, workers=1, progress=False,
          protocol: str = "transductive") -> list[dict]:
    """``retrieval bench peers``: each preset and ASMK* on each set, same features and training images:
    ``protocol`` "transductive" (each set's own database images, as indexing a folder does) or "independent"
    (:data:`INDEPENDENT_TRAINING`).

    Returns
    -------
    list of dict
        One row per set: ``{"set", "images", "queries", "protocol", "train_images", "presets": {name: {"mAP",
        "query_seconds_mean", "bytes_per_image"}}, "asmk": {"mAP", "query_seconds_mean", "codebook_size"}}``.
    """
    from retrieval.app.evaluate import run_benchmark

    rows = []
    for name in sets:
        ds = real_set(name, data)
        train = training_images(name, data, protocol)
        row = {"set": name, "images": len(ds.database), "queries": len(ds.queries), "protocol": protocol,
               "train_images": len(ds.database) if train is None else len(train), "presets": {}}
        report = None
        for preset in presets:
            report = run_benchmark(ds, preset, work_dir=work_dir, workers=workers, progress=progress,
                                   train_images=train)
            row["presets"][report["preset"]] = {k: report[k] for k in ("mAP", "query_seconds_mean",
                                                                        "bytes_per_image")}
        ref = compare_asmk(ds, report, train_paths=train)
        row["asmk"] = {k: ref[k] for k in ("mAP", "query_seconds_mean", "codebook_size", "train_descriptors")}
        logger.info("%s: %s; ASMK* %.4f", name, ", ".join(f"{p} {v['mAP']:.4f}" for p, v in row["presets"].items()),
                    ref["mAP"])
        rows.append(row)
    return rows
