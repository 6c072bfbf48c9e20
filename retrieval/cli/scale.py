"""Options and helpers of the commands that run on a Dask cluster (``--cluster``, ``--shards``), and
``retrieval bench scale`` (docs/scaling.md)."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench, flag_of
from retrieval.cli.options import json_option


def cluster_option(help: str = "Run the extraction (and encoding) on the Dask cluster whose scheduler is at ADDRESS "
                               "(tcp://HOST:PORT; default: $RETRIEVAL_DASK_SCHEDULER); workers must reach the "
                               "photos and the index folder at the same paths."):
    """``--cluster ADDRESS`` (parameter ``cluster``)."""
    return click.option("--cluster", "cluster", default=None, metavar="ADDRESS", help=help)


def shards_option(f):
    """``--shards S`` (parameter ``shards``): split a new index's searchable state into S shards."""
    return click.option("--shards", type=click.IntRange(1, 4096), default=None, metavar="S",
                        help="Split a new index's codes and ids into S shards by a stable hash of the image id "
                             "(global presets, accurate and object; fixed at creation) [default: 1].")(f)


def open_client(ctx, address):
    """A connected ``distributed.Client`` for ``--cluster`` / ``$RETRIEVAL_DASK_SCHEDULER`` (None without one),
    closed with the command's context; an unreachable scheduler is one line and exit 1 (within about 5 s)."""
    from retrieval.app.cluster import ClusterError, connect, scheduler_address

    address = scheduler_address(address)
    if address is None:
        return None
    try:
        client = connect(address)
    except ClusterError as exc:
        raise click.ClickException(exc.worded(flag_of)) from None
    ctx.call_on_close(client.close)
    return client


@bench.command("scale")
@click.option("--images", "n_images", type=click.IntRange(2, None), default=24, show_default=True,
              help="Photos of the minibench extracted per run.")
@click.option("--minibench", "minibench_json", default=None, metavar="FILE",
              help="minibench.json [default: ../shared/data/minibench.json].")
@click.option("--codes", "n_codes", type=click.IntRange(1000, None), default=10_000_000, show_default=True,
              help="Synthetic IVFADC codes of the sharded search benchmark.")
@click.option("--queries", type=click.IntRange(1, None), default=100, show_default=True)
@click.option("--skip-extract", is_flag=True, help="Only the sharded search benchmark.")
@click.option("--skip-search", is_flag=True, help="Only the extraction benchmark.")
@json_option("Print the figures as JSON.")
def bench_scale_cmd(n_images, minibench_json, n_codes, queries, skip_extract, skip_search, as_json):
    """Extraction throughput on a local Dask cluster of 1 and 2 workers (images/s, ratio to raw pyhesaff in the
    same run), and the search of N synthetic IVFADC codes split over 2 worker-held shards vs one process
    (per-query latency and merge overhead)."""
    import json

    from retrieval.bench.scale import extraction_scaling, format_report, sharded_search

    out = {}
    if not skip_extract:
        out["extraction"] = extraction_scaling(n_images, minibench_json, progress=not as_json)
    if not skip_search:
        out["search"] = sharded_search(n_codes, queries, progress=not as_json)
    click.echo(json.dumps(out, indent=2) if as_json else format_report(out))
