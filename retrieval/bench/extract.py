"""``retrieval bench extract``: extraction speed, overhead over raw pyhesaff, scaling with workers.

Every figure is a ratio of times measured in the same run on the same decoded images.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import numpy as np

from retrieval.features.extractor import FeatureExtractor
from retrieval.features.image import load_image
from retrieval.features.parallel import ExtractionPool, extract_many
from retrieval.rerank.matching import MATCH_DEFAULTS, apply_homography, match_descriptors, match_features

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
    - ``decoding``: photos/s in one process, best of ``rounds`` per image, of the extractor from the file
      (``reduced``: decoded at the size needed, :func:`retrieval.features.image.load_image`), of the same with the
      file decoded in full then resized (``full_decode``, ``reduce="none"``), and of raw pyhesaff on the working
      images (``raw_pyhesaff``: decoding excluded); ``decode_s``: the decoding alone, both ways.

    Returns
    -------
    dict (JSON-able)
    """
    import pyhesaff

    paths = [str(p) for p in paths]
    if not paths:
        raise ValueError("bench_extract needs at least one image.")
    ex = FeatureExtractor("hesaff", max_side=max_side)
    kw = ex.detector_impl.pyhesaff_kwargs()
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
    decoding = _decoding(readable, ex, rounds, float(raw.sum()))
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
        "decoding": decoding,
        "config_key": ex.config_key,
    }


def _decoding(paths, ex, rounds: int, raw_s: float) -> dict:
    """The ``decoding`` figures of :func:`bench_extract`: decode (+ detect) of each file with ``reduce="all"`` and
    ``"none"``, interleaved, best of ``rounds`` per file."""
    kw = {"max_side": ex.max_side, "max_megapixels": ex.max_megapixels, "min_side": ex.min_side}
    best = {k: np.full(len(paths), np.inf) for k in ("decode_reduced", "decode_full", "reduced", "full_decode")}
    sizes = []
    for r in range(rounds):
        for i, p in enumerate(paths):
            for name, reduce in (("reduced", "all"), ("full_decode", "none")):
                t0 = time.perf_counter()
                im = load_image(p, reduce=reduce, **kw)
                t1 = time.perf_counter()
                ex(im)
                t2 = time.perf_counter()
                dec = "decode_reduced" if reduce == "all" else "decode_full"
                best[dec][i] = min(best[dec][i], t1 - t0)
                best[name][i] = min(best[name][i], t2 - t0)
            if r == 0:
                sizes.append(im.original_size[0] * im.original_size[1])
    n = len(paths)
    return {"megapixels_per_image": float(np.mean(sizes)) / 1e6,
            "images_per_s": {"reduced": n / best["reduced"].sum(), "full_decode": n / best["full_decode"].sum(),
                             "raw_pyhesaff": n / raw_s},
            "decode_s": {"reduced": float(best["decode_reduced"].sum()), "full": float(best["decode_full"].sum())}}


def enlarged_copies(paths, megapixels: float, folder, quality: int = 92) -> list[Path]:
    """JPEG copies of ``paths`` in ``folder``, each enlarged (bicubic, aspect kept) to about ``megapixels``
    million pixels: large photos for the decoding figures of :func:`bench_extract` made from any set. An image
    already that large is copied as it is (re-encoded). Returns the copies' paths, in the order of ``paths``."""
    from PIL import Image, ImageOps

    if not megapixels > 0:
        raise ValueError(f"megapixels must be positive; got {megapixels}.")
    folder = Path(folder)
    out = []
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            rgb = ImageOps.exif_transpose(im).convert("RGB")
        f = max(1.0, (megapixels * 1e6 / (rgb.width * rgb.height)) ** 0.5)
        big = rgb.resize((round(rgb.width * f), round(rgb.height * f)), Image.BICUBIC) if f > 1 else rgb
        dest = folder / f"{i:05d}-{Path(p).stem}.jpg"
        big.save(dest, quality=quality)
        out.append(dest)
    return out


HOMOGR_PAIRS = ["Boston", "BostonLib", "BruggeSquare", "BruggeTower", "Brussels", "CapitalRegion", "Eiffel",
                "ExtremeZoom", "LePoint1", "LePoint2", "LePoint3", "WhiteBoard", "adam", "boat", "city", "graf"]


