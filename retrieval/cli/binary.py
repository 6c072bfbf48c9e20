"""CLI commands for binary codes and kernels: ``bench binary``, ``bench kernels``.

Both run on real descriptors of the shared real photos (``../shared/data/minibench.json``); both are heavy
(minutes on two cores).
"""

from __future__ import annotations

import json
import logging
import time

import click
import numpy as np

from retrieval.cli.groups import bench

logger = logging.getLogger(__name__)

ALL_EMBEDDINGS = ("LSH", "LSBC", "SH", "PCAE", "PCAE-RR", "PCAE-ITQ")


def _int_list(text: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}")
    return out


def _binary_rows(train, base, queries, gt, bits, embeddings, distances, seed, mAP_eval=None, alphas="train"):
    from retrieval.bench.binary import alpha_diagnostics, recall, timed_search
    from retrieval.codes.binary import make_embedding

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


def _speed_rows(n=1_000_000, nbytes=8, nq=100, k=100, seed=0):
    """Hamming vs faiss IndexBinaryFlat and asymmetric d_E scan vs PQ ADC, same codes size, one thread."""
    from retrieval.codes.binary import LSH, hamming_topk
    from retrieval.codes.pq import ProductQuantizer

    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    qcodes = rng.integers(0, 256, (nq, nbytes), dtype=np.uint8)
    out = {"n": n, "nbytes": nbytes, "nq": nq, "k": k, "threads": 1}
    hamming_topk(qcodes[:2], codes[:1000], k)     # compile
    best = {}
    try:
        import faiss

        faiss.omp_set_num_threads(1)
        idx = faiss.IndexBinaryFlat(8 * nbytes)
        idx.add(codes)
        idx.search(qcodes[:2], k)
    except ImportError:  # pragma: no cover - faiss is a bench extra
        idx = None
    for _ in range(3):
        t = time.perf_counter()
        hamming_topk(qcodes, codes, k)
        best["hamming"] = min(best.get("hamming", 1e9), time.perf_counter() - t)
        if idx is not None:
            t = time.perf_counter()
            idx.search(qcodes, k)
            best["faiss_binary_flat"] = min(best.get("faiss_binary_flat", 1e9), time.perf_counter() - t)
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
    for _ in range(3):
        t = time.perf_counter()
        emb.search(xq, k, "expectation")
        best["asym_dE"] = min(best.get("asym_dE", 1e9), time.perf_counter() - t)
        t = time.perf_counter()
        emb.search(xq, k, "lower_bound")
        best["asym_dLB"] = min(best.get("asym_dLB", 1e9), time.perf_counter() - t)
        t = time.perf_counter()
        pq.search(xq, k)
        best["pq_adc"] = min(best.get("pq_adc", 1e9), time.perf_counter() - t)
    out["ms_per_query"] = {key: round(1000 * v / nq, 3) for key, v in best.items()}
    if "faiss_binary_flat" in best:
        out["hamming_vs_faiss"] = round(best["hamming"] / best["faiss_binary_flat"], 3)
    out["dE_vs_pq_adc"] = round(best["asym_dE"] / best["pq_adc"], 3)
    out["dLB_vs_pq_adc"] = round(best["asym_dLB"] / best["pq_adc"], 3)
    return out


def _warm_up():
    """Load / compile the scan kernels once, so that the first timed search does not include it."""
    from retrieval.codes.binary import LSH

    rng = np.random.default_rng(0)
    emb = LSH(16, random_state=0).fit(rng.standard_normal((50, 4)))
    emb.add(rng.standard_normal((50, 4)))
    for dist in ("hamming", "expectation"):
        emb.search(rng.standard_normal((2, 4)), 5, distance=dist)


def _binary_draw(data_kind, bench_spec, paths, feats, bits, names, distances, n_base, n_query, n_crops, seed,
                 alphas="train"):
    """One draw of the recall (and, for FVs, mAP) measurement: image split, data and projections from ``seed``."""
    from retrieval.bench import binary as bb

    mAP_eval = None
    full = rankings = None
    if data_kind == "sift":
        train, base, queries = bb.sift_vectors(feats, kind="rootsift", n_base=n_base, n_query=n_query, seed=seed)
    else:
        from retrieval.evaluation.groups import score_groups

        full, crops, owner = bb.fisher_vectors(feats, n_crops=n_crops, seed=seed)
        qi, ti, bi = bb.split_by_image(len(paths), np.random.default_rng(seed))
        train = crops[np.isin(owner, ti)]
        base = crops[np.isin(owner, bi)]
        queries = crops[np.isin(owner, qi)][:n_query]
        names_db = list(bench_spec.images)
        qrows = [names_db.index(q) for q in bench_spec.queries]

        def mAP_eval(emb, dist):
            db = type(emb).__new__(type(emb))
            db.__dict__.update(emb.__dict__)
            db.reset()
            db.add(full)
            _, ids = db.search(full[qrows], len(names_db), dist)
            ranks = {q: [names_db[i] for i in ids[j] if i >= 0] for j, q in enumerate(bench_spec.queries)}
            return round(score_groups(bench_spec, ranks).mAP, 4)

        ref = full[qrows] @ full.T
        rankings = {q: [names_db[i] for i in np.argsort(-ref[j], kind="stable")]
                    for j, q in enumerate(bench_spec.queries)}
        logger.info("draw %d: uncompressed FV mAP on minibench: %.4f", seed,
                    score_groups(bench_spec, rankings).mAP)
    logger.info("draw %d: train %s, base %s, queries %s", seed, train.shape, base.shape, queries.shape)
    gt = bb.euclidean_gt(queries, base)
    rows = _binary_rows(train, base, queries, gt, bits, names, distances, seed, mAP_eval, alphas)
    if data_kind == "fv":
        rows.append({"embedding": "none (uncompressed FV, inner product)", "bits": 32 * full.shape[1],
                     "distance": "l2", "recall@10": 1.0, "recall@100": 1.0, "ms_per_query": None,
                     "mAP": round(score_groups(bench_spec, rankings).mAP, 4)})
    return rows


