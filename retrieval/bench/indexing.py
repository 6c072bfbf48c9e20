"""``retrieval bench pq|ivfadc``: our PQ / IVFADC against faiss's IndexPQ / IndexIVFPQ, same data, same run.

Both indexes get the same training vectors, parameters and queries; times are per query over the whole query
batch after a warm-up (numba compilation excluded); recall@R is the fraction of queries whose exact nearest
neighbour (brute force) is among the first R results (Jegou et al. 2012, Fig. 7; faiss's "1-recall@R").
``--synthetic-codes`` injects uniformly random codes (and, for IVFADC, random list sizes) after training on a
small random set: a speed and memory measurement only (no recall).
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np

from retrieval.codes import ProductQuantizer
from retrieval.core.persistence import save_npy_atomic
from retrieval.features import FeatureExtractor, root_sift
from retrieval.features.image import is_image_name
from retrieval.search import IVFADC

logger = logging.getLogger(__name__)

RECALL_AT = (1, 10, 100)


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc), in bytes; 0 when unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def gaussian_data(n, nq, ntrain, d, seed=0):
    """Independent standard normal database, learning and query sets, float32."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((ntrain, d), dtype=np.float32), rng.standard_normal((n, d), dtype=np.float32),
            rng.standard_normal((nq, d), dtype=np.float32))


def rootsift_descriptors(min_count: int, cache_dir: Path, threshold: float = 1.0, max_side: int = 1024):
    """RootSIFT descriptors (float32, 128-d) of Hessian-affine regions of the 114 shared images under
    ../shared/data (every image except the independent benchmark photos of ``data/real/``).

    Extracted once with :class:`retrieval.features.FeatureExtractor` (``threshold`` lowered from pyhesaff's 5.33
    to get more regions) and cached as ``cache_dir/bench-rootsift-<config_key>-<image list digest>.npy``; raises
    when fewer than ``min_count`` descriptors exist.
    """
    ex = FeatureExtractor("hesaff", max_side=max_side, threshold=threshold)
    root = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    paths = sorted(p for p in root.rglob("*") if is_image_name(p.name)
                   and "real" not in p.relative_to(root).parts)
    if not paths:
        raise FileNotFoundError(f"no images found under {root} for --data rootsift.")
    names = hashlib.sha256("\n".join(p.relative_to(root).as_posix() for p in paths).encode()).hexdigest()[:10]
    cache = Path(cache_dir) / f"bench-rootsift-{ex.config_key}-{names}.npy"
    if cache.exists():
        desc = np.load(cache, allow_pickle=False)
    else:
        parts = []
        for i, p in enumerate(paths):
            try:
                feats = ex(p)
            except (ValueError, OSError, RuntimeError) as exc:
                logger.warning("skipping %s: %s", p, exc)
                continue
            parts.append(root_sift(feats.descriptors))
            logger.info("%d/%d %s: %d descriptors", i + 1, len(paths), p.name, len(feats.descriptors))
        desc = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
        save_npy_atomic(cache, desc)
    if desc.shape[0] < min_count:
        raise ValueError(f"only {desc.shape[0]} RootSIFT descriptors in {cache}; {min_count} needed.")
    return desc


def split_real(desc, n, nq, ntrain, seed=0):
    """Held-out queries, database and learning subsets of a real descriptor set (disjoint queries)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(desc.shape[0])
    q = desc[perm[:nq]]
    base_ids = perm[nq:]
    if n:
        base_ids = base_ids[:n]
    base = desc[base_ids]
    train = base[rng.choice(len(base), min(ntrain, len(base)), replace=False)]
    return train, base, q


def exact_nn(xq, xb):
    """Index of the exact nearest neighbour of each query, int64 (nq,)."""
    try:
        import faiss

        return faiss.knn(xq, xb, 1)[1][:, 0].astype(np.int64)
    except ImportError:
        out = np.empty(len(xq), dtype=np.int64)
        bn = (xb ** 2).sum(1)
        for a in range(0, len(xq), 256):
            out[a:a + 256] = (bn[None] - 2 * xq[a:a + 256] @ xb.T).argmin(1)
        return out


def recalls(ids, gt):
    return {f"recall@{r}": float(np.mean((ids[:, :r] == gt[:, None]).any(1))) for r in RECALL_AT}


def _timed(fn, nq):
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3 / nq


def run(kind, *, n, d, M, nbits, nlist, nprobe, k, nq, ntrain, compare, threads, synthetic, data, n_iter,
        seed, cache_dir, repeats=3, train_seeds=1):
    """Build, search and compare; returns the JSON-able result dictionary.

    BLAS is limited to ``threads`` threads for the whole run (threadpoolctl): an idle multi-threaded BLAS
    spinning between calls would otherwise steal the cores the single-threaded scan is measured on.

    With ``train_seeds`` > 1 both libraries are trained ``train_seeds`` times on the same learning set with
    different k-means seeds (ours: ``seed + s``; faiss: ``cp.seed = 1234 + s``) and searched with the same
    queries: the reported recalls are the means over the trainings (``recall@R_sd`` their standard deviation,
    ``runs`` the per-training figures), so that the comparison is between the methods rather than between two
    random k-means initialisations.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads):
        return _run(kind, n=n, d=d, M=M, nbits=nbits, nlist=nlist, nprobe=nprobe, k=k, nq=nq, ntrain=ntrain,
                    compare=compare, threads=threads, synthetic=synthetic, data=data, n_iter=n_iter, seed=seed,
                    cache_dir=cache_dir, repeats=repeats, train_seeds=1 if synthetic else train_seeds)


