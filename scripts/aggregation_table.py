#!/usr/bin/env python
"""Jegou et al. 2012, Table I on minibench: mAP of BoW (1k, 20k), Fisher and VLAD (K = 16, 64, 256) before and after PCA to
D' = 2048, 512, 128, 64, under two training protocols:

(a) vocabularies, local PCA and global PCA learnt on images that are NOT in the benchmark (scikit-image's and
    scikit-learn's bundled photos, and the shared images outside minibench.json: opencv_samples/graf1, graf3);
(b) learnt on the benchmark collection itself (what indexing a photo folder does).

Pipeline: Hessian-affine + SIFT (retrieval.features, defaults), RootSIFT, local PCA to 64-d, aggregation with
power (alpha = 0.5) + L2 normalisation (BoW: tf-idf + L2, hard assignment, or soft with r = 3 for "BoWsoft"),
optional PCA to D' (no whitening), ranking by Euclidean distance, Holidays protocol mAP
(retrieval.evaluation.groups); "BoW128": hard BoW on RootSIFT without the local PCA; "VLADintra": VLAD with
intra-normalisation (each centroid's residual sum L2-normalised, Arandjelovic & Zisserman 2013) before the power and
L2 normalisation. Vocabularies: k-means/GMM on at most --max-samples descriptors (BoW: 100k,
25 iterations, random-selection seeding for 20k words).

The global PCA needs at least D' + 1 training vectors: besides one vector per training image it is learnt on the
vectors of random sub-windows of the training images (features whose centre lies in the window), ``--crops`` per
image (default: enough windows for 1.25 x the largest D', at least 8). Cells with D' >= the number of PCA training
vectors, or D' >= D, are reported as "-".

Usage (heavy: run under the lock):
    .venv/bin/python scripts/aggregation_table.py --json /tmp/agg.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT / ".." / "shared" / "data").resolve()
CACHE = ROOT / ".cache"

log = logging.getLogger("aggregation_table")

SKIMAGE_PHOTOS = ["astronaut", "camera", "chelsea", "coffee", "rocket", "brick", "grass", "gravel", "moon", "page",
                  "text", "clock", "coins", "cat", "hubble_deep_field", "stereo_motorcycle", "immunohistochemistry",
                  "retina", "skin", "eagle", "lily"]

PAPER_TABLE_I = {  # Jegou et al. 2012, Table I, Holidays mAP (%), D' = D, 2048, 512, 128, 64
    ("BoW", 1000): [40.1, None, 43.5, 44.4, 43.4],
    ("BoW", 20000): [43.7, 41.8, 44.9, 45.2, 44.4],
    ("Fisher", 16): [54.0, None, 54.6, 52.3, 49.9],
    ("Fisher", 64): [59.5, 60.7, 61.0, 56.5, 52.0],
    ("Fisher", 256): [62.5, 62.6, 57.0, 53.8, 50.6],
    ("VLAD", 16): [52.0, None, 52.7, 52.6, 50.5],
    ("VLAD", 64): [55.6, 57.6, 59.8, 55.7, 52.3],
    ("VLAD", 256): [58.7, 62.1, 56.7, 54.2, 51.3],
}


def training_photo_paths() -> list[Path]:
    """Protocol (a) photos written once to .cache/aggregation-train/ (skimage and sklearn bundled photos) plus
    the shared images outside minibench.json."""
    import skimage.data
    from PIL import Image

    out_dir = CACHE / "aggregation-train"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    def save(name, arr):
        p = out_dir / f"{name}.png"
        if not p.exists():
            arr = np.asarray(arr)
            if arr.dtype != np.uint8:
                arr = (255 * (arr - arr.min()) / max(float(np.ptp(arr)), 1e-12)).astype(np.uint8)
            Image.fromarray(arr).save(p)
        paths.append(p)

    for name in SKIMAGE_PHOTOS:
        try:
            img = getattr(skimage.data, name)()
        except Exception as exc:  # some need a download (no network here)
            log.info("skimage.data.%s unavailable: %s", name, exc)
            continue
        if name == "stereo_motorcycle":
            save("motorcycle_left", img[0])
            save("motorcycle_right", img[1])
        else:
            save(name, img)
    try:
        from sklearn.datasets import load_sample_images

        for i, img in enumerate(load_sample_images().images):
            save(f"sklearn_sample_{i}", img)
    except Exception as exc:
        log.info("sklearn sample images unavailable: %s", exc)
    bench = json.loads((SHARED / "minibench.json").read_text())
    inside = set(bench["images"])
    for p in sorted((SHARED / "opencv_samples").glob("*")):
        rel = str(p.relative_to(SHARED))
        if p.suffix.lower() in (".png", ".jpg") and rel not in inside:
            paths.append(p)
    return paths


def load_features(paths, workers):
    """(frames, RootSIFT descriptors) per path, through the shared feature cache."""
    from retrieval.features import FeatureExtractor, root_sift
    from retrieval.features.store import FeatureStore

    store = FeatureStore(CACHE / "test-features")
    ex = FeatureExtractor()
    out = []
    t0 = time.time()
    for i, p in enumerate(paths):
        f = store.get_or_extract(Path(p), ex)
        out.append((np.asarray(f.frames), root_sift(f.descriptors)))
        if (i + 1) % 20 == 0:
            log.info("features %d/%d (%.0f s)", i + 1, len(paths), time.time() - t0)
    return out


def crops_of(feats, n_crops, rng):
    """Descriptor subsets of random sub-windows (each side 40-80 % of the features' extent)."""
    frames, desc = feats
    out = []
    if len(desc) == 0:
        return out
    xy = frames[:, :2]
    lo, hi = xy.min(0), xy.max(0)
    ext = np.maximum(hi - lo, 1.0)
    for _ in range(n_crops):
        size = ext * rng.uniform(0.4, 0.8, size=2)
        start = lo + rng.random(2) * (ext - size)
        m = np.all((xy >= start) & (xy <= start + size), axis=1)
        if m.sum() >= 10:
            out.append(desc[m])
    return out


def rank_and_score(bench, names, V):
    from retrieval.evaluation.groups import score_groups

    V = np.asarray(V, dtype=np.float32)
    sq = (V.astype(np.float64) ** 2).sum(1)
    idx = {n: i for i, n in enumerate(names)}
    rankings = {}
    for q in bench.queries:
        qi = idx[q]
        d = sq - 2.0 * (V[qi].astype(np.float64) @ V.T.astype(np.float64)) + sq[qi]
        order = np.argsort(d, kind="stable")
        rankings[q] = [names[j] for j in order]
    return score_groups(bench, rankings).mAP


def run(args):
    from retrieval.aggregation import VLAD, BoW, FisherVector, KMeansVocabulary, PCAProjection
    from retrieval.evaluation.groups import load_groups_spec
    from retrieval.features.pca import LocalPCA

    bench = load_groups_spec(SHARED / "minibench.json")
    names = list(bench.images)
    db_feats = load_features([bench.path(n) for n in names], args.workers)
    protocols = {}
    if "b" in args.protocols:
        protocols["b"] = db_feats
    if "a" in args.protocols:
        protocols["a"] = load_features(training_photo_paths(), args.workers)
    dims = [None] + [int(x) for x in args.dims.split(",") if x]
    methods = []
    for m in args.methods.split(","):
        kind, k = m.split("-")
        methods.append((kind, int(k)))
    results = {"protocols": {}, "dims": ["D"] + dims[1:], "n_db": len(names)}
    for proto, train_feats in protocols.items():
        rng = np.random.default_rng(args.seed)
        t0 = time.time()
        lpca = LocalPCA(64, random_state=args.seed).fit(np.concatenate([d for _, d in train_feats]))
        db = [lpca.transform(d).astype(np.float32) for _, d in db_feats]
        train = [lpca.transform(d).astype(np.float32) for _, d in train_feats]
        n_crops = args.crops
        if n_crops < 0:  # auto: enough sub-windows for the largest D' (25 % margin; crops with < 10 features drop)
            n_crops = max(8, -(-int(1.25 * max([d for d in dims[1:]] + [0])) // len(train_feats)))
        crop_sets_raw = []
        for f in train_feats:
            crop_sets_raw += crops_of(f, n_crops, rng)
        pca_sets = train + [lpca.transform(c).astype(np.float32) for c in crop_sets_raw]
        # BoW128: the same on RootSIFT without the local PCA
        db_raw = [d for _, d in db_feats]
        train_raw = [d for _, d in train_feats]
        pca_sets_raw = train_raw + crop_sets_raw
        n_desc = sum(len(t) for t in train)
        log.info("protocol (%s): %d training images, %d descriptors, %d PCA training sets", proto, len(train),
                 n_desc, len(pca_sets))
        table = {"n_train_images": len(train), "n_train_descriptors": int(n_desc), "n_crops_per_image": n_crops,
                 "n_pca_training_vectors": len(pca_sets), "rows": {}}
        bow_vocabularies = {}
        for kind, K in methods:
            t1 = time.time()
            X_db, X_pca = (db_raw, pca_sets_raw) if kind == "BoW128" else (db, pca_sets)
            if kind in ("BoW", "BoWsoft", "BoW128"):
                X_train = train_raw if kind == "BoW128" else train
                key = (K, kind == "BoW128")
                if key not in bow_vocabularies:  # BoW and BoWsoft share one vocabulary
                    bow_vocabularies[key] = KMeansVocabulary(
                        K, max_samples=min(args.max_samples, 100_000), max_iter=25,
                        init="randsel" if K > 4096 else "plusplus", random_state=args.seed).fit(X_train)
                enc = BoW.from_vocabulary(bow_vocabularies[key], X_train, sparse=False,
                                          assignment="soft" if kind == "BoWsoft" else "hard")
            elif kind == "Fisher":
                enc = FisherVector(K, gmm_params={"max_samples": args.max_samples}, random_state=args.seed).fit(train)
            else:  # "VLAD", or "VLADintra": intra-normalised (Arandjelovic & Zisserman 2013) before power + L2
                enc = VLAD(K, intra_normalize=kind == "VLADintra", kmeans_params={"max_samples": args.max_samples},
                           random_state=args.seed).fit(train)
            Vdb = enc.transform(X_db)
            row = [rank_and_score(bench, names, Vdb)]
            Vtr = None
            for dp in dims[1:]:
                if dp >= min(len(pca_sets), Vdb.shape[1]):
                    row.append(None)
                    continue
                if Vtr is None:
                    Vtr = enc.transform(X_pca)
                pca = PCAProjection(dp, random_state=args.seed).fit(Vtr)
                row.append(rank_and_score(bench, names, pca.transform(Vdb)))
            table["rows"][f"{kind}-{K}"] = {"D": int(Vdb.shape[1]), "mAP": row, "seconds": time.time() - t1}
            if args.json:
                Path(args.json).write_text(json.dumps({**results, "partial": {proto: table}}, indent=1))
            log.info("(%s) %s-%d D=%d: %s (%.0f s)", proto, kind, K, Vdb.shape[1],
                     " ".join("-" if v is None else f"{v:.3f}" for v in row), time.time() - t1)
        table["seconds"] = time.time() - t0
        results["protocols"][proto] = table
    return results


def markdown(results):
    dims = results["dims"]
    lines = []
    for proto, table in results["protocols"].items():
        lines.append(f"Protocol ({proto}): {table['n_train_images']} training images, "
                     f"{table['n_train_descriptors']} descriptors, {table['n_pca_training_vectors']} PCA training "
                     "vectors.\n")
        head = "| descriptor | K | D | " + " | ".join(f"D'={d}" for d in dims) + " | paper (Holidays) D'=D/2048/512/128/64 |"
        lines += [head, "|" + "---|" * (len(dims) + 4)]
        for key, r in table["rows"].items():
            kind, K = key.split("-")
            paper = PAPER_TABLE_I.get((kind, int(K)))
            ptxt = " / ".join("-" if v is None else f"{v:.1f}" for v in paper) if paper else ""
            cells = " | ".join("-" if v is None else f"{100 * v:.1f}" for v in r["mAP"])
            lines.append(f"| {kind} | {K} | {r['D']} | {cells} | {ptxt} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocols", default="b,a")
    p.add_argument("--methods", default="BoW-1000,BoWsoft-1000,BoW128-1000,BoW-20000,Fisher-16,Fisher-64,Fisher-256,VLAD-16,"
                                        "VLAD-64,VLADintra-64,VLAD-256")
    p.add_argument("--dims", default="2048,512,128,64")
    p.add_argument("--crops", type=int, default=-1,
                   help="sub-windows per training image for the global PCA (-1: enough for the largest D')")
    p.add_argument("--max-samples", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    results = run(args)
    text = markdown(results)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
