"""CLI commands for binary codes and kernels: ``bench binary``, ``bench kernels``.

Both run on real descriptors of the shared real photos (``../shared/data/minibench.json``); both are heavy
(minutes on two cores).
"""

from __future__ import annotations

import click

from retrieval.cli.groups import bench
from retrieval.cli.options import csv_items, echo_json, int_list, json_option, seed_option

EMBEDDINGS = ("LSH", "LSBC", "SH", "PCAE", "PCAE-RR", "PCAE-ITQ")  # retrieval.bench.binary.EMBEDDINGS (a test
                                                                  # checks they agree; the bench is imported lazily)


@bench.command("binary")
@click.option("--data", "data_kind", type=click.Choice(["sift", "fv"]), default="sift", show_default=True,
              help="RootSIFT descriptors or Fisher vectors of the shared real images.")
@click.option("--bits", default="32,64,128,256", show_default=True, help="Comma-separated code sizes.")
@click.option("--embeddings", default=",".join(EMBEDDINGS), show_default=True,
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
@seed_option()
@json_option("Print a JSON list of rows (with --speed: one JSON object on one line).")
def bench_binary_cmd(data_kind, bits, embeddings, with_hat, speed, n_codes, n_base, n_query, n_crops, repeats, alphas,
                 seed, as_json):
    """Recall of the six binary embeddings with Hamming, d_E and d_LB (Gordo et al. 2014), on real data.

    Rows: {"embedding", "bits", "distance", "recall@10", "recall@100", "ms_per_query"} (+ "mAP" on minibench
    for --data fv), each the mean over --repeats draws, with "<key>_sd" (sample standard deviation over the
    draws), "<key>_runs" (per-draw values) and "repeats". recall@R: fraction of queries whose exact Euclidean
    nearest neighbour is in the top R.
    """
    bits = int_list(bits)
    names = csv_items(embeddings)
    for n in names:
        if n not in EMBEDDINGS:
            raise click.BadParameter(f"unknown embedding {n!r}; choose among {', '.join(EMBEDDINGS)}",
                                     param_hint="--embeddings")
    from retrieval.bench.binary import bench_binary, speed_rows

    if speed:
        echo_json(speed_rows(n=n_codes, seed=seed), indent=None if as_json else 2)
        return
    rows = bench_binary(data_kind=data_kind, bits=bits, embeddings=names, with_hat=with_hat, n_base=n_base,
                        n_query=n_query, n_crops=n_crops, repeats=repeats, alphas=alphas, seed=seed)
    if as_json:
        echo_json(rows, indent=None)
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
@seed_option()
@json_option("Print one JSON object on one line (default: the same object, indented).")
def bench_kernels_cmd(bits, n_base, n_query, landmarks, parts, seed, as_json):
    """chi2 kernel search on real SIFT (Bourrier et al. 2015 and Kim and Choi 2017): KPCA+PQ / KPCA+LSH / KLSH /
    RMMH / BE-AHK recall@R, KPCA+PQ pre-processing (Table 2), exact search with the KPCA bound, BE-AHK kernel
    preservation and robustness to a landmark/query distribution shift."""
    bits = int_list(bits)
    from retrieval.bench.kernels import bench_kernels

    out = bench_kernels(parts=csv_items(parts), bits=bits, n_base=n_base, n_query=n_query, landmarks=landmarks,
                        seed=seed)
    echo_json(out, indent=None if as_json else 2)
