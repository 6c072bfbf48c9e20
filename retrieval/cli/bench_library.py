"""CLI command ``retrieval bench library``: a library of N photos on one machine."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench, quiet_requested
from retrieval.cli.options import echo_json, json_option, workers_option

COLUMNS = [
    ("n", "N", "{:d}"), ("add_photos_per_s", "add/s", "{:.0f}"), ("nochange_sync_s", "sync0 s", "{:.2f}"),
    ("walk_stat_s", "walk s", "{:.2f}"), ("add1_s", "add1 s", "{:.2f}"), ("add1000_s", "addK s", "{:.2f}"),
    ("remove1000_s", "rmK s", "{:.2f}"), ("merge_s", "merge s", "{:.2f}"), ("writer_peak_rss_mb", "wRSS MB", "{:.0f}"),
    ("reader_rss_mb", "rRSS MB", "{:.0f}"), ("first_answer_s", "first s", "{:.2f}"),
    ("query_p50_ms", "q50 ms", "{:.1f}"), ("query_p95_ms", "q95 ms", "{:.1f}"),
    ("query_verified_p50_ms", "qv50 ms", "{:.0f}"), ("api_info_ms", "info ms", "{:.1f}"),
    ("api_page_ms", "page ms", "{:.1f}"), ("search_bytes_per_photo", "search B", "{:.0f}"),
    ("feature_bytes_per_photo", "feat B", "{:.0f}"),
]
"""The columns of the text table: (key, header, format); a missing figure (null) prints as ``-``."""


def _cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


@bench.command("library")
@click.option("--n", "ns", type=click.IntRange(1), multiple=True, default=[1000], show_default=True,
              help="Photos in the library (repeatable: one result per N).")
@click.option("--preset", default="default", show_default=True, help="Preset of the index.")
@click.option("--workdir", default=".cache/bench-library", show_default=True,
              help="Scratch folder, kept between runs: the feature store of the source photos, the replica files "
                   "and their feature-store entries (reused), and one index per N (rebuilt).")
@click.option("--data", "data_dir", default="../shared/data", show_default=True,
              help="Shared data folder (real/holidays805, real/ukbench400, real/oxford133).")
@click.option("--queries", type=click.IntRange(1), default=50, show_default=True,
              help="Source photos searched, with and without verification.")
@click.option("--add-many", type=click.IntRange(1), default=1000, show_default=True, hidden=True,
              help="Photos of the 'add 1,000' and 'remove 1,000' steps (tests use fewer).")
@click.option("--sync-limit", type=click.IntRange(1), default=None, hidden=True,
              help="Replicas synced with perturbed features before bulk injection [default: 10,000] (tests).")
@click.option("--sources", "n_sources", type=click.IntRange(1), default=None, hidden=True,
              help="Use only this many source photos [default: all 1,338] (tests).")
@click.option("--full-size", is_flag=True,
              help="Replicate only the photos of the shared data that are not thumbnails (the 112 of minibench and "
                   "the 133 of Oxford, 1,024 px after the presets' resize).")
@click.option("--compact-features", type=click.Choice(["0", "16", "32"]), default="0", show_default=True,
              help="The index keeps its features in compact form (retrieval index --compact-features): its synced "
                   "photos are verified on it.")
@workers_option("Extraction processes for the source photos (once per workdir).")
@json_option("Print one JSON object per N, one per line.")
@click.pass_context
def bench_library_cmd(ctx, ns, preset, workdir, data_dir, queries, add_many, sync_limit, n_sources, full_size,
                      compact_features, workers, as_json):
    """Build an index of N photos (real photos replicated under distinct names with perturbed features; bulk
    injection beyond 10,000 for global presets, docs/benchmarks.md) and measure, through the product's own
    paths: photos added per second, a sync with nothing changed (and the walk and stat of the tree alone),
    adding 1 and 1,000 photos, removing 1,000, a merge, bytes per photo, peak RSS of the writer and of a
    reader, time to the first answer of a new process, query p50 / p95 with and without verification, and
    /api/info and a page of /api/images from 'retrieval serve'."""
    from retrieval.bench.library import SYNC_LIMIT, bench_library

    talk = not as_json and not quiet_requested(ctx)
    rows = []
    if not as_json:
        click.echo("  ".join(f"{h:>{max(len(h), 6)}}" for _, h, _ in COLUMNS))
    for res in bench_library(ns, preset=preset, workdir=workdir, data_dir=data_dir, queries=queries,
                             add_many=add_many, sync_limit=sync_limit or SYNC_LIMIT, sources=n_sources,
                             workers=workers, full_size=full_size, compact_features=int(compact_features),
                             progress=(lambda m: click.echo(m, err=True)) if talk else None):
        rows.append(res)
        if as_json:
            echo_json(res, indent=None)
        else:
            click.echo("  ".join(f"{_cell(res.get(k), f):>{max(len(h), 6)}}" for k, h, f in COLUMNS))
    if not as_json and any(r["merge_s"] is None for r in rows):
        click.echo(f"merge: {rows[0].get('merge_note', 'not measured')}", err=True)
