"""``retrieval bench extract``: extraction speed, overhead over raw pyhesaff, scaling with workers.

Every figure is a ratio of times measured in the same run on the same decoded images.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from retrieval.features.extractor import FeatureExtractor
from retrieval.features.parallel import ExtractionPool, extract_many

logger = logging.getLogger(__name__)


def bench_extract(paths, *, workers: int = 2, max_side: int = 1024, rounds: int = 3, progress=None) -> dict:
    """Measure extraction on ``paths`` (default extractor: upright Hessian-affine, ``max_side``).

    - ``overhead_ratio``: time of ``FeatureExtractor.__call__`` on already decoded :class:`LoadedImage` s over
      the time of ``pyhesaff.detect_feats_in_image`` on the same pixels with the same parameters; the two are
      interleaved image by image, ``rounds`` times, and the minimum per image is kept (noise on a shared
      machine only adds time).
    - ``images_per_s``: end to end from files (decode + detect), with 1 worker and with ``workers``;
      ``scaling`` = their ratio (the pool start-up is included); ``scaling_warm_pool``: the same with the
      pool started and warmed up before the timing (the steady state of a long indexing run).

    Returns
    -------
    dict (JSON-able)
    """
    import pyhesaff

    paths = [str(p) for p in paths]
    if not paths:
        raise ValueError("bench_extract needs at least one image.")
    ex = FeatureExtractor("hesaff", max_side=max_side)
    kw = ex._detector.pyhesaff_kwargs()
    images = []
    for p in paths:
        try:
            images.append(ex.load(p))
        except ValueError as exc:
            logger.warning("skipping %s", exc)
    if not images:
        raise ValueError("no readable image among the inputs.")
    pyhesaff.detect_feats_in_image(images[0].pixels, **kw)  # warm-up: library initialisation
    ex(images[0])
    raw = np.full(len(images), np.inf)
    ours = np.full(len(images), np.inf)
    nfeat = np.zeros(len(images), np.int64)
    for r in range(rounds):
        for i, im in enumerate(images):
            t0 = time.perf_counter()
            k, _ = pyhesaff.detect_feats_in_image(im.pixels, **kw)
            t1 = time.perf_counter()
            f = ex(im)
            t2 = time.perf_counter()
            raw[i] = min(raw[i], t1 - t0)
            ours[i] = min(ours[i], t2 - t1)
            nfeat[i] = len(f)
            if len(k) != len(f):
                raise RuntimeError(f"{im.path}: {len(f)} features from the extractor, {len(k)} from pyhesaff.")
            if progress is not None:
                progress(r * len(images) + i + 1, rounds * len(images))
    readable = [im.path for im in images]
    timings, steady = {}, {}
    for w in sorted({1, int(workers)}):
        t0 = time.perf_counter()
        n_ok = sum(not isinstance(res, Exception) for _, res in extract_many(readable, ex, workers=w))
        timings[w] = time.perf_counter() - t0
        if n_ok != len(readable):
            raise RuntimeError(f"{len(readable) - n_ok} images failed with {w} worker(s).")
        if w == 1:
            steady[w] = timings[w]
            continue
        with ExtractionPool(ex, w) as pool:
            pool.warm_up(readable[0])
            t0 = time.perf_counter()
            for _ in pool.imap(readable):
                pass
            steady[w] = time.perf_counter() - t0
    w = int(workers)
    return {
        "n_images": len(images),
        "max_side": max_side,
        "features_per_image": float(nfeat.mean()),
        "raw_pyhesaff_s": float(raw.sum()),
        "extractor_s": float(ours.sum()),
        "overhead_ratio": float(ours.sum() / raw.sum()),
        "rounds": rounds,
        "workers": w,
        "images_per_s": {str(k): len(readable) / v for k, v in timings.items()},
        "seconds": {str(k): v for k, v in timings.items()},
        "scaling": timings[1] / timings[w] if w != 1 else 1.0,
        "images_per_s_warm_pool": {str(k): len(readable) / v for k, v in steady.items()},
        "scaling_warm_pool": steady[1] / steady[w] if w != 1 else 1.0,
        "config_key": ex.config_key,
    }
