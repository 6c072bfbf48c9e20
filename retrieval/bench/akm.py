"""The measurements behind ``retrieval bench akm``: AKM training, and our assignment structure against faiss.

One image's descriptors (a few thousand rows) are assigned to a large vocabulary; each method's time is the
median of ``repeats`` calls on the same rows, and its agreement is the fraction of rows whose returned word is
the exact nearest word (brute force, BLAS). faiss runs in the same process with the same thread count:
``IndexIVFFlat`` over OUR coarse cells (same partition, so the comparison isolates the scan) and optionally
``IndexHNSWFlat``.
"""

from __future__ import annotations

import logging
import time

import numba
import numpy as np

from retrieval.aggregation.large_vocabulary import ApproximateKMeans, exact_nearest

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


def bench_akm(descriptors, *, train_words=100_000, train_descriptors=1_000_000, n_iter=10, assign_words=1_000_000,
              assign_descriptors=3000, nprobe=8, nprobes=(4, 8, 16, 24, 32), n_coarse=None, n_components=64,
              n_candidates=16, threads=2, faiss_methods=("ivf",), hnsw_m=32, efs=(16, 32, 64, 128),
              seed=0) -> dict:
    """Time AKM training and the assignment of one image's descriptors; agreement with the exact nearest word.

    ``descriptors`` is a float32 .npy of shape (n, d), read memory-mapped. Its last ``assign_descriptors``
    rows are held out and assigned. With ``train_words`` > 0, an :class:`ApproximateKMeans` of that many words
    is trained on at most ``train_descriptors`` other rows (``"train"``: seconds, inertia, assignment time of
    the held-out rows, agreement with :func:`exact_nearest`). With ``assign_words`` > 0, a vocabulary of that
    many sampled rows goes through :func:`assignment_curve` (``"assign"``). Returns a JSON-able dict.
    """
    X = np.load(descriptors, mmap_mode="r", allow_pickle=False)
    if X.ndim != 2 or X.shape[0] <= assign_descriptors:
        raise ValueError(f"{descriptors}: expected a 2-d array (n, d) with more than {assign_descriptors} rows "
                         f"(the held-out ones); got shape {X.shape}.")
    rng = np.random.default_rng(seed)
    held = np.ascontiguousarray(X[-assign_descriptors:], dtype=np.float32)
    pool = X.shape[0] - assign_descriptors
    res = {"descriptors": str(descriptors), "n_available": int(X.shape[0]), "dim": int(X.shape[1])}
    if train_words:
        idx = np.sort(rng.choice(pool, size=min(train_descriptors, pool), replace=False))
        Xt = np.ascontiguousarray(X[idx], dtype=np.float32)
        t0 = time.perf_counter()
        v = ApproximateKMeans(train_words, n_iter=n_iter, nprobe=nprobe, random_state=seed).fit(Xt)
        res["train"] = {"words": train_words, "descriptors": int(Xt.shape[0]), "n_iter": n_iter,
                        "seconds": time.perf_counter() - t0, "inertia": v.inertia_}
        lab, _ = exact_nearest(held, v.cluster_centers_)
        v.predict(held[:10])
        t0 = time.perf_counter()
        pred = v.predict(held)
        res["train"]["assign_ms"] = 1000 * (time.perf_counter() - t0)
        res["train"]["agreement_exact"] = float((pred == lab).mean())
        del Xt
    if assign_words:
        idx = np.sort(rng.choice(pool, size=min(assign_words, pool), replace=False))
        W = np.ascontiguousarray(X[idx], dtype=np.float32)
        res["assign"] = assignment_curve(
            W, held, nprobes=list(nprobes), n_coarse=n_coarse, n_components=n_components, n_candidates=n_candidates,
            threads=threads, faiss_methods=tuple(faiss_methods), hnsw_m=hnsw_m, efs=list(efs), seed=seed)
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