def _run(kind, *, n, d, M, nbits, nlist, nprobe, k, nq, ntrain, compare, threads, synthetic, data, n_iter,
         seed, cache_dir, repeats, train_seeds):
    kk = max(k, max(RECALL_AT))
    faiss = None
    if compare == "faiss":
        import faiss

        faiss.omp_set_num_threads(threads)
    rng = np.random.default_rng(seed)
    result = {"kind": kind, "params": {"n": n, "d": d, "M": M, "nbits": nbits, "k": k, "nq": nq,
                                       "threads": threads, "synthetic_codes": synthetic, "data": data,
                                       "n_iter": n_iter, "repeats": repeats, "train_seeds": train_seeds}}
    if kind == "ivfadc":
        result["params"].update(nlist=nlist, nprobe=nprobe)
    ksub = 1 << nbits
    if synthetic:
        ntr = max(ksub, nlist if kind == "ivfadc" else 0) * 2
        xt = rng.standard_normal((ntr, d), dtype=np.float32)
        xq = rng.standard_normal((nq, d), dtype=np.float32)
        xb = None
    elif data == "gaussian":
        xt, xb, xq = gaussian_data(n, nq, ntrain, d, seed)
    else:
        desc = rootsift_descriptors(n + nq if n else 200_000 + nq, cache_dir)
        xt, xb, xq = split_real(desc, n, nq, ntrain, seed)
        d = xb.shape[1]
        n = xb.shape[0]
        result["params"].update(n=n, d=d)
    logger.info("data: train %s, base %s, queries %s", xt.shape, None if xb is None else xb.shape, xq.shape)
    gt = None if synthetic else exact_nn(xq, xb)
    runs = []
    for s in range(train_seeds):
        runs.append(_one_training(kind, faiss, xt, xb, xq, gt, rng, d=d, M=M, nbits=nbits, nlist=nlist,
                                  nprobe=nprobe, kk=kk, threads=threads, synthetic=synthetic, n_iter=n_iter,
                                  seed=seed + s, faiss_seed=1234 + s, repeats=repeats, n=n))
    for name in ("ours", "faiss"):
        if name not in runs[0]:
            continue
        out = dict(runs[0][name])
        out["ms_per_query"] = min(r[name]["ms_per_query"] for r in runs)
        out["ms_per_query_runs"] = [t for r in runs for t in r[name]["ms_per_query_runs"]]
        for key in [f"recall@{x}" for x in RECALL_AT] + ["mse"]:
            if key in out:
                vals = np.array([r[name][key] for r in runs])
                out[key] = float(vals.mean())
                if train_seeds > 1:
                    out[key + "_sd"] = float(vals.std(ddof=1))
        if train_seeds > 1:
            out["runs"] = [{key: r[name][key] for key in r[name] if key.startswith(("recall@", "mse"))}
                           for r in runs]
        result[name] = out
    if "faiss" in result:
        result["ratio"] = result["ours"]["ms_per_query"] / result["faiss"]["ms_per_query"]
    return result


