"""CLI commands for aggregation: train vocab, bench aggregate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from retrieval.cli.groups import bench, train
from retrieval.cli.options import echo_json, json_option, seed_option, workers_option


def collect_images(inputs) -> list[Path]:
    """Image files among ``inputs`` (files, or folders searched recursively for
    :func:`retrieval.features.image.is_image_name`), sorted, duplicates removed."""
    from retrieval.features.image import is_image_name

    out = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and is_image_name(q.name))
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
@workers_option()
@click.option("--cache", type=click.Path(file_okay=False), default=None,
              help="Feature store folder: reuse and keep extracted features.")
@click.option("--skip-errors", is_flag=True, help="Skip unreadable images instead of stopping.")
@seed_option()
@click.pass_context
def train_vocab(ctx, images, out, kind, k, pca_dim, pca_out, no_rootsift, detector, max_side, max_samples, workers,
                cache, skip_errors, seed):
    """Learn a visual vocabulary (k-means or GMM) from IMAGES (files or folders).

    Extracts local features (Hessian-affine + SIFT by default), applies RootSIFT and a local PCA, then trains
    the vocabulary (Jegou et al. 2012, sec. III). Writes OUT and, with --pca-dim > 0, the local PCA next to it.
    """
    from retrieval.app.training import UnreadableImageError, image_descriptors, train_vocabulary
    from retrieval.core.progress import callback_for, progress_bar
    from retrieval.features import FeatureExtractor
    from retrieval.features.store import FeatureStore

    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    paths = collect_images(images)
    if not paths:
        raise click.UsageError("no image files found in IMAGES.")
    extractor = FeatureExtractor(detector, max_side=max_side)
    with progress_bar(len(paths), "extracting", enabled=not quiet, unit="img") as bar:
        try:
            X, failed = image_descriptors(paths, extractor, rootsift=not no_rootsift, workers=workers,
                                          store=FeatureStore(cache) if cache else None, skip_errors=skip_errors,
                                          progress=callback_for(bar))
        except UnreadableImageError as exc:
            raise click.ClickException(f"{exc} (use --skip-errors to go on)") from None
    click.echo(f"{len(paths) - len(failed)} images, {X.shape[0]} descriptors of {X.shape[1]} dimensions", err=True)
    with progress_bar(None, "EM", enabled=not quiet and kind == "gmm", unit="it") as bar:
        trained = train_vocabulary(X, kind=kind, k=k, pca_dim=pca_dim, max_samples=max_samples, seed=seed,
                                   progress=callback_for(bar))
    written = trained.model.save(out)
    pca_path = None
    if trained.pca is not None:
        pca_path = trained.pca.save(Path(pca_out) if pca_out else Path(out).with_suffix("").with_suffix(".localpca.npz"))
    summary = {"model": str(written), "kind": kind, "k": k, "dimension": trained.dimension,
               "n_images": len(paths) - len(failed), "n_descriptors": int(X.shape[0]),
               "train_seconds": round(trained.seconds, 2), "local_pca": None if pca_path is None else str(pca_path)}
    click.echo(json.dumps(summary, ensure_ascii=False))


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
@seed_option()
@json_option()
def bench_aggregate_cmd(n_images, T, d, K, repeats, gmm_samples, gmm_components, gmm_max_iter, seed, as_json):
    """Fisher-vector encoding time against VLFeat (cyvlfeat) in the same run, and GMM training time.

    Heavy: minutes on two cores.
    """
    from retrieval.bench.aggregation import bench_aggregate

    result = bench_aggregate(n_images=n_images, T=T, d=d, K=K, repeats=repeats, gmm_samples=gmm_samples,
                             gmm_components=gmm_components, gmm_max_iter=gmm_max_iter, seed=seed)
    if as_json:
        echo_json(result)
        return
    f = result["fisher"]
    click.echo(f"Fisher K={K}, {T} x {d} per image: ours {1e3 * f['seconds_per_image']['ours_means']:.2f} ms "
               f"(means), {1e3 * f['seconds_per_image']['ours_means_variances']:.2f} ms (means+variances); "
               f"VLFeat {1e3 * f['seconds_per_image']['vlfeat']:.2f} ms; ratio {f['ratio_means_to_vlfeat']:.2f} / "
               f"{f['ratio_means_variances_to_vlfeat']:.2f}; relative difference "
               f"{f['relative_difference_to_vlfeat']:.1e}")
    if "gmm" in result:
        g = result["gmm"]
        click.echo(f"GMM K={g['K']} on {g['n_samples']} x {g['d']}: {g['seconds']:.1f} s, {g['n_iter']} iterations")
