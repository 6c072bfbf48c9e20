"""CLI commands for compression and search: bench pq, bench ivfadc."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench
from retrieval.cli.options import echo_json, json_option, seed_option, threads_option


def _bench_options(fn):
    opts = [
        click.option("--n", "n", type=click.IntRange(0), default=1_000_000, show_default=True,
                     help="Database vectors (0 with --data rootsift: every descriptor not held out)."),
        click.option("--d", "d", type=click.IntRange(1), default=128, show_default=True, help="Dimension (gaussian, synthetic)."),
        click.option("--M", "M", type=click.IntRange(1), default=16, show_default=True, help="Sub-quantisers."),
        click.option("--nbits", type=click.IntRange(1, 16), default=8, show_default=True, help="Bits per sub-code."),
        click.option("--nlist", type=click.IntRange(1), default=1024, show_default=True, help="Inverted lists (ivfadc)."),
        click.option("--nprobe", type=click.IntRange(1), default=16, show_default=True, help="Lists visited (ivfadc)."),
        click.option("--top", "-k", "--k", "k", type=click.IntRange(1), default=100, show_default=True,
                     help="Results per query (at least 100 are retrieved for recall@100)."),
        click.option("--nq", type=click.IntRange(1), default=1000, show_default=True, help="Queries."),
        click.option("--ntrain", type=click.IntRange(1), default=100_000, show_default=True, help="Learning vectors."),
        click.option("--n-iter", type=click.IntRange(1), default=25, show_default=True,
                     help="k-means iterations (both libraries)."),
        click.option("--compare", type=click.Choice(["faiss", "none"]), default="none", show_default=True,
                     help="Reference built and searched in the same run."),
        threads_option(1, "Search threads (ours over queries; faiss via omp_set_num_threads)."),
        click.option("--synthetic-codes", is_flag=True, help="Inject random codes (speed and memory only, no recall)."),
        click.option("--data", "data_", type=click.Choice(["gaussian", "rootsift"]), default="gaussian",
                     show_default=True, help="Gaussian vectors, or RootSIFT of the shared real images (cached)."),
        click.option("--repeats", type=click.IntRange(1), default=3, show_default=True,
                     help="Interleaved timing repetitions; the minimum per library is reported."),
        seed_option(),
        click.option("--train-seeds", type=click.IntRange(1), default=1, show_default=True,
                     help="Train both libraries this many times with different k-means seeds and report the mean "
                          "recall (and its s.d.) over the trainings."),
        click.option("--cache-dir", type=click.Path(file_okay=False), default=".cache", show_default=True,
                     help="Where extracted RootSIFT descriptors are cached."),
        json_option("Print one JSON object (ours, faiss, ratio)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _run_and_print(kind, as_json, data_, synthetic_codes, **kw):
    from retrieval.bench.indexing import run

    res = run(kind, data=data_, synthetic=synthetic_codes, **kw)
    if as_json:
        echo_json(res, sort_keys=True)
        return
    p = res["params"]
    click.echo(f"{kind}: n={p['n']} d={p['d']} M={p['M']} nbits={p['nbits']}"
               + (f" nlist={p['nlist']} nprobe={p['nprobe']}" if kind == "ivfadc" else "")
               + f" nq={p['nq']} threads={p['threads']} data={'synthetic codes' if p['synthetic_codes'] else p['data']}")
    for name in ("ours", "faiss"):
        if name not in res:
            continue
        r = res[name]
        line = f"  {name:5s} {r['ms_per_query']:9.3f} ms/query  {r['bytes_per_vector']} B/vector"
        if "recall@1" in r:
            line += "  recall@1/10/100 " + " ".join(f"{r[f'recall@{x}']:.4f}" for x in (1, 10, 100))
            if "recall@1_sd" in r:
                line += " (s.d. over trainings " + " ".join(f"{r[f'recall@{x}_sd']:.4f}" for x in (1, 10, 100)) + ")"
        if "mse" in r:
            line += f"  MSE {r['mse']:.5g}"
        if "rss_bytes" in r:
            line += (f"  RSS {r['rss_bytes'] / 2**30:.3f} GiB for {r['codes_plus_ids_bytes'] / 2**30:.3f} GiB "
                     f"of codes+ids ({r['rss_over_payload']:.3f}x; growth while filling "
                     f"{r['rss_growth_over_payload']:.3f}x)")
        click.echo(line)
    if "ratio" in res:
        click.echo(f"  ratio ours/faiss time: {res['ratio']:.3f}")


@bench.command("pq")
@_bench_options
def bench_pq(**kw):
    """Exhaustive ADC: our ProductQuantizer against faiss IndexPQ (same data, same run)."""
    kw.pop("nlist")
    kw.pop("nprobe")
    _run_and_print("pq", nlist=0, nprobe=0, **kw)


@bench.command("ivfadc")
@_bench_options
def bench_ivfadc(**kw):
    """IVFADC: our IVFADC against faiss IndexIVFPQ (same data, same run)."""
    _run_and_print("ivfadc", **kw)