def _one_training(kind, faiss, xt, xb, xq, gt, rng, *, d, M, nbits, nlist, nprobe, kk, threads, synthetic,
                  n_iter, seed, faiss_seed, repeats, n):
    """Train, fill and search both libraries once (ours with ``seed``, faiss with ``cp.seed = faiss_seed``)."""
    t0 = time.perf_counter()
    if kind == "pq":
        ours = ProductQuantizer(M, nbits, n_iter=n_iter, random_state=seed).fit(xt)
    else:
        ours = IVFADC(nlist, M, nbits, nprobe, n_iter=n_iter, random_state=seed).fit(xt)
    logger.info("ours trained in %.1f s (seed %d)", time.perf_counter() - t0, seed)
    rss_before = rss_bytes()
    if synthetic:
        codes, ids, offsets = _random_lists(n, M, ours, nlist if kind == "ivfadc" else 1, rng)
        if kind == "pq":
            ours.codes_ = codes
        else:
            ours.set_inverted_lists(codes, ids, offsets)
    else:
        ours.add(xb)
    logger.info("ours filled (%.1f s)", time.perf_counter() - t0)

    def ours_search(x):
        return ours.search(x, kk, threads=threads)

    ours_search(xq[:2])  # warm-up (numba compilation / cache load)
    bpv = ours.code_size if kind == "pq" else ours.bytes_per_vector
    result = {"ours": {"bytes_per_vector": bpv}}
    ref = None
    if faiss is not None:
        if kind == "pq":
            ref = faiss.IndexPQ(d, M, nbits)
        else:
            ref = faiss.IndexIVFPQ(faiss.IndexFlatL2(d), d, nlist, M, nbits)
            ref.nprobe = nprobe
            ref.cp.niter = n_iter
            ref.cp.seed = faiss_seed
        ref.pq.cp.niter = n_iter
        ref.pq.cp.seed = faiss_seed
        t0 = time.perf_counter()
        ref.train(xt)
        if synthetic:
            _fill_faiss(faiss, ref, kind, codes, ids, offsets)
        else:
            ref.add(xb)
        logger.info("faiss built in %.1f s", time.perf_counter() - t0)
        ref.search(xq[:2], kk)
        result["faiss"] = {"bytes_per_vector": ref.pq.code_size + (8 if kind == "ivfadc" else 0)}
    # interleaved repetitions, minimum per library: robust to the noise of a shared machine
    times_o, times_f = [], []
    for _ in range(repeats):
        (D, ids_o), ms = _timed(lambda: ours_search(xq), len(xq))
        times_o.append(ms)
        if ref is not None:
            (Df, If), fms = _timed(lambda: ref.search(xq, kk), len(xq))
            times_f.append(fms)
    result["ours"].update(ms_per_query=min(times_o), ms_per_query_runs=times_o)
    if synthetic:
        rss_after = rss_bytes()
        payload = int(ours.codes_.nbytes + (ours.ids_.nbytes if kind == "ivfadc" else 0))
        if ref is not None:
            payload *= 2  # both libraries hold a copy
        result["ours"].update(rss_bytes=rss_after, rss_before_fill_bytes=rss_before, codes_plus_ids_bytes=payload,
                              rss_over_payload=rss_after / payload,
                              rss_growth_over_payload=(rss_after - rss_before) / payload)
    sample = None if synthetic else xb[: min(len(xb), 100_000)]
    if gt is not None:
        result["ours"].update(recalls(ids_o, gt))
        if kind == "pq":  # quantisation MSE on (up to) 100k database vectors: a noise-free quality measure
            result["ours"]["mse"] = float(((ours.decode(ours.encode(sample)) - sample) ** 2).sum(1).mean())
    if ref is not None:
        result["faiss"].update(ms_per_query=min(times_f), ms_per_query_runs=times_f)
        if gt is not None:
            result["faiss"].update(recalls(If, gt))
            if kind == "pq":
                rec = ref.pq.decode(ref.pq.compute_codes(sample))
                result["faiss"]["mse"] = float(((rec - sample) ** 2).sum(1).mean())
    return result


def _random_lists(n, M, index, nlist, rng):
    """Uniformly random codes (n, M), ids 0..n-1 and offsets with multinomial list sizes; filled in chunks so
    that no temporary copy of the codes exists."""
    dtype = np.uint8 if index.nbits <= 8 else np.uint16
    high = 1 << index.nbits
    codes = np.empty((n, M), dtype=dtype)
    step = 1 << 20
    for a in range(0, n, step):
        codes[a:a + step] = rng.integers(0, high, (min(step, n - a), M), dtype=dtype)
    ids = np.arange(n, dtype=np.int64)
    sizes = rng.multinomial(n, np.full(nlist, 1.0 / nlist))
    offsets = np.zeros(nlist + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return codes, ids, offsets


def _fill_faiss(faiss, ref, kind, codes, ids, offsets):
    if kind == "pq":
        faiss.copy_array_to_vector(codes.reshape(-1), ref.codes)
        ref.ntotal = codes.shape[0]
        return
    for lst in range(len(offsets) - 1):
        a, b = int(offsets[lst]), int(offsets[lst + 1])
        if b > a:
            ref.invlists.add_entries(lst, b - a, faiss.swig_ptr(ids[a:b]), faiss.swig_ptr(codes[a:b]))
    ref.ntotal = codes.shape[0]