@bench.command("binary")
@click.option("--data", "data_kind", type=click.Choice(["sift", "fv"]), default="sift", show_default=True,
              help="RootSIFT descriptors or Fisher vectors of the shared real images.")
@click.option("--bits", default="32,64,128,256", show_default=True, help="Comma-separated code sizes.")
@click.option("--embeddings", default=",".join(ALL_EMBEDDINGS), show_default=True,
              help="Comma-separated subset of LSH,LSBC,SH,PCAE,PCAE-RR,PCAE-ITQ.")
@click.option("--with-hat", is_flag=True, help="Also report d_E-hat (Gordo et al. 2014, eq. 27).")
@click.option("--speed", is_flag=True, help="Only the speed comparison (1M codes of 8 bytes, one thread).")
@click.option("--n-codes", default=1_000_000, show_default=True, help="Database codes of the --speed run.")
@click.option("--n-base", default=100_000, show_default=True, help="SIFT base vectors.")
@click.option("--n-query", default=1000, show_default=True, help="Queries (at most; FV queries are the "
              "sub-windows of the query images).")
@click.option("--n-crops", default=40, show_default=True, help="Random sub-windows per image (--data fv).")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1),
              help="Draws averaged (Gordo et al. 2014, sec. 4.2): draw r uses seed + r for the image split, the sampled "
                   "vectors / sub-windows / FV model and the random projections.")
@click.option("--alphas", type=click.Choice(["train", "base"]), default="train", show_default=True,
              help="Sample the d_E statistics (eq. 22-23, 28-29) are estimated on: the training vectors (the "
                   "paper's protocol) or the base vectors being indexed (diagnostic).")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of rows.")
def bench_binary(data_kind, bits, embeddings, with_hat, speed, n_codes, n_base, n_query, n_crops, repeats, alphas,
                 seed, as_json):
    """Recall of the six binary embeddings with Hamming, d_E and d_LB (Gordo et al. 2014), on real data.

    Rows: {"embedding", "bits", "distance", "recall@10", "recall@100", "ms_per_query"} (+ "mAP" on minibench
    for --data fv), each the mean over --repeats draws, with "<key>_sd" (sample standard deviation over the
    draws), "<key>_runs" (per-draw values) and "repeats". recall@R: fraction of queries whose exact Euclidean
    nearest neighbour is in the top R.
    """
    from retrieval.bench import binary as bb

    if speed:
        out = _speed_rows(n=n_codes, seed=seed)
        click.echo(json.dumps(out, indent=None if as_json else 2))
        return
    bits = _int_list(bits)
    names = [e.strip() for e in embeddings.split(",") if e.strip()]
    for n in names:
        if n not in ALL_EMBEDDINGS:
            raise click.BadParameter(f"unknown embedding {n!r}; choose among {', '.join(ALL_EMBEDDINGS)}")
    distances = ["hamming", "expectation", "lower_bound"] + (["expectation_hat"] if with_hat else [])
    bench_spec, paths = bb.minibench_paths()
    feats = bb.load_features(paths)
    _warm_up()
    runs = [_binary_draw(data_kind, bench_spec, paths, feats, bits, names, distances, n_base, n_query, n_crops,
                         seed + r, alphas) for r in range(repeats)]
    rows = bb.aggregate_runs(runs)
    if as_json:
        click.echo(json.dumps(rows))
        return
    keys = [k for k in rows[0] if not k.endswith("_runs")] if rows else []
    click.echo(" | ".join(keys))
    for r in rows:
        click.echo(" | ".join(str(r.get(k)) for k in keys))


@bench.command("kernels")
@click.option("--bits", default="32,64,128,256", show_default=True, help="Comma-separated code sizes.")
@click.option("--n-base", default=100_000, show_default=True, help="Base SIFT vectors.")
@click.option("--n-query", default=1000, show_default=True, help="Queries.")
@click.option("--landmarks", default=1024, show_default=True, help="M, landmarks of KPCA/KLSH/RMMH.")
@click.option("--parts", default="recall,table2,exact,beahk,shift", show_default=True,
              help="Which measurements to run.")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_kernels(bits, n_base, n_query, landmarks, parts, seed, as_json):
    """chi2 kernel search on real SIFT (Bourrier et al. 2015 and Kim and Choi 2017): KPCA+PQ / KPCA+LSH / KLSH / RMMH / BE-AHK recall@R,
    KPCA+PQ pre-processing (Table 2), exact search with the KPCA bound, BE-AHK kernel preservation and
    robustness to a landmark/query distribution shift."""
    from retrieval.bench import binary as bb
    from retrieval.bench import kernels as kb

    bits = _int_list(bits)
    parts = {p.strip() for p in parts.split(",") if p.strip()}
    _, paths = bb.minibench_paths()
    feats = bb.load_features(paths)
    train, base, queries = bb.sift_vectors(feats, kind="l1", n_base=n_base, n_query=n_query, seed=seed)
    logger.info("train %s, base %s, queries %s", train.shape, base.shape, queries.shape)
    out = {"n_base": int(base.shape[0]), "n_query": int(queries.shape[0]), "landmarks": landmarks}
    out.update(kb.run(parts, train, base, queries, bits, landmarks, seed))
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(json.dumps(out, indent=2))
