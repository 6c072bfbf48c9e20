"""Real data and measurements behind ``retrieval bench binary`` (and the data of ``retrieval bench kernels``).

Data: every image listed in ``../shared/data/minibench.json`` (real photos), Hessian-affine + SIFT through
:class:`retrieval.features.FeatureExtractor` with a :class:`~retrieval.features.store.FeatureStore` cache.
Splits are by image (queries, training and base vectors never come from the same image).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from retrieval.aggregation import FisherVector
from retrieval.codes.binary import LSH, hamming_topk, make_embedding
from retrieval.codes.pq import ProductQuantizer
from retrieval.evaluation.groups import load_groups_spec, score_groups
from retrieval.evaluation.recall import recall_at_r
from retrieval.features import FeatureExtractor, root_sift
from retrieval.features.store import FeatureStore

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MINIBENCH = (ROOT / ".." / "shared" / "data" / "minibench.json").resolve()
DEFAULT_CACHE = ROOT / ".cache" / "bench-features"

EMBEDDINGS = ("LSH", "LSBC", "SH", "PCAE", "PCAE-RR", "PCAE-ITQ")
DISTANCES = ("hamming", "expectation", "lower_bound")


def minibench_paths(spec=DEFAULT_MINIBENCH):
    """(benchmark, list of absolute image paths in database order)."""
    spec = Path(spec)
    if not spec.exists():
        raise FileNotFoundError(f"{spec}: minibench spec not found (the real images live in ../shared/data).")
    bench = load_groups_spec(spec)
    return bench, [bench.path(n) for n in bench.images]


def load_features(paths, cache=DEFAULT_CACHE):
    """Hessian-affine SIFT of each image (cached). Returns a list of LocalFeatures."""
    store = FeatureStore(cache)
    ex = FeatureExtractor("hesaff")
    out = []
    t0 = time.perf_counter()
    for i, p in enumerate(paths):
        out.append(store.get_or_extract(Path(p), ex))
        if (i + 1) % 20 == 0:
            logger.info("features: %d/%d images (%.0f s)", i + 1, len(paths), time.perf_counter() - t0)
    return out


def split_by_image(n_images, rng, fractions=(0.1, 0.2)):
    """Random image split: (query images, training images, base images) as index arrays."""
    perm = rng.permutation(n_images)
    nq = max(1, int(round(fractions[0] * n_images)))
    nt = max(1, int(round(fractions[1] * n_images)))
    return np.sort(perm[:nq]), np.sort(perm[nq:nq + nt]), np.sort(perm[nq + nt:])


def _stack(sets, idx, n, rng):
    X = np.concatenate([sets[i] for i in idx]) if len(idx) else np.zeros((0, sets[0].shape[1]), np.float32)
    if n is not None and X.shape[0] > n:
        X = X[np.sort(rng.choice(X.shape[0], n, replace=False))]
    return np.ascontiguousarray(X, dtype=np.float32)


def sift_vectors(features, *, kind="rootsift", n_base=100_000, n_train=20_000, n_query=1000, seed=0):
    """(train, base, queries) float32 descriptor matrices split by image.

    ``kind="rootsift"``: RootSIFT (Euclidean search); ``kind="l1"``: SIFT divided by its l1 norm (chi2 search,
    as the SIFT1M vectors of Bourrier et al. 2015, section 5.1).
    """
    rng = np.random.default_rng(seed)
    if kind == "rootsift":
        sets = [root_sift(f.descriptors) for f in features]
    else:
        sets = []
        for f in features:
            d = f.descriptors.astype(np.float32)
            s = d.sum(axis=1, keepdims=True)
            sets.append(d[s[:, 0] > 0] / s[s[:, 0] > 0])
    qi, ti, bi = split_by_image(len(sets), rng)
    return _stack(sets, ti, n_train, rng), _stack(sets, bi, n_base, rng), _stack(sets, qi, n_query, rng)


def fisher_vectors(features, *, n_crops=40, k_gmm=64, pca_dim=64, seed=0):
    """Fisher vectors (K=64 Gaussians on PCA-64 RootSIFT, power + L2: Jegou et al. 2012) of the whole images and of
    ``n_crops`` random sub-windows of each image (to have thousands of real FVs for the recall measure).

    Returns (full (n_images, D), crops (n_images * n_crops, D), crop_image (n_images * n_crops,) int64).
    The GMM and the PCA are learnt on descriptors of every image (unsupervised; documented deviation).
    """
    rng = np.random.default_rng(seed)
    desc = [root_sift(f.descriptors) for f in features]
    sample = np.concatenate([d[rng.choice(len(d), min(len(d), 500), replace=False)] for d in desc if len(d)])
    mean = sample.mean(axis=0)
    _, _, vt = np.linalg.svd(sample - mean, full_matrices=False)
    P = vt[:pca_dim].T.astype(np.float32)
    red = [((d - mean) @ P).astype(np.float32) for d in desc]
    fv = FisherVector(k_gmm, random_state=seed).fit(np.concatenate([r[rng.choice(len(r), min(len(r), 500),
                                                                                  replace=False)] for r in red]))
    full = fv.transform(red)
    crop_sets, owner = [], []
    for i, f in enumerate(features):
        xy = f.frames[:, :2]
        w, h = f.image_size
        for _ in range(n_crops):
            cw, ch = rng.uniform(0.3, 0.8) * w, rng.uniform(0.3, 0.8) * h
            x0, y0 = rng.uniform(0, w - cw), rng.uniform(0, h - ch)
            m = (xy[:, 0] >= x0) & (xy[:, 0] <= x0 + cw) & (xy[:, 1] >= y0) & (xy[:, 1] <= y0 + ch)
            crop_sets.append(red[i][m])
            owner.append(i)
    crops = fv.transform(crop_sets)
    keep = np.linalg.norm(crops, axis=1) > 0
    return full, crops[keep], np.asarray(owner)[keep]


def euclidean_gt(queries, base, k=1):
    """Exact Euclidean k-NN ids (nq, k) by blocks."""
    bn = (base.astype(np.float64) ** 2).sum(1)
    out = np.empty((queries.shape[0], k), np.int64)
    for s in range(0, queries.shape[0], 256):
        q = queries[s:s + 256].astype(np.float64)
        d = bn[None, :] - 2 * q @ base.T.astype(np.float64)
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(d, part, 1), axis=1)
        out[s:s + 256] = np.take_along_axis(part, order, 1)
    return out


def recall(ids, gt, r):
    """Fraction of queries whose true nearest neighbour (gt[:, 0]) is in the first r results."""
    return float(recall_at_r(ids, gt[:, :1], (r,))[r])


def timed_search(index, queries, k, **kw):
    """(distances, ids, ms per query)."""
    t = time.perf_counter()
    D, ids = index.search(queries, k, **kw)
    return D, ids, 1000 * (time.perf_counter() - t) / max(1, len(queries))


def alpha_diagnostics(emb, train, base):
    """How well the training set stands for the base in the d_E statistics of a fitted embedding.

    Returns a dict: ``"var_ratio"`` — median over bits of var(g_k on train) / var(g_k on base);
    ``"alpha_spread_ratio"`` — max / min over bits of alpha_k^1 - alpha_k^0 (eq. 22-23: the weight d_E gives
    bit k); ``"alpha_asymmetry"`` — median over bits of |alpha_k^1 + alpha_k^0 - 2 t_k| / (alpha_k^1 - alpha_k^0)
    (0 when the two alphas sit symmetrically around the threshold).
    """
    vt = emb.project(train).astype(np.float64).var(axis=0)
    vb = emb.project(base).astype(np.float64).var(axis=0)
    a0, a1 = emb.alpha0_.astype(np.float64), emb.alpha1_.astype(np.float64)
    spread = np.maximum(a1 - a0, 1e-12)
    t = emb.thresholds_.astype(np.float64)
    return {"var_ratio": round(float(np.median(vt / np.maximum(vb, 1e-12))), 3),
            "alpha_spread_ratio": round(float(spread.max() / spread.min()), 3),
            "alpha_asymmetry": round(float(np.median(np.abs(a1 + a0 - 2 * t) / spread)), 3)}


def aggregate_runs(runs, keys=("recall@10", "recall@100", "mAP", "ms_per_query", "var_ratio",
                               "alpha_spread_ratio", "alpha_asymmetry")):
    """Merge the rows of repeated draws (Gordo et al. 2014, section 4.2: results averaged over draws).

    ``runs`` is a list (one per draw) of lists of rows ``{"embedding", "bits", "distance", <keys>...}``. Rows are
    matched on (embedding, bits, distance) and kept in the order of the first draw; a row missing from some draw
    is averaged over the draws that have it. Each output row holds, for every key present: the mean (rounded to
    4 digits), ``<key>_sd`` (sample standard deviation, ``None`` for a single draw) and ``<key>_runs`` (the
    per-draw values, in draw order), plus ``"repeats"`` (number of draws averaged).
    """
    order, groups = [], {}
    for rows in runs:
        for row in rows:
            key = (row["embedding"], row["bits"], row["distance"])
            if key not in groups:
                order.append(key)
                groups[key] = []
            groups[key].append(row)
    out = []
    for key in order:
        rows = groups[key]
        merged = {"embedding": key[0], "bits": key[1], "distance": key[2]}
        for k in keys:
            vals = [r[k] for r in rows if r.get(k) is not None]
            if not vals:
                if any(k in r for r in rows):
                    merged[k] = None
                continue
            merged[k] = round(float(np.mean(vals)), 4)
            merged[k + "_sd"] = round(float(np.std(vals, ddof=1)), 4) if len(vals) > 1 else None
            merged[k + "_runs"] = [round(float(v), 4) for v in vals]
        merged["repeats"] = len(rows)
        out.append(merged)
    return out


def binary_rows(train, base, queries, gt, bits, embeddings, distances, seed, mAP_eval=None, alphas="train"):
    """One row per (embedding, bits, distance): recall@10 / @100 of the exact Euclidean NN ``gt`` (nq, >= 1),
    search time and the :func:`alpha_diagnostics` of the embedding; ``"mAP"`` too when ``mAP_eval(emb, distance)``
    is given. An embedding that cannot be fitted at some size (ValueError) is skipped with a warning.

    ``alphas="base"`` re-estimates the d_E statistics (Gordo et al. 2014, eq. 22-23) on the base vectors.
    """
    rows = []
    for name in embeddings:
        for b in bits:
            emb = make_embedding(name, b, random_state=seed)
            try:
                emb.fit(train)
            except ValueError as exc:
                logger.warning("%s %d bits skipped: %s", name, b, exc)
                continue
            emb.add(base)
            if alphas == "base":
                emb.fit_statistics(base)
            diag = alpha_diagnostics(emb, train, base)
            for dist in distances:
                _, ids, ms = timed_search(emb, queries, 100, distance=dist)
                row = {"embedding": name, "bits": b, "distance": dist, "recall@10": recall(ids, gt, 10),
                       "recall@100": recall(ids, gt, 100), "ms_per_query": round(ms, 3)}
                if mAP_eval is not None:
                    row["mAP"] = mAP_eval(emb, dist)
                row.update(diag)
                rows.append(row)
                logger.info("%s", row)
    return rows


def _best_times(fns: dict, repeats: int = 3) -> dict:
    """``{name: best seconds}`` of each call, the calls interleaved ``repeats`` times."""
    best = {}
    for _ in range(repeats):
        for key, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[key] = min(best.get(key, np.inf), time.perf_counter() - t)
    return best


def speed_rows(n=1_000_000, nbytes=8, nq=100, k=100, seed=0):
    """Hamming vs faiss IndexBinaryFlat and asymmetric d_E scan vs PQ ADC, same codes size, one thread.

    ``n`` random codes of ``nbytes`` bytes. Returns a JSON-able dict: the parameters, ``ms_per_query``
    ({"hamming", "faiss_binary_flat" (when faiss is installed), "asym_dE", "asym_dLB", "pq_adc"}, best of 3)
    and the ratios ``hamming_vs_faiss``, ``dE_vs_pq_adc``, ``dLB_vs_pq_adc``.
    """
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    qcodes = rng.integers(0, 256, (nq, nbytes), dtype=np.uint8)
    out = {"n": n, "nbytes": nbytes, "nq": nq, "k": k, "threads": 1}
    hamming_topk(qcodes[:2], codes[:1000], k)     # compile
    calls = {"hamming": lambda: hamming_topk(qcodes, codes, k)}
    try:
        import faiss

        faiss.omp_set_num_threads(1)
        idx = faiss.IndexBinaryFlat(8 * nbytes)
        idx.add(codes)
        idx.search(qcodes[:2], k)
        calls["faiss_binary_flat"] = lambda: idx.search(qcodes, k)
    except ImportError:  # pragma: no cover - faiss is a bench extra
        pass
    best = _best_times(calls)
    # asymmetric d_E over the same bytes vs PQ ADC (M = nbytes sub-quantisers of 8 bits)
    d = 8 * nbytes
    X = rng.standard_normal((5000, d)).astype(np.float32)
    emb = LSH(8 * nbytes, random_state=0).fit(X)
    emb.add_codes(codes)
    pq = ProductQuantizer(nbytes, 8, n_iter=2, random_state=0).fit(X)
    pq.add_codes(codes)
    xq = rng.standard_normal((nq, d)).astype(np.float32)
    emb.search(xq[:2], k, "expectation")
    pq.search(xq[:2], k)
    best.update(_best_times({"asym_dE": lambda: emb.search(xq, k, "expectation"),
                             "asym_dLB": lambda: emb.search(xq, k, "lower_bound"),
                             "pq_adc": lambda: pq.search(xq, k)}))
    out["ms_per_query"] = {key: round(1000 * v / nq, 3) for key, v in best.items()}
    if "faiss_binary_flat" in best:
        out["hamming_vs_faiss"] = round(best["hamming"] / best["faiss_binary_flat"], 3)
    out["dE_vs_pq_adc"] = round(best["asym_dE"] / best["pq_adc"], 3)
    out["dLB_vs_pq_adc"] = round(best["asym_dLB"] / best["pq_adc"], 3)
    return out


def warm_up():
    """Load / compile the scan kernels once, so that the first timed search does not include it."""
    rng = np.random.default_rng(0)
    emb = LSH(16, random_state=0).fit(rng.standard_normal((50, 4)))
    emb.add(rng.standard_normal((50, 4)))
    for dist in ("hamming", "expectation"):
        emb.search(rng.standard_normal((2, 4)), 5, distance=dist)


def _fv_mAP_eval(bench_spec, full, qrows):
    """``mAP_eval(emb, distance)``: minibench mAP of the whole-image FVs ``full`` encoded by a copy of ``emb``."""
    names_db = list(bench_spec.images)

    def mAP_eval(emb, dist):
        db = type(emb).__new__(type(emb))
        db.__dict__.update(emb.__dict__)
        db.reset()
        db.add(full)
        _, ids = db.search(full[qrows], len(names_db), dist)
        ranks = {q: [names_db[i] for i in ids[j] if i >= 0] for j, q in enumerate(bench_spec.queries)}
        return round(score_groups(bench_spec, ranks).mAP, 4)

    return mAP_eval


def binary_draw(data_kind, bench_spec, paths, feats, bits, names, distances, n_base, n_query, n_crops, seed,
                alphas="train"):
    """One draw of the recall (and, for FVs, mAP) measurement: image split, data and projections from ``seed``.

    ``data_kind`` "sift" (RootSIFT vectors) or "fv" (Fisher vectors of random sub-windows; the rows then also
    hold the minibench mAP, and a last row gives the uncompressed FVs' mAP). Returns the rows of
    :func:`binary_rows`.
    """
    mAP_eval = None
    if data_kind == "sift":
        train, base, queries = sift_vectors(feats, kind="rootsift", n_base=n_base, n_query=n_query, seed=seed)
    else:
        full, crops, owner = fisher_vectors(feats, n_crops=n_crops, seed=seed)
        qi, ti, bi = split_by_image(len(paths), np.random.default_rng(seed))
        train = crops[np.isin(owner, ti)]
        base = crops[np.isin(owner, bi)]
        queries = crops[np.isin(owner, qi)][:n_query]
        names_db = list(bench_spec.images)
        qrows = [names_db.index(q) for q in bench_spec.queries]
        mAP_eval = _fv_mAP_eval(bench_spec, full, qrows)
        ref = full[qrows] @ full.T
        rankings = {q: [names_db[i] for i in np.argsort(-ref[j], kind="stable")]
                    for j, q in enumerate(bench_spec.queries)}
        full_mAP = round(score_groups(bench_spec, rankings).mAP, 4)
        logger.info("draw %d: uncompressed FV mAP on minibench: %.4f", seed, full_mAP)
    logger.info("draw %d: train %s, base %s, queries %s", seed, train.shape, base.shape, queries.shape)
    gt = euclidean_gt(queries, base)
    rows = binary_rows(train, base, queries, gt, bits, names, distances, seed, mAP_eval, alphas)
    if data_kind == "fv":
        rows.append({"embedding": "none (uncompressed FV, inner product)", "bits": 32 * full.shape[1],
                     "distance": "l2", "recall@10": 1.0, "recall@100": 1.0, "ms_per_query": None,
                     "mAP": full_mAP})
    return rows


def bench_binary(*, data_kind="sift", bits=(32, 64, 128, 256), embeddings=EMBEDDINGS, with_hat=False,
                 n_base=100_000, n_query=1000, n_crops=40, repeats=5, alphas="train", seed=0,
                 spec=DEFAULT_MINIBENCH, cache=DEFAULT_CACHE):
    """Recall of binary embeddings with Hamming, d_E and d_LB (Gordo et al. 2014) on the minibench photos.

    ``repeats`` draws (draw r uses ``seed + r``) merged by :func:`aggregate_runs`; ``with_hat`` adds d_E-hat
    (eq. 27). Returns the list of merged rows.
    """
    unknown = [e for e in embeddings if e not in EMBEDDINGS]
    if unknown:
        raise ValueError(f"unknown embedding {unknown[0]!r}; choose among {', '.join(EMBEDDINGS)}.")
    distances = list(DISTANCES) + (["expectation_hat"] if with_hat else [])
    bench_spec, paths = minibench_paths(spec)
    feats = load_features(paths, cache)
    warm_up()
    runs = [binary_draw(data_kind, bench_spec, paths, feats, list(bits), list(embeddings), distances, n_base,
                        n_query, n_crops, seed + r, alphas) for r in range(repeats)]
    return aggregate_runs(runs)
