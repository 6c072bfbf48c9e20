"""The assignment benchmark behind ``retrieval bench akm``: our AKM structure against faiss on the same words.

One image's descriptors (a few thousand rows) are assigned to a large vocabulary; each method's time is the
median of ``repeats`` calls on the same rows, and its agreement is the fraction of rows whose returned word is
the exact nearest word (brute force, BLAS). faiss runs in the same process with the same thread count:
``IndexIVFFlat`` over OUR coarse cells (same partition, so the comparison isolates the scan) and optionally
``IndexHNSWFlat``.
"""

from __future__ import annotations

import logging
import time

import numpy as np

logger = logging.getLogger(__name__)


def _timed(fn, repeats):
    fn()                                                  # warm-up (numba compilation, page faults)
    ts = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return 1000 * float(np.median(ts)), out


def assignment_curve(W, held, *, nprobes=(4, 8, 16, 24, 32), n_coarse=None, n_components=64, n_candidates=16,
                     threads=2, faiss_methods=("ivf",), hnsw_m=32, efs=(16, 32, 64, 128), repeats=5, seed=0):
    """Time and agreement of ``ApproximateKMeans.predict`` (several nprobe) and of faiss references.

    W : (K, d) float32 words; held : (n, d) float32 rows to assign. Returns a JSON-able dict.
    """
    import numba

    from retrieval.aggregation.large_vocabulary import ApproximateKMeans, exact_nearest

    numba.set_num_threads(threads)
    res = {"words": int(W.shape[0]), "descriptors": int(held.shape[0]), "threads": threads}
    t0 = time.perf_counter()
    v = ApproximateKMeans.from_centers(W, n_coarse=n_coarse, n_components=n_components,
                                       n_candidates=n_candidates, random_state=seed)
    res["build_s"] = time.perf_counter() - t0
    res["n_coarse"] = int(v.coarse_centers_.shape[0])
    res["n_components"] = int(v.components_.shape[1])
    res["n_candidates"] = n_candidates
    t0 = time.perf_counter()
    lab, _ = exact_nearest(held, W)                       # ids in W's numbering
    res["exact_bruteforce_ms"] = 1000 * (time.perf_counter() - t0)
    ours = []
    for p in nprobes:
        v.nprobe = p
        ms, pred = _timed(lambda: v.predict(held), repeats)
        ours.append({"nprobe": p, "ms": ms, "agreement_exact": float((v.perm_[pred] == lab).mean())})
        logger.info("ours nprobe %d: %.1f ms, agreement %.3f", p, ms, ours[-1]["agreement_exact"])
    res["by_nprobe"] = ours
    if faiss_methods:
        res["faiss"] = _faiss_reference(W, held, lab, v, nprobes, threads, faiss_methods, hnsw_m, efs, repeats)
        ivf = {r["nprobe"]: r["ms"] for r in res["faiss"].get("ivf_flat", [])}
        for row in ours:
            if row["nprobe"] in ivf:
                row["ratio_to_faiss_ivf"] = row["ms"] / ivf[row["nprobe"]]
    return res


def _faiss_reference(W, held, lab, v, nprobes, threads, methods, hnsw_m, efs, repeats):
    import faiss

    faiss.omp_set_num_threads(threads)
    d = W.shape[1]
    out = {"version": faiss.__version__}
    if "ivf" in methods:
        quantizer = faiss.IndexFlatL2(d)
        quantizer.add(np.ascontiguousarray(v.coarse_centers_))
        index = faiss.IndexIVFFlat(quantizer, d, quantizer.ntotal, faiss.METRIC_L2)
        index.is_trained = True
        t0 = time.perf_counter()
        index.add(W)
        out["ivf_add_s"] = time.perf_counter() - t0
        rows = []
        for p in nprobes:
            index.nprobe = p
            ms, (_, ids) = _timed(lambda: index.search(held, 1), repeats)
            rows.append({"nprobe": p, "ms": ms, "agreement_exact": float((ids[:, 0] == lab).mean())})
            logger.info("faiss IVFFlat nprobe %d: %.1f ms, agreement %.3f", p, ms, rows[-1]["agreement_exact"])
        out["ivf_flat"] = rows
        del index, quantizer
    if "hnsw" in methods:
        index = faiss.IndexHNSWFlat(d, hnsw_m)
        t0 = time.perf_counter()
        index.add(W)
        out["hnsw_build_s"] = time.perf_counter() - t0
        out["hnsw_M"] = hnsw_m
        rows = []
        for ef in efs:
            index.hnsw.efSearch = ef
            ms, (_, ids) = _timed(lambda: index.search(held, 1), repeats)
            rows.append({"efSearch": ef, "ms": ms, "agreement_exact": float((ids[:, 0] == lab).mean())})
            logger.info("faiss HNSW efSearch %d: %.1f ms, agreement %.3f", ef, ms, rows[-1]["agreement_exact"])
        out["hnsw_flat"] = rows
        del index
    return out
