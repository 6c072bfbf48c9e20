"""Measurements of ``retrieval bench kernels`` (Bourrier et al. 2015 and Kim and Choi 2017) on l1-normalised real SIFT vectors."""

from __future__ import annotations

import logging
import time

import numpy as np

from retrieval.bench.binary import (
    DEFAULT_CACHE,
    DEFAULT_MINIBENCH,
    load_features,
    minibench_paths,
    sift_vectors,
)
from retrieval.codes.binary import unpack_bits
from retrieval.codes.homogeneous_map import BEAHK
from retrieval.codes.kernel_pca import KernelPCAEmbedding
from retrieval.codes.kernels import kernel_matrix, kernel_topk
from retrieval.codes.klsh import KLSH
from retrieval.codes.rmmh import RMMH
from retrieval.evaluation.recall import recall_at_r
from retrieval.search.kernel_exact import ExactKernelSearch
from retrieval.search.kernel_search import KPCALSH, KPCAPQ

logger = logging.getLogger(__name__)
RS = (1, 10, 100, 1000)


def _recalls(ids, gt):
    return {f"recall@{r}": round(v, 4) for r, v in recall_at_r(ids, gt, RS).items()}


def _kpca_pq(train, base, queries, gt, b, landmarks, seed, pre, E=128):
    M = b // 8
    E = E if E % M == 0 else M * max(1, E // M)
    t = time.perf_counter()
    idx = KPCAPQ("chi2", landmarks, E, M=M, preprocessing=pre, keep_vectors=False, random_state=seed).fit(train)
    idx.add(base)
    t_build = time.perf_counter() - t
    t = time.perf_counter()
    _, ids = idx.search(queries, max(RS))
    ms = 1000 * (time.perf_counter() - t) / len(queries)
    return {**_recalls(ids, gt), "E": E, "build_s": round(t_build, 1), "ms_per_query": round(ms, 3)}


def _binary(emb, train, base, queries, gt, distance="hamming"):
    t = time.perf_counter()
    emb.fit(train)
    emb.add(base)
    t_build = time.perf_counter() - t
    t = time.perf_counter()
    _, ids = emb.search(queries, max(RS), distance)
    ms = 1000 * (time.perf_counter() - t) / len(queries)
    return {**_recalls(ids, gt), "build_s": round(t_build, 1), "ms_per_query": round(ms, 3)}


def part_recall(train, base, queries, gt, bits, landmarks, seed):
    """Bourrier et al. 2015, Fig. 4: recall@R of each scheme at equal bits (KPCA+PQ with E = 128, KPCA+LSH with E = B)."""
    rows = []
    for b in bits:
        rows.append({"method": "KPCA+PQ (RP)", "bits": b,
                     **_kpca_pq(train, base, queries, gt, b, landmarks, seed, "permutation")})
        for name, emb in (("KPCA+LSH", KPCALSH(b, n_landmarks=landmarks, random_state=seed)),
                          ("KLSH", KLSH(b, n_landmarks=landmarks, random_state=seed)),
                          ("RMMH", RMMH(b, n_landmarks=landmarks, random_state=seed)),
                          ("BE-AHK", BEAHK(b, random_state=seed))):
            rows.append({"method": name, "bits": b, **_binary(emb, train, base, queries, gt)})
            logger.info("%s", rows[-1])
        # the asymmetric d_E of Gordo et al. 2014 on top of the kernel binary codes (extension)
        rows.append({"method": "KPCA+LSH d_E", "bits": b,
                     **_binary(KPCALSH(b, n_landmarks=landmarks, random_state=seed), train, base, queries, gt,
                               "expectation")})
        logger.info("%s", rows[-1])
    return rows


def part_table2(train, base, queries, gt, landmarks, seed, repeats=3):
    """Bourrier et al. 2015, Table 2: KPCA+PQ (E = 64, 8 bytes) with no pre-processing, random rotation, random permutation."""
    rows = []
    for pre in ("none", "rotation", "permutation"):
        runs = [_kpca_pq(train, base, queries, gt, 64, landmarks, seed + r, pre, E=64) for r in range(repeats)]
        row = {"preprocessing": pre, "repeats": repeats}
        for key in runs[0]:
            if key.startswith("recall"):
                row[key] = round(float(np.mean([r[key] for r in runs])), 4)
        rows.append(row)
        logger.info("%s", row)
    return rows


def part_exact(train, base, queries, gt, seed, landmarks=2048, E=128):
    """Bourrier et al. 2015, Appendix A.2: exact NN with the Cauchy-Schwarz bound; correctness and kernel evaluations."""
    emb = KernelPCAEmbedding("chi2", landmarks, E, random_state=seed).fit(train)
    out = {"landmarks": landmarks, "E": emb.n_components_}
    for bound in ("kth", "paper"):
        ex = ExactKernelSearch(emb, bound=bound)
        ex.add(base)
        t = time.perf_counter()
        vals, ids, evals = ex.search(queries, 1)
        ms = 1000 * (time.perf_counter() - t) / len(queries)
        tv = kernel_matrix(queries, base[gt[:, 0]], "chi2").diagonal()
        correct = int(np.sum(np.isclose(vals[:, 0], tv, rtol=1e-6, atol=1e-7)))
        frac = evals / base.shape[0]
        out[bound] = {"correct": correct, "of": int(len(queries)), "same_id": int(np.sum(ids[:, 0] == gt[:, 0])),
                      "evals_mean_frac": round(float(frac.mean()), 5),
                      "evals_p90_frac": round(float(np.percentile(frac, 90)), 5),
                      "evals_max_frac": round(float(frac.max()), 5), "ms_per_query": round(ms, 2)}
        logger.info("exact %s: %s", bound, out[bound])
    return out


def _frobenius(codes_bits, target):
    n, b = codes_bits.shape
    Bf = codes_bits.astype(np.float32)
    ham = (Bf @ (1 - Bf).T + (1 - Bf) @ Bf.T) / b
    diff = ham - target
    return float(np.linalg.norm(diff)), float(np.linalg.norm(diff, 2))


def part_beahk(train, seed, n=2000, bits=(128, 512, 1024, 2048), landmarks=1024):
    """Kim and Choi 2017, Fig. 3: ||H - acos(K)/pi||_F and spectral norm vs bits, BE-AHK and KLSH(rank 128)."""
    rng = np.random.default_rng(seed)
    X = train[rng.choice(train.shape[0], n, replace=False)]
    K = np.clip(kernel_matrix(X, X, "chi2").astype(np.float64), -1, 1)
    target = np.arccos(K) / np.pi
    rows = []
    for b in bits:
        row = {"bits": b}
        for name, emb in (("BE-AHK", BEAHK(b, random_state=seed)),
                          ("KLSH(128)", KLSH(b, n_landmarks=landmarks, rank=128, random_state=seed))):
            emb.fit(train)
            fro, spec = _frobenius(unpack_bits(emb.encode(X), b), target)
            row[name] = {"frobenius": round(fro, 2), "spectral": round(spec, 2)}
        rows.append(row)
        logger.info("%s", row)
    return rows


def part_shift(train, base, queries, seed, bits=1024, n_base=20000, n_clusters=10, landmarks=1024):
    """Kim and Choi 2017, Fig. 6 protocol: landmarks from one cluster, queries from the others; recall@R of the chi2 NN."""
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    B = base[rng.choice(base.shape[0], min(n_base, base.shape[0]), replace=False)]
    km = KMeans(n_clusters, n_init=1, random_state=seed).fit(train)
    lab_train = km.labels_
    big = int(np.bincount(lab_train).argmax())
    lab_q = km.predict(queries)
    Q = queries[lab_q != big][:500]
    _, gt = kernel_topk(Q, B, 1)
    biased = train[lab_train == big]
    out = {"bits": bits, "n_base": int(B.shape[0]), "n_query": int(Q.shape[0]), "landmark_cluster_size":
           int(biased.shape[0])}
    for setting, pool in (("random landmarks", train), ("landmarks from one cluster", biased)):
        res = {}
        for name, emb in (("KLSH", KLSH(bits, n_landmarks=min(landmarks, pool.shape[0]), random_state=seed)),
                          ("BE-AHK", BEAHK(bits, random_state=seed))):
            emb.fit(pool)
            emb.add(B)
            _, ids = emb.search(Q, 1000)
            res[name] = _recalls(ids, gt)
        out[setting] = res
        logger.info("shift %s: %s", setting, res)
    return out


def run(parts, train, base, queries, bits, landmarks, seed):
    """Run the requested parts; returns a JSON-able dict."""
    out = {}
    gt = None
    if parts & {"recall", "table2", "exact"}:
        t = time.perf_counter()
        _, gt = kernel_topk(queries, base, 1, threads=2)
        logger.info("chi2 ground truth in %.1f s", time.perf_counter() - t)
    if "recall" in parts:
        out["recall"] = part_recall(train, base, queries, gt, bits, landmarks, seed)
    if "table2" in parts:
        out["table2"] = part_table2(train, base, queries, gt, landmarks, seed)
    if "exact" in parts:
        out["exact"] = part_exact(train, base, queries, gt, seed)
    if "beahk" in parts:
        out["beahk_frobenius"] = part_beahk(train, seed)
    if "shift" in parts:
        out["shift"] = part_shift(train, base, queries, seed)
    return out


PARTS = ("recall", "table2", "exact", "beahk", "shift")


def bench_kernels(*, parts=PARTS, bits=(32, 64, 128, 256), n_base=100_000, n_query=1000, landmarks=1024, seed=0,
                  spec=DEFAULT_MINIBENCH, cache=DEFAULT_CACHE) -> dict:
    """chi2 kernel search on l1-normalised SIFT of the minibench photos: the requested ``parts`` of :func:`run`.

    Returns ``{"n_base", "n_query", "landmarks", <part results>...}``.
    """
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown part {sorted(unknown)[0]!r}; choose among {', '.join(PARTS)}.")
    _, paths = minibench_paths(spec)
    feats = load_features(paths, cache)
    train, base, queries = sift_vectors(feats, kind="l1", n_base=n_base, n_query=n_query, seed=seed)
    logger.info("train %s, base %s, queries %s", train.shape, base.shape, queries.shape)
    out = {"n_base": int(base.shape[0]), "n_query": int(queries.shape[0]), "landmarks": landmarks}
    out.update(run(set(parts), train, base, queries, list(bits), landmarks, seed))
    return out
