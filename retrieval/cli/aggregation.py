"""CLI commands for aggregation: train vocab, bench aggregate."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import click

from retrieval.cli.groups import bench, train

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}


def collect_images(inputs) -> list[Path]:
    """Image files among ``inputs`` (files, or folders searched recursively), sorted, duplicates removed."""
    out = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in IMAGE_SUFFIXES)
        elif p.is_file():
            out.append(p)
        else:
            raise click.BadParameter(f"{p}: no such file or folder.", param_hint="IMAGES")
    seen, uniq = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            uniq.append(p)
    return uniq


@train.command("vocab")
@click.argument("images", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Vocabulary model file (.npz) to write.")
@click.option("--kind", type=click.Choice(["kmeans", "gmm"]), default="gmm", show_default=True,
              help="k-means (BoW, VLAD) or diagonal GMM (Fisher vectors).")
@click.option("-k", "--size", "k", type=int, default=64, show_default=True, help="Number of words / Gaussians.")
@click.option("--pca-dim", type=int, default=64, show_default=True,
              help="Reduce RootSIFT descriptors to this many dimensions by local PCA first (0: no PCA).")
@click.option("--pca-out", type=click.Path(dir_okay=False), default=None,
              help="Where to write the local PCA (default: OUT with suffix .localpca.npz).")
@click.option("--no-rootsift", is_flag=True, help="Use raw SIFT instead of RootSIFT.")
@click.option("--detector", default="hesaff", show_default=True, help="Local feature detector.")
@click.option("--max-side", type=int, default=1024, show_default=True, help="Working image size.")
@click.option("--max-samples", type=int, default=1_000_000, show_default=True,
              help="Train on at most this many descriptors (random subset).")
@click.option("--workers", type=int, default=None, help="Extraction processes (default: all cores).")
@click.option("--cache", type=click.Path(file_okay=False), default=None,
              help="Feature store folder: reuse and keep extracted features.")
@click.option("--skip-errors", is_flag=True, help="Skip unreadable images instead of stopping.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.pass_context
def train_vocab(ctx, images, out, kind, k, pca_dim, pca_out, no_rootsift, detector, max_side, max_samples, workers,
                cache, skip_errors, seed):
    """Learn a visual vocabulary (k-means or GMM) from IMAGES (files or folders).

    Extracts local features (Hessian-affine + SIFT by default), applies RootSIFT and a local PCA, then trains
    the vocabulary (Jegou et al. 2012, sec. III). Writes OUT and, with --pca-dim > 0, the local PCA next to it.
    """
    import numpy as np

    from retrieval.aggregation import GMMVocabulary, KMeansVocabulary
    from retrieval.core.progress import callback_for, progress_bar
    from retrieval.features import FeatureExtractor, root_sift
    from retrieval.features.parallel import extract_many
    from retrieval.features.pca import LocalPCA

    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    paths = collect_images(images)
    if not paths:
        raise click.UsageError("no image files found in IMAGES.")
    extractor = FeatureExtractor(detector, max_side=max_side)
    store = None
    if cache:
        from retrieval.features.store import FeatureStore

        store = FeatureStore(cache)
    descs, failed = [], []
    with progress_bar(len(paths), "extracting", enabled=not quiet, unit="img") as bar:
        for i, res in extract_many(paths, extractor, workers=workers, progress=callback_for(bar), store=store):
            if isinstance(res, Exception):
                if not skip_errors:
                    raise click.ClickException(f"{paths[i]}: {res} (use --skip-errors to go on)")
                failed.append(str(paths[i]))
                continue
            d = res.descriptors
            if len(d):
                descs.append(np.asarray(d, np.float32) if no_rootsift else root_sift(d))
    if failed:
        logger.warning("skipped %d unreadable images", len(failed))
    if not descs:
        raise click.ClickException("no local features found in the given images.")
    X = np.concatenate(descs)
    click.echo(f"{len(paths) - len(failed)} images, {X.shape[0]} descriptors of {X.shape[1]} dimensions", err=True)
    pca_path = None
    if pca_dim:
        pca = LocalPCA(pca_dim, random_state=seed).fit(X)
        X = pca.transform(X).astype(np.float32)
        pca_path = Path(pca_out) if pca_out else Path(out).with_suffix("").with_suffix(".localpca.npz")
    t0 = time.time()
    if kind == "kmeans":
        model = KMeansVocabulary(k, max_samples=max_samples, random_state=seed).fit(X)
    else:
        with progress_bar(None, "EM", enabled=not quiet, unit="it") as bar:
            model = GMMVocabulary(k, max_samples=max_samples, random_state=seed).fit(X, progress=callback_for(bar))
    written = model.save(out)
    if pca_path is not None:
        pca_path = pca.save(pca_path)
    summary = {"model": str(written), "kind": kind, "k": k, "dimension": int(X.shape[1]),
               "n_images": len(paths) - len(failed), "n_descriptors": int(X.shape[0]),
               "train_seconds": round(time.time() - t0, 2), "local_pca": None if pca_path is None else str(pca_path)}
    click.echo(json.dumps(summary))


def _fisher_bench(n_images, T, d, K, seed, repeats):
    import numpy as np
    from cyvlfeat.fisher import fisher

    from retrieval.aggregation import FisherVector

    rng = np.random.default_rng(seed)
    w = rng.random(K) + 0.5
    w = (w / w.sum()).astype(np.float32)
    mu = rng.standard_normal((K, d)).astype(np.float32)
    var = (0.2 + rng.random((K, d))).astype(np.float32)
    comp = rng.choice(K, size=(n_images, T), p=w / w.sum())
    imgs = [(mu[c] + rng.standard_normal((T, d)) * np.sqrt(var[c]) * 1.5).astype(np.float32) for c in comp]

    class G:
        weights_, means_, covariances_ = w, mu, var

    fv_means = FisherVector.from_gmm(G)
    fv_both = FisherVector.from_gmm(G, variances=True)
    best = {"vlfeat": np.inf, "ours_means": np.inf, "ours_means_variances": np.inf}
    for _ in range(repeats):  # interleaved, best of `repeats`
        t = time.perf_counter()
        ref = [fisher(x, mu, var, w, improved=True) for x in imgs]
        best["vlfeat"] = min(best["vlfeat"], time.perf_counter() - t)
        t = time.perf_counter()
        fv_means.transform(imgs)
        best["ours_means"] = min(best["ours_means"], time.perf_counter() - t)
        t = time.perf_counter()
        ours = fv_both.transform(imgs)
        best["ours_means_variances"] = min(best["ours_means_variances"], time.perf_counter() - t)
    ref = np.stack(ref)
    err = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    per = {k: v / n_images for k, v in best.items()}
    return {
        "K": K, "d": d, "descriptors_per_image": T, "n_images": n_images, "repeats": repeats,
        "seconds_per_image": {k: round(v, 6) for k, v in per.items()},
        "ratio_means_to_vlfeat": round(per["ours_means"] / per["vlfeat"], 3),
        "ratio_means_variances_to_vlfeat": round(per["ours_means_variances"] / per["vlfeat"], 3),
        "relative_difference_to_vlfeat": err,
        "note": "cyvlfeat fisher always computes means and variances (2Kd), improved = sqrt + L2",
    }


def _gmm_bench(n, d, K, seed, max_iter):
    import numpy as np

    from retrieval.aggregation import GMMVocabulary

    rng = np.random.default_rng(seed)
    C = rng.standard_normal((4 * K, d)).astype(np.float32) * 1.5
    X = np.empty((n, d), np.float32)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        X[s:s + m] = C[rng.integers(0, len(C), m)] + rng.standard_normal((m, d)).astype(np.float32)
    t = time.perf_counter()
    g = GMMVocabulary(K, max_iter=max_iter, random_state=seed).fit(X)
    secs = time.perf_counter() - t
    return {"K": K, "d": d, "n_samples": n, "seconds": round(secs, 2), "n_iter": g.n_iter_,
            "converged": bool(g.converged_), "mean_log_likelihood": round(g.lower_bound_, 4),
            "target_seconds": 180}


@bench.command("aggregate")
@click.option("--images", "n_images", type=int, default=40, show_default=True, help="Images encoded per timing.")
@click.option("--descriptors", "T", type=int, default=3000, show_default=True, help="Descriptors per image.")
@click.option("--dim", "d", type=int, default=64, show_default=True, help="Descriptor dimension.")
@click.option("-k", "--components", "K", type=int, default=64, show_default=True, help="Gaussians of the FV.")
@click.option("--repeats", type=int, default=3, show_default=True, help="Timings (best is kept).")
@click.option("--gmm-samples", type=int, default=1_000_000, show_default=True,
              help="Training set of the GMM timing (0 skips it).")
@click.option("--gmm-components", type=int, default=256, show_default=True)
@click.option("--gmm-max-iter", type=int, default=100, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_aggregate(n_images, T, d, K, repeats, gmm_samples, gmm_components, gmm_max_iter, seed, as_json):
    """Fisher-vector encoding time against VLFeat (cyvlfeat) in the same run, and GMM training time.

    Heavy: minutes on two cores.
    """
    import os

    result = {"benchmark": "aggregate", "cpu_count": os.cpu_count(),
              "fisher": _fisher_bench(n_images, T, d, K, seed, repeats)}
    if gmm_samples:
        result["gmm"] = _gmm_bench(gmm_samples, d, gmm_components, seed, gmm_max_iter)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    f = result["fisher"]
    click.echo(f"Fisher K={K}, {T} x {d} per image: ours {1e3 * f['seconds_per_image']['ours_means']:.2f} ms "
               f"(means), {1e3 * f['seconds_per_image']['ours_means_variances']:.2f} ms (means+variances); "
               f"VLFeat {1e3 * f['seconds_per_image']['vlfeat']:.2f} ms; ratio {f['ratio_means_to_vlfeat']:.2f} / "
               f"{f['ratio_means_variances_to_vlfeat']:.2f}")
    if "gmm" in result:
        g = result["gmm"]
        click.echo(f"GMM K={g['K']} on {g['n_samples']} x {g['d']}: {g['seconds']:.1f} s, {g['n_iter']} iterations")