def read_opencv_matrix_text(path, node: str) -> np.ndarray:
    """A matrix node of an OpenCV FileStorage XML file, parsed as text (OpenCV 5 fails on H1to3p.xml)."""
    txt = open(path, encoding="utf-8").read()
    m = re.search(rf"<{node}[^>]*>.*?<rows>\s*(\d+)\s*</rows>\s*<cols>\s*(\d+)\s*</cols>.*?<data>(.*?)</data>",
                  txt, re.S)
    if m is None:
        raise ValueError(f"{path}: no matrix node {node!r}.")
    rows, cols = int(m.group(1)), int(m.group(2))
    return np.array(m.group(3).split(), dtype=np.float64).reshape(rows, cols)


def match_parameters(*, plain: bool = False) -> dict:
    """The matching parameters of ``retrieval match`` (``MATCH_DEFAULTS`` less the extractor's); ``plain``: the
    plain pipeline (ratio 0.8, no mutual nearest neighbours, no guided matching)."""
    params = {k: v for k, v in MATCH_DEFAULTS.items() if k not in ("detector", "max_side")}
    if plain:
        params.update(ratio=0.8, mutual=False, guided=False)
    return params


def bench_match(data, *, extractor, match_params: dict, store=None) -> dict:
    """Accuracy of :func:`match_features` on graf1 -> graf3 and the 16 ``homogr`` pairs.

    ``data`` is the shared data folder (``opencv_samples/``, ``homogr/``). graf: inliers, how many of them lie
    within 3 px of the true homography ``H13``, the median error of the estimated homography over a 20 x 20 grid
    of graf1, and the number of ratio-0.8 tentative matches within 3 px of ``H13`` (the issue's reference
    figure). homogr: for each pair the median error of the estimated A -> B homography on the hand-verified
    points of ``<name>_vpts.mat`` (``_model.txt`` maps B to A and is not used).
    """
    import scipy.io as sio

    data = Path(data)

    def feats(p):
        return store.get_or_extract(p, extractor) if store is not None else extractor(p)

    o = data / "opencv_samples"
    H13 = read_opencv_matrix_text(o / "H1to3p.xml", "H13")
    fa, fb = feats(o / "graf1.png"), feats(o / "graf3.png")
    t0 = time.perf_counter()
    r = match_features(fa, fb, **match_params)
    dt = time.perf_counter() - t0
    gx, gy = np.meshgrid(np.linspace(0, fa.image_size[0] - 1, 20), np.linspace(0, fa.image_size[1] - 1, 20))
    grid = np.c_[gx.ravel(), gy.ravel()]
    out = {"extractor": extractor.config, "match": dict(match_params)}
    graf = {"n_features": [len(fa), len(fb)], "tentative": r.tentative, "inliers": r.inliers, "match_seconds": dt}
    if r.homography is not None:
        ia, ib = r.inlier_pairs.T
        e = np.linalg.norm(apply_homography(H13, fa.xy[ia]) - fb.xy[ib], axis=1)
        graf["inliers_within_3px_of_truth"] = int((e < 3).sum())
        graf["grid_median_px"] = float(np.median(np.linalg.norm(apply_homography(r.homography, grid)
                                                                - apply_homography(H13, grid), axis=1)))
    m = match_descriptors(fa.descriptors, fb.descriptors, ratio=0.8)
    graf["ratio0.8_within_3px"] = int((np.linalg.norm(apply_homography(H13, fa.xy[m[:, 0]]) - fb.xy[m[:, 1]],
                                                      axis=1) < 3).sum())
    out["graf"] = graf
    h = data / "homogr"
    pairs = {}
    for name in HOMOGR_PAIRS:
        pa, pb = next(h.glob(f"{name}A.*")), next(h.glob(f"{name}B.*"))
        rr = match_features(feats(pa), feats(pb), **match_params)
        v = sio.loadmat(h / f"{name}_vpts.mat")["validation"][0, 0]["pts"]
        err = None
        if rr.homography is not None:
            err = float(np.median(np.linalg.norm(apply_homography(rr.homography, v[:2].T) - v[3:5].T, axis=1)))
        pairs[name] = {"median_px": err, "inliers": rr.inliers}
    out["homogr"] = pairs
    out["homogr_within_3px"] = sum(1 for p in pairs.values() if p["median_px"] is not None and p["median_px"] <= 3)
    return out
