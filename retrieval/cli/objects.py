"""CLI commands for object retrieval: bench invfile, bench akm, train akm."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench, train
from retrieval.cli.options import csv_items, echo_json, int_list, json_option, seed_option, threads_option


@bench.command("invfile")
@click.option("--n-images", default=100_000, show_default=True, help="Database images.")
@click.option("--words-per-image", default=3000, show_default=True, help="Descriptors (word draws) per image.")
@click.option("--n-words", default=1_000_000, show_default=True, help="Vocabulary size.")
@click.option("--query-words", default=1000, show_default=True, help="Distinct words per query.")
@click.option("--zipf", "zipf_s", default=1.0, show_default=True, help="Zipf exponent s of the word law.")
@click.option("--n-queries", default=20, show_default=True, help="Queries timed per method.")
@click.option("--top", "-k", "--k", "k", default=200, show_default=True, help="Shortlist length returned per query.")
@seed_option()
@json_option()
def bench_invfile_cmd(n_images, words_per_image, n_words, query_words, zipf_s, n_queries, k, seed, as_json):
    """Inverted-file query time of l1, l2, delta1, delta2 (Zhu et al. 2013, section 3.3) on synthetic Zipf words.

    Methods are interleaved query by query (same index, same queries, one thread), so the ratio
    delta1 / l1 is measured in one run.
    """
    from retrieval.bench.invfile import METHODS, bench_invfile

    res = bench_invfile(n_images=n_images, words_per_image=words_per_image, n_words=n_words, query_words=query_words,
                        zipf_s=zipf_s, n_queries=n_queries, k=k, seed=seed)
    if as_json:
        echo_json(res)
        return
    click.echo(f"{n_images} images x {words_per_image} words (Zipf s={zipf_s}), {n_words} words: "
               f"{res['n_postings']} postings, {res['bytes_per_posting']} B/posting, "
               f"{res['visited_postings_per_query']:.0f} postings visited per query")
    for m in METHODS:
        click.echo(f"  {m:7s} {res['ms_per_query'][m]:8.2f} ms/query (median {res['ms_per_query_median'][m]:.2f})")
    click.echo(f"  delta1/l1 = {res['ratio_delta1_over_l1']:.3f}   delta2/l2 = {res['ratio_delta2_over_l2']:.3f}")


@bench.command("akm")
@click.argument("descriptors", type=click.Path(exists=True, dir_okay=False))
@click.option("--train-words", default=100_000, show_default=True, help="Words of the trained vocabulary.")
@click.option("--train-descriptors", default=1_000_000, show_default=True)
@click.option("--n-iter", default=10, show_default=True)
@click.option("--assign-words", default=1_000_000, show_default=True,
              help="Words of the vocabulary used for the assignment test (0 to skip).")
@click.option("--assign-descriptors", default=3000, show_default=True)
@click.option("--nprobe", default=8, show_default=True, help="Cells probed during training.")
@click.option("--nprobes", default="4,8,16,24,32", show_default=True, help="Cells probed in the assignment curve.")
@click.option("--n-coarse", default=None, type=int, help="Cells of the assignment structure (default: the library's).")
@click.option("--n-components", default=64, show_default=True, help="PCA dimensions of the candidate scan.")
@click.option("--n-candidates", default=16, show_default=True, help="Candidates re-ranked exactly.")
@threads_option(2, "numba and faiss threads.")
@click.option("--faiss", "faiss_methods", default="ivf", show_default=True,
              help="faiss references in the same run: comma list of ivf (IndexIVFFlat over the same cells), hnsw "
                   "(IndexHNSWFlat); empty to skip.")
@click.option("--hnsw-m", default=32, show_default=True)
@click.option("--efs", default="16,32,64,128", show_default=True, help="HNSW efSearch values.")
@seed_option()
@json_option()
def bench_akm_cmd(descriptors, train_words, train_descriptors, n_iter, assign_words, assign_descriptors, nprobe, nprobes,
                  n_coarse, n_components, n_candidates, threads, faiss_methods, hnsw_m, efs, seed, as_json):
    """Time AKM training and the assignment of one image's descriptors; agreement with the exact nearest word.

    DESCRIPTORS is a float32 .npy of shape (n, d) (e.g. RootSIFT). The assignment test holds out the last
    ASSIGN_DESCRIPTORS rows; its vocabulary of ASSIGN_WORDS words is built with `ApproximateKMeans.from_centers`
    over a sample of the other rows (one AKM iteration would cost as much as the training run).
    """
    from retrieval.bench.akm import bench_akm

    res = bench_akm(descriptors, train_words=train_words, train_descriptors=train_descriptors, n_iter=n_iter,
                    assign_words=assign_words, assign_descriptors=assign_descriptors, nprobe=nprobe,
                    nprobes=int_list(nprobes, "--nprobes"), n_coarse=n_coarse, n_components=n_components,
                    n_candidates=n_candidates, threads=threads, faiss_methods=csv_items(faiss_methods),
                    hnsw_m=hnsw_m, efs=int_list(efs, "--efs") if efs.strip() else [], seed=seed)
    if as_json:
        echo_json(res)
        return
    if "train" in res:
        r = res["train"]
        click.echo(f"train {r['words']} words on {r['descriptors']} descriptors, {r['n_iter']} iterations: "
                   f"{r['seconds']:.1f} s; assign {assign_descriptors}: {r['assign_ms']:.1f} ms, "
                   f"agreement {r['agreement_exact']:.3f}")
    if "assign" in res:
        r = res["assign"]
        click.echo(f"assign {r['descriptors']} descriptors to {r['words']} words, {r['threads']} threads "
                   f"({r['n_coarse']} cells, PCA {r['n_components']}, {r['n_candidates']} candidates; structure "
                   f"{r['build_s']:.1f} s; brute force {r['exact_bruteforce_ms']:.0f} ms):")
        for row in r["by_nprobe"]:
            ratio = f", {row['ratio_to_faiss_ivf']:.2f}x faiss IVFFlat" if "ratio_to_faiss_ivf" in row else ""
            click.echo(f"  ours  nprobe {row['nprobe']:3d}: {row['ms']:7.1f} ms, agreement {row['agreement_exact']:.3f}"
                       f"{ratio}")
        for row in r.get("faiss", {}).get("ivf_flat", []):
            click.echo(f"  faiss IVFFlat nprobe {row['nprobe']:3d}: {row['ms']:7.1f} ms, agreement "
                       f"{row['agreement_exact']:.3f}")
        for row in r.get("faiss", {}).get("hnsw_flat", []):
            click.echo(f"  faiss HNSW{r['faiss']['hnsw_M']} efSearch {row['efSearch']:3d}: {row['ms']:7.1f} ms, "
                       f"agreement {row['agreement_exact']:.3f}")


@train.command("akm")
@click.argument("descriptors", type=click.Path(exists=True, dir_okay=False))
@click.option("--words", "n_words", required=True, type=int, help="Vocabulary size.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Output .npz.")
@click.option("--n-iter", default=10, show_default=True)
@click.option("--nprobe", default=8, show_default=True)
@click.option("--max-descriptors", default=1_000_000, show_default=True)
@seed_option()
def train_akm(descriptors, n_words, out, n_iter, nprobe, max_descriptors, seed):
    """Train a large vocabulary (approximate k-means) on a float32 .npy of descriptors (n, d)."""
    import numpy as np

    from retrieval.aggregation.large_vocabulary import ApproximateKMeans

    X = np.load(descriptors, mmap_mode="r", allow_pickle=False)
    if X.ndim != 2:
        raise ValueError(f"{descriptors}: expected a 2-d array (n, d); got shape {X.shape}.")
    rng = np.random.default_rng(seed)
    if X.shape[0] > max_descriptors:
        X = X[np.sort(rng.choice(X.shape[0], max_descriptors, replace=False))]
    v = ApproximateKMeans(n_words, n_iter=n_iter, nprobe=nprobe, random_state=seed).fit(np.asarray(X, np.float32))
    path = v.save(out)
    click.echo(f"{path}: {n_words} words, inertia {v.inertia_:.5f}")


@bench.command("object")
@click.option("--data", "data_root", default="../shared/data", show_default=True,
              type=click.Path(exists=True, file_okay=False), help="The shared data folder.")
@click.option("--feature-store", default=".cache/object-features", show_default=True,
              help="Feature cache folder (hesaff, default parameters).")
@click.option("--words", "n_words", default=20000, show_default=True, help="Vocabulary size.")
@click.option("--assignment", type=click.Choice(["hard", "soft"]), default="hard", show_default=True)
@click.option("--methods", default="l1,delta1", show_default=True, help="Any of l1, l2, delta1, delta2, asmk.")
@click.option("--reranks", default="none,exact,spatial", show_default=True)
@click.option("--alpha", default=0.5, show_default=True, help="alpha_1 / alpha_2 for the method table.")
@click.option("--alphas", default="0.05,0.1,0.2,0.3,0.5,0.7,1,1.5,2,5", show_default=True,
              help="alpha_1 sweep (delta1, no re-ranking); empty to skip.")
@click.option("--compare", type=click.Choice(["asmk"]), default=None,
              help="Also run ASMK* (the asmk package, bench extra) on the same features and boxes.")
@seed_option()
@json_option()
def bench_object_cmd(data_root, feature_store, n_words, assignment, methods, reranks, alpha, alphas, compare, seed,
                     as_json):
    """Box queries (16 homogr pairs + box/box_in_scene) among all shared images: top-1 and box IoU rates.

    The vocabulary is learnt on the database images themselves (the Oxford105K protocol of Zhu et al. 2013).
    Heavy on its first run (feature extraction, vocabulary training).
    """
    from retrieval.bench.objects import bench_object

    try:
        alpha_values = [float(a) for a in csv_items(alphas)]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {alphas!r}", param_hint="--alphas") from None
    res = bench_object(data_root, feature_store=feature_store, n_words=n_words, assignment=assignment,
                       methods=csv_items(methods), reranks=csv_items(reranks), alpha=alpha, alphas=alpha_values,
                       seed=seed, reference=compare == "asmk")
    if as_json:
        echo_json(res)
        return
    click.echo(f"{len(res['queries'])} box queries among {res['n_images']} images, {n_words} words ({assignment})")
    for c in res["configs"]:
        click.echo(f"  {c['method']:7s} rerank={c['rerank']:8s} top1 {c['top1']:.3f}  box IoU>=0.5 "
                   f"{c['box_iou50_top1']:.3f}  mAP {c['mAP']:.3f}")
    if "reference" in res:
        r = res["reference"]
        click.echo(f"  ASMK*   (asmk package)    top1 {r['top1']:.3f}                     mAP {r['mAP']:.3f}")
    for s in res["alpha_sweep"]:
        click.echo(f"  delta1 alpha={s['alpha']:<5g} top1 {s['top1']:.3f}  mAP {s['mAP']:.3f}")
