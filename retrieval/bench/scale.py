"""``retrieval bench scale``: extraction and sharded search on a local Dask cluster (docs/scaling.md).

Extraction (:func:`extraction_scaling`): the same minibench photos extracted end to end (decode + Hessian-affine
+ SIFT, written to a feature store) by a :class:`distributed.LocalCluster` of 1 and of 2 single-threaded worker
processes (:func:`retrieval.app.cluster.extract_task`, the tasks of ``retrieval index --cluster``), by the
library's process pool with 1 and 2 processes, and by raw pyhesaff in this process (decode with the
extractor's loader, then ``pyhesaff.detect_feats_in_image``: the single-core reference). Cluster and pool are
timed twice: including their start-up, and warm (started, every worker past its first image).

Search (:func:`sharded_search`): ``n_codes`` synthetic IVFADC codes (64-d, 8 sub-quantisers x 8 bits: 8 bytes
per code, 1024 lists) -- quantisers trained on 20,000 random vectors, then list numbers and codes drawn at random
(no training or encoding of ``n_codes`` vectors). The whole index in this process vs two shards of half the codes,
each built and held by one worker of a 2-worker LocalCluster; per query: the time in this process, the time of
each shard's search on its worker, the end-to-end fan-out + merge time, and the merge alone.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

DIM, M, NBITS, NLIST, NPROBE, K = 64, 8, 8, 1024, 16, 100
TRAIN_VECTORS = 20_000


def _minibench_paths(minibench_json, n_images: int) -> list[str]:
    spec_path = Path(minibench_json) if minibench_json else Path("..") / "shared" / "data" / "minibench.json"
    if not spec_path.is_file():
        raise ValueError(f"{spec_path}: minibench.json not found (give --minibench FILE).")
    spec = json.loads(spec_path.read_text("utf-8"))
    paths = sorted(str((spec_path.parent / rel).resolve()) for rel in spec["images"])
    if len(paths) < n_images:
        raise ValueError(f"--images {n_images}: the minibench has only {len(paths)} images.")
    return paths[:n_images]


def _raw_pyhesaff(paths, ex) -> float:
    """Seconds for raw pyhesaff over ``paths`` in this process (decode + detect + describe)."""
    import pyhesaff

    kw = ex.detector_impl.pyhesaff_kwargs()
    pyhesaff.detect_feats_in_image(ex.load(paths[0]).pixels, **kw)   # library initialisation
    t0 = time.perf_counter()
    for p in paths:
        pyhesaff.detect_feats_in_image(ex.load(p).pixels, **kw)
    return time.perf_counter() - t0


def _dask_run(paths, ex, n_workers: int) -> dict:
    import distributed

    from retrieval.app.cluster import extract_batch_task, extract_task, images_per_task
    from retrieval.features.store import file_hash

    hashes = [file_hash(p) for p in paths]
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        t0 = time.perf_counter()
        with distributed.LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, host="127.0.0.1",
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster, set_as_default=False) as client:
            t_up = time.perf_counter() - t0
            # warm up: every worker extracts one image into a throw-away store
            workers = sorted(client.scheduler_info()["workers"])
            warm = [client.submit(extract_task, paths[0], hashes[0], ex, str(tmp / f"warm{i}"), pure=False,
                                  workers=[w]) for i, w in enumerate(workers)]
            client.gather(warm)
            t1 = time.perf_counter()
            items = list(zip(paths, hashes, strict=True))
            per = images_per_task(len(items), n_workers)   # the batching of 'retrieval index --cluster'
            futs = [client.submit(extract_batch_task, items[a:a + per], ex, str(tmp / "store"), pure=False)
                    for a in range(0, len(items), per)]
            res = [r for batch in client.gather(futs) for r in batch]
            warm_s = time.perf_counter() - t1
        total = time.perf_counter() - t0
        if any(r[0] != "ok" for r in res):
            raise RuntimeError(f"{sum(r[0] != 'ok' for r in res)} images failed on the cluster.")
        return {"startup_s": t_up, "warm_s": warm_s, "total_s": total}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pool_run(paths, ex, n_workers: int) -> dict:
    """The process pool of ``retrieval index`` without a cluster, writing the same feature-store entries."""
    from retrieval.features.parallel import ExtractionPool, extract_many
    from retrieval.features.store import FeatureStore, file_hash

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        t0 = time.perf_counter()
        store = FeatureStore(tmp / "a")
        n_ok = sum(not isinstance(r, Exception) for _, r in extract_many(paths, ex, workers=n_workers, store=store))
        total = time.perf_counter() - t0
        if n_ok != len(paths):
            raise RuntimeError(f"{len(paths) - n_ok} images failed in the pool.")
        if n_workers == 1:
            return {"total_s": total, "warm_s": total}
        store = FeatureStore(tmp / "b")
        with ExtractionPool(ex, n_workers) as pool:
            pool.warm_up(paths[0])
            t1 = time.perf_counter()
            for p, res in zip(paths, pool.imap(paths), strict=True):
                store.put(file_hash(p), res, ex.config_key)
            warm = time.perf_counter() - t1
        return {"total_s": total, "warm_s": warm}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def extraction_scaling(n_images: int = 24, minibench_json=None, max_side: int = 1024, progress: bool = False) -> dict:
    """Images/s of raw pyhesaff (one core), of the Dask LocalCluster with 1 and 2 workers and of the process
    pool with 1 and 2 processes, on the same ``n_images`` minibench photos (module docstring)."""
    from retrieval.features.extractor import FeatureExtractor

    paths = _minibench_paths(minibench_json, n_images)
    ex = FeatureExtractor("hesaff", max_side=max_side)
    n = len(paths)
    raw = _raw_pyhesaff(paths, ex)
    out = {"n_images": n, "max_side": max_side, "raw_pyhesaff_images_per_s": n / raw, "dask": {}, "pool": {}}
    for w in (1, 2):
        if progress:
            logger.warning("bench scale: extraction with %d worker(s)", w)
        d = _dask_run(paths, ex, w)
        p = _pool_run(paths, ex, w)
        out["dask"][str(w)] = {"images_per_s_warm": n / d["warm_s"], "images_per_s_with_startup": n / d["total_s"],
                               "startup_s": d["startup_s"], "ratio_to_raw_pyhesaff": (n / d["warm_s"]) / (n / raw)}
        out["pool"][str(w)] = {"images_per_s_warm": n / p["warm_s"], "images_per_s_with_startup": n / p["total_s"],
                               "ratio_to_raw_pyhesaff": (n / p["warm_s"]) / (n / raw)}
    for kind in ("dask", "pool"):
        r = out[kind]
        out[kind]["scaling_2_over_1_warm"] = r["2"]["images_per_s_warm"] / r["1"]["images_per_s_warm"]
        out[kind]["scaling_2_over_1_with_startup"] = (r["2"]["images_per_s_with_startup"]
                                                      / r["1"]["images_per_s_with_startup"])
    return out


# ---------------------------------------------------------------------------------------------- search

def _trained(seed: int = 0):
    """An IVFADC with trained quantisers and empty lists (trained on TRAIN_VECTORS clustered random vectors)."""
    from retrieval.search import IVFADC

    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((256, DIM)).astype(np.float32)
    X = centers[rng.integers(0, 256, TRAIN_VECTORS)] + 0.3 * rng.standard_normal((TRAIN_VECTORS, DIM)).astype(
        np.float32)
    return IVFADC(nlist=NLIST, M=M, nbits=NBITS, nprobe=NPROBE, n_iter=10, random_state=seed).fit(X), X


def build_synthetic(trained, start: int, stop: int, seed: int):
    """``trained`` filled with the codes of ids ``start .. stop - 1``: list numbers and codes drawn at random (the
    same ids get the same codes in any split)."""

    ivf = trained.empty_like()
    step = 1 << 20   # codes are drawn block by block: block b from a generator seeded by (seed, b)
    for blk in range(start // step, (stop + step - 1) // step):
        rng = np.random.default_rng([seed, blk])
        labels = rng.integers(0, NLIST, step)
        codes = rng.integers(0, 2 ** NBITS, (step, M), dtype=np.uint8)
        a, b = max(start, blk * step), min(stop, (blk + 1) * step)
        ivf.add_preassigned(labels[a - blk * step:b - blk * step], codes[a - blk * step:b - blk * step],
                            np.arange(a, b, dtype=np.int64))
    return ivf


class ShardActor:
    """A shard held by a worker as a Dask actor: calls go to the worker directly, not through the scheduler."""

    def __init__(self, trained, start: int, stop: int, seed: int):
        self.ivf = build_synthetic(trained, start, stop, seed)

    def search(self, q, k):
        return _shard_search(self.ivf, q, k)

    def search_batch(self, Q, k):
        t0 = time.perf_counter()
        D, ids = self.ivf.search(Q, k)
        return D, ids, time.perf_counter() - t0


def _ntotal(ivf) -> int:
    return int(ivf.ntotal)


def _shard_search(ivf, q, k):
    t0 = time.perf_counter()
    D, ids = ivf.search(q[None, :], k)
    return D[0], ids[0], time.perf_counter() - t0


def _ms(v) -> dict:
    return {"median": 1e3 * float(np.median(v)), "p90": 1e3 * float(np.percentile(v, 90))}


def _same(got, want) -> bool:
    """The same k nearest neighbours: distances equal up to float32 rounding (a worker's BLAS runs on one thread,
    whose sums may round differently), and the same ids among those clearly nearer than the k-th (ties at rank k
    may keep either id)."""
    (Dg, ig), (Dw, iw) = got, want
    if len(Dg) != len(Dw) or not np.allclose(Dg, Dw, rtol=1e-5, atol=1e-6):
        return False
    cut = Dw[-1] - 1e-5 * max(1.0, abs(float(Dw[-1])))
    return set(ig[Dg < cut].tolist()) == set(iw[Dw < cut].tolist())


def _fan_out(Q, single_res, ask) -> dict:
    """Per-query fan-out to the shards (``ask(q)`` -> every shard's ``(D, ids, seconds)``) and merge."""
    end_to_end, shard_s, merge_s, equal = [], [], [], 0
    for q, want in zip(Q, single_res, strict=True):
        t0 = time.perf_counter()
        parts = ask(q)
        t1 = time.perf_counter()
        got = merge_topk(parts, K)
        t2 = time.perf_counter()
        end_to_end.append(t2 - t0)
        merge_s.append(t2 - t1)
        shard_s.append(max(p[2] for p in parts))
        equal += _same(got, want)
    return {"end_to_end_ms": _ms(end_to_end), "slowest_shard_ms": _ms(shard_s), "merge_ms": _ms(merge_s),
            "overhead_ms": _ms(np.asarray(end_to_end) - np.asarray(shard_s)),
            "lists_equal_single_process": f"{equal}/{len(Q)}"}


def _coarse_ms(Q) -> float:
    """Median ms of the coarse quantiser of one query against 65,536 centroids of 256 dimensions (nprobe 64): the
    part of a shard's search that does not shrink with the shard (the 1-billion plan of docs/scaling.md)."""
    from retrieval.search import IVFADC

    rng = np.random.default_rng(3)
    ivf = IVFADC(nlist=65536, M=32)
    ivf.centroids_ = rng.standard_normal((65536, 256)).astype(np.float32)
    q = np.tile(Q, (1, 256 // Q.shape[1])).astype(np.float32)
    ivf.coarse_search(q[:1], 64)
    times = []
    for x in q:
        t0 = time.perf_counter()
        ivf.coarse_search(x[None, :], 64)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def _noop(i):
    return i


def _fan_out_by_shards(client, trained, workers, Q) -> dict:
    """Median end-to-end ms per query through S actor-held shards of 20,000 codes (spread over the workers) and the
    merge alone, for S = 2, 8, 32: the cost of the fan-out itself as S grows."""
    out = {}
    for S in (2, 8, 32):
        actors = [client.submit(ShardActor, trained, i * 20_000, (i + 1) * 20_000, 7, actor=True,
                                workers=[workers[i % len(workers)]]).result() for i in range(S)]
        for a in actors:
            a.search(Q[0], K).result()
        t_all, t_merge = [], []
        for q in Q:
            t0 = time.perf_counter()
            parts = [f.result() for f in [a.search(q, K) for a in actors]]
            t1 = time.perf_counter()
            merge_topk(parts, K)
            t_all.append(time.perf_counter() - t0)
            t_merge.append(time.perf_counter() - t1)
        out[str(S)] = {"end_to_end_ms": 1e3 * float(np.median(t_all)), "merge_ms": 1e3 * float(np.median(t_merge))}
        del actors
    return out


def merge_topk(parts, k):
    """Global top ``k`` of per-shard ``(distances, ids)`` by (distance, id)."""
    D = np.concatenate([p[0] for p in parts])
    ids = np.concatenate([p[1] for p in parts])
    keep = ids >= 0
    D, ids = D[keep], ids[keep]
    order = np.lexsort((ids, D))[:k]
    return D[order], ids[order]


def sharded_search(n_codes: int = 10_000_000, n_queries: int = 100, progress: bool = False) -> dict:
    """Per-query latency of IVFADC search over ``n_codes`` synthetic codes in one process vs 2 worker-held shards
    (module docstring); also checks that the merged lists equal the single-process ones."""
    import distributed

    trained, X = _trained()
    rng = np.random.default_rng(1)
    Q = X[rng.choice(len(X), n_queries, replace=False)] + 0.05 * rng.standard_normal((n_queries, DIM)).astype(
        np.float32)
    t0 = time.perf_counter()
    whole = build_synthetic(trained, 0, n_codes, seed=7)
    build_s = time.perf_counter() - t0
    whole.search(Q[:1], K)   # warm-up (tables)
    single, single_res = [], []
    for q in Q:
        D, ids, dt = _shard_search(whole, q, K)
        single.append(dt)
        single_res.append((D, ids))
    code_bytes = int(whole.codes_.nbytes + whole.ids_.nbytes)
    del whole
    if progress:
        logger.warning("bench scale: %d codes in one process: %.2f ms per query", n_codes, 1e3 * np.median(single))
    half = n_codes // 2
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:   # the default client: actor proxies need it
        workers = sorted(client.scheduler_info()["workers"])
        shards = [client.submit(build_synthetic, trained, a, b, 7, workers=[w], pure=False)
                  for (a, b), w in zip([(0, half), (half, n_codes)], workers, strict=True)]
        sizes = client.gather([client.submit(_ntotal, s, pure=False) for s in shards])
        if sum(sizes) != n_codes:
            raise RuntimeError(f"the shards hold {sum(sizes)} codes, not {n_codes}.")
        for s in shards:
            client.submit(_shard_search, s, Q[0], K, pure=False).result()   # warm-up
        tasks = _fan_out(Q, single_res, lambda q: client.gather(
            [client.submit(_shard_search, s, q, K, pure=False) for s in shards]))
        for s in shards:
            s.release()
        actors = [client.submit(ShardActor, trained, a, b, 7, actor=True, workers=[w]).result()
                  for (a, b), w in zip([(0, half), (half, n_codes)], workers, strict=True)]
        for a in actors:
            a.search(Q[0], K).result()   # warm-up
        actor_run = _fan_out(Q, single_res, lambda q: [f.result() for f in [a.search(q, K) for a in actors]])
        t0 = time.perf_counter()
        parts = [f.result() for f in [a.search_batch(Q, K) for a in actors]]
        batch_s = time.perf_counter() - t0
        batch_equal = sum(_same(merge_topk([(p[0][i], p[1][i]) for p in parts], K), single_res[i])
                          for i in range(n_queries))
        actors.clear()   # the shards of 10M codes are released before the fan-out runs
        fan_out = _fan_out_by_shards(client, trained, workers, Q[:min(n_queries, 50)])
        t0 = time.perf_counter()
        client.gather(client.map(_noop, range(2000), pure=False))
        tasks_per_s = 2000 / (time.perf_counter() - t0)

    return {
        "n_codes": n_codes, "dim": DIM, "M": M, "nbits": NBITS, "nlist": NLIST, "nprobe": NPROBE, "k": K,
        "queries": n_queries, "bytes_per_code_with_id": code_bytes / n_codes, "build_s": build_s,
        "single_process_ms": _ms(single),
        "scanned_codes_per_query": n_codes * NPROBE / NLIST,
        "ns_per_scanned_code": 1e9 * float(np.median(single)) / (n_codes * NPROBE / NLIST),
        "sharded_2_workers_tasks": tasks,
        "sharded_2_workers_actors": actor_run,
        "sharded_2_workers_actors_batch": {"queries": n_queries, "ms_per_query": 1e3 * batch_s / n_queries,
                                           "lists_equal_single_process": f"{batch_equal}/{n_queries}"},
        "fan_out_ms_by_shards": fan_out,
        "coarse_ms_65536_lists_256d": _coarse_ms(Q[:20]),
        "scheduler_trivial_tasks_per_s": tasks_per_s,
    }


def format_report(out: dict) -> str:
    lines = []
    e = out.get("extraction")
    if e:
        lines.append(f"extraction, {e['n_images']} minibench photos at {e['max_side']} px "
                     f"(raw pyhesaff, one core: {e['raw_pyhesaff_images_per_s']:.2f} images/s)")
        for kind in ("dask", "pool"):
            for w in ("1", "2"):
                r = e[kind][w]
                lines.append(f"  {kind:4} {w} worker(s): {r['images_per_s_warm']:.2f} images/s warm "
                             f"({r['ratio_to_raw_pyhesaff']:.2f}x raw pyhesaff), {r['images_per_s_with_startup']:.2f} "
                             f"with start-up")
            lines.append(f"  {kind:4} 2 / 1 workers: {e[kind]['scaling_2_over_1_warm']:.2f}x warm, "
                         f"{e[kind]['scaling_2_over_1_with_startup']:.2f}x with start-up")
    s = out.get("search")
    if s:
        lines.append(f"search, {s['n_codes']:,} IVFADC codes ({s['M']} x {s['nbits']} bits, nlist {s['nlist']}, "
                     f"nprobe {s['nprobe']}, k {s['k']}), {s['queries']} queries, median (p90) ms per query")
        lines.append(f"  one process:                {s['single_process_ms']['median']:.2f} "
                     f"({s['single_process_ms']['p90']:.2f}); {s['ns_per_scanned_code']:.2f} ns per scanned code")
        for name in ("tasks", "actors"):
            sh = s[f"sharded_2_workers_{name}"]
            lines.append(f"  2 shards, 2 workers, {name:6}: {sh['end_to_end_ms']['median']:.2f} "
                         f"({sh['end_to_end_ms']['p90']:.2f}) end to end; slowest shard "
                         f"{sh['slowest_shard_ms']['median']:.2f}; fan-out + merge overhead "
                         f"{sh['overhead_ms']['median']:.2f}; merge alone {sh['merge_ms']['median']:.3f}; lists equal "
                         f"{sh['lists_equal_single_process']}")
        b = s["sharded_2_workers_actors_batch"]
        lines.append(f"  2 shards, 2 workers, one batch of {b['queries']} queries per actor: {b['ms_per_query']:.2f} ms "
                     f"per query; lists equal {b['lists_equal_single_process']}")
        for S, r in s["fan_out_ms_by_shards"].items():
            lines.append(f"  fan-out to {S:>2} shards of 20,000 codes: {r['end_to_end_ms']:.2f} ms per query "
                         f"(merge {r['merge_ms']:.3f})")
        lines.append(f"  scheduler: {s['scheduler_trivial_tasks_per_s']:.0f} trivial tasks/s; coarse quantiser of 65,536 "
                     f"x 256-d lists: {s['coarse_ms_65536_lists_256d']:.2f} ms per query")
    return "\n".join(lines)
