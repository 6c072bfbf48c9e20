"""Box-query evaluation on the shared real images (Zhu et al. 2013, Fig. 5-style alpha sweep).

Queries: for each pair ``<name>A``/``<name>B`` of ``homogr/`` (``<name>_model.txt`` maps B to A), the query box is
the part of A that B also sees (B's frame mapped into A, clipped to A) shrunk by ``shrink`` about its centre, and
its true place in B is the box projected through the inverse model (clipped to B); plus ``opencv_samples/box.png``
(the whole image as the box) in ``box_in_scene.png``, whose true box comes from an independent OpenCV SIFT +
ratio test + RANSAC homography. The database is every shared image; the query image itself is excluded from
its own results. With one relevant image per query, AP = 1 / rank of B and mAP is the mean reciprocal rank.

Junk (ignored in the ranking, as in the Oxford protocol): other images of the same object, i.e. the three
``LePoint`` pairs (one magazine photographed six times) and pixel-identical copies of the query or the target
(``opencv_samples/graf1.png`` is ``homogr/grafA.png``, ...).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
from PIL import Image

from retrieval.engine.object.searcher import ObjectSearcher
from retrieval.features.image import is_image_name
from retrieval.rerank.boxes import box_iou, project_box

logger = logging.getLogger(__name__)

__all__ = ["shared_images", "box_queries", "evaluate"]

SAME_OBJECT = (("LePoint1", "LePoint2", "LePoint3"),)


def shared_images(root) -> list[Path]:
    """Every image under the shared data folder (homogr, opencv_samples, boofcv, holidays), sorted."""
    root = Path(root)
    out = []
    for sub in ("homogr", "opencv_samples", "boofcv", "holidays"):
        out += [p for p in (root / sub).rglob("*") if is_image_name(p.name)]
    return sorted(out)


def _image_size(path):
    with Image.open(path) as im:
        return im.size


def _opencv_homography(path_a, path_b):
    """Independent ground truth for box -> box_in_scene: OpenCV SIFT, ratio 0.75, RANSAC 3 px."""
    import cv2

    a = cv2.imread(str(path_a), cv2.IMREAD_GRAYSCALE)
    b = cv2.imread(str(path_b), cv2.IMREAD_GRAYSCALE)
    sift = cv2.SIFT_create()
    ka, da = sift.detectAndCompute(a, None)
    kb, db = sift.detectAndCompute(b, None)
    pairs = cv2.BFMatcher().knnMatch(da, db, k=2)
    good = [m for m, n in pairs if m.distance < 0.75 * n.distance]
    if len(good) < 10:
        return None
    pa = np.float32([ka[m.queryIdx].pt for m in good])
    pb = np.float32([kb[m.trainIdx].pt for m in good])
    H, _ = cv2.findHomography(pa, pb, cv2.RANSAC, 3.0)
    return H


def _pixel_hashes(paths):
    out = {}
    for p in paths:
        with Image.open(p) as im:
            out[p] = hashlib.blake2b(np.asarray(im.convert("L")).tobytes(), digest_size=16).hexdigest()
    return out


def _add_junk(root, queries):
    """Set ``q["junk"]``: other images of the same object (SAME_OBJECT groups, pixel-identical copies)."""
    paths = shared_images(root)
    hashes = _pixel_hashes(paths)
    for q in queries:
        keep = {q["query"], q["target"]}
        junk = {p for p in paths if p not in keep and hashes[p] in (hashes[q["query"]], hashes[q["target"]])}
        for group in SAME_OBJECT:
            if q["name"] in group:
                junk |= {p for p in (root / "homogr").glob("*")
                         if is_image_name(p.name) and p not in keep
                         and any(p.name.startswith(g) for g in group)}
        q["junk"] = sorted(junk)
    return queries


def box_queries(root, *, shrink: float = 0.8) -> list[dict]:
    """Queries ``{"name", "query", "target", "box", "true_box", "junk"}`` (paths, boxes in original pixels)."""
    root = Path(root)
    out = []
    for model in sorted((root / "homogr").glob("*_model.txt")):
        name = model.name[: -len("_model.txt")]
        a = [p for p in (root / "homogr").glob(name + "A.*")]
        b = [p for p in (root / "homogr").glob(name + "B.*")]
        if not a or not b:
            continue
        H_ba = np.loadtxt(model).reshape(3, 3)
        sa, sb = _image_size(a[0]), _image_size(b[0])
        seen = project_box((0, 0, sb[0] - 1, sb[1] - 1), H_ba, sa)
        if seen is None:
            continue
        cx, cy = (seen[0] + seen[2]) / 2, (seen[1] + seen[3]) / 2
        hw, hh = shrink * (seen[2] - seen[0]) / 2, shrink * (seen[3] - seen[1]) / 2
        box = (cx - hw, cy - hh, cx + hw, cy + hh)
        true = project_box(box, np.linalg.inv(H_ba), sb)
        if true is None:
            continue
        out.append({"name": name, "query": a[0], "target": b[0], "box": box, "true_box": true})
    qa, qb = root / "opencv_samples" / "box.png", root / "opencv_samples" / "box_in_scene.png"
    if qa.exists() and qb.exists():
        H = _opencv_homography(qa, qb)
        if H is not None:
            sa = _image_size(qa)
            box = (0.0, 0.0, sa[0] - 1.0, sa[1] - 1.0)
            true = project_box(box, H, _image_size(qb))
            out.append({"name": "box", "query": qa, "target": qb, "box": box, "true_box": true})
    return _add_junk(root, out)


def evaluate(features: dict, queries: list[dict], *, n_words: int = 20000, methods=("l1", "delta1"),
             reranks=("none", "exact", "spatial"), alpha: float = 0.5, alphas=(), assignment: str = "hard",
             k: int = 10, vocabulary_params=None, random_state=0, searcher: ObjectSearcher | None = None,
             asmk_alpha: float = 3.0, query_words: int = 5) -> dict:
    """Run the box queries against a database of every image in ``features`` ({path: LocalFeatures}).

    ``methods`` may include ``"asmk"`` (the searcher then stores binary signatures; selectivity ``asmk_alpha``,
    ``query_words`` words per query descriptor, as the ``accurate`` preset).

    Returns a dict: ``configs`` (one row per method x rerank: top1 rate, box IoU >= 0.5 rate for the top hit,
    mAP = mean reciprocal rank of the target), ``alpha_sweep`` (delta1, no re-ranking: mAP and top1 per alpha),
    ``per_query`` details, and the ``searcher`` used.
    """
    paths = sorted(features)
    ids = {p: i for i, p in enumerate(paths)}
    if searcher is None:
        searcher = ObjectSearcher(n_words, assignment=assignment, random_state=random_state,
                                  vocabulary_params=vocabulary_params, signatures="asmk" in methods,
                                  query_words=query_words)
        searcher.fit([features[p] for p in paths])
        searcher.add(np.arange(len(paths)), [features[p] for p in paths])
    n_db = len(paths)

    def run(q, method, rerank, a):
        junk = [ids[p] for p in q.get("junk", ()) if p in ids]
        # spatial verification on the stored features (ratio-test matches), as the object preset searches
        hits = searcher.search(features[q["query"]], bbox=q["box"], k=n_db, method=method, alpha=a,
                               rerank=rerank, exclude=[ids[q["query"]]] + junk,
                               get_features=lambda i: features[paths[int(i)]])
        target = ids[q["target"]]
        rank = next((r for r, h in enumerate(hits) if h.id == target), None)
        top = hits[0] if hits else None
        iou = box_iou(top.box, q["true_box"]) if top is not None and top.id == target and top.box else 0.0
        return {"rank": None if rank is None else rank + 1, "iou": iou,
                "inliers": int(hits[rank].inliers or 0) if rank is not None else 0}

    configs, per_query = [], {}
    for method in methods:
        for rerank in reranks:
            rows = [run(q, method, rerank, asmk_alpha if method == "asmk" else alpha) for q in queries]
            for q, r in zip(queries, rows, strict=True):
                per_query.setdefault(q["name"], {})[f"{method}/{rerank}"] = r
            configs.append({
                "method": method, "rerank": rerank,
                "alpha": alpha if method.startswith("delta") else asmk_alpha if method == "asmk" else None,
                "n_queries": len(rows),
                "top1": float(np.mean([r["rank"] == 1 for r in rows])),
                "box_iou50_top1": float(np.mean([r["iou"] >= 0.5 for r in rows])),
                "mAP": float(np.mean([1.0 / r["rank"] if r["rank"] else 0.0 for r in rows])),
            })
    sweep = []
    for a in alphas:
        rows = [run(q, "delta1", "none", float(a)) for q in queries]
        sweep.append({"alpha": float(a), "top1": float(np.mean([r["rank"] == 1 for r in rows])),
                      "mAP": float(np.mean([1.0 / r["rank"] if r["rank"] else 0.0 for r in rows]))})
    return {"n_images": n_db, "n_words": searcher.n_words, "assignment": searcher.assignment, "configs": configs,
            "alpha_sweep": sweep, "per_query": per_query, "searcher": searcher}


def evaluate_asmk_reference(features: dict, queries: list[dict], *, seed: int = 0) -> dict:
    """ASMK* (the ``asmk`` package, :data:`retrieval.bench.peers.ASMK_STAR`) on the same box queries: codebook
    learnt on every image's RootSIFT (as :func:`evaluate`'s vocabulary), each query's descriptors restricted to its
    box; returns ``{"method": "ASMK*", "top1", "mAP", "n_queries"}`` (mean reciprocal rank of the target, the query
    and its junk ignored)."""
    from retrieval.bench.peers import asmk_index, asmk_ranks, rootsift_of
    from retrieval.features.frames import select_in_box

    paths = sorted(features)
    ids = {p: i for i, p in enumerate(paths)}
    descs = [rootsift_of(features[p]) for p in paths]
    method, _, _ = asmk_index(descs, descs, seed=seed)
    rr = []
    for q in queries:
        f = features[q["query"]]
        ignore = {ids[q["query"]]} | {ids[p] for p in q.get("junk", ()) if p in ids}
        ranked = [int(r) for r in asmk_ranks(method, rootsift_of(f)[select_in_box(f, q["box"])], len(paths))
                  if int(r) not in ignore]
        target = ids[q["target"]]
        rr.append(1.0 / (ranked.index(target) + 1) if target in ranked else 0.0)
    return {"method": "ASMK*", "n_queries": len(rr), "top1": float(np.mean([r == 1.0 for r in rr])),
            "mAP": float(np.mean(rr))}
