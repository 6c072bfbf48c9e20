"""CLI command ``retrieval bench cli``: cold ``retrieval query`` wall times."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench, quiet_requested
from retrieval.cli.options import echo_json, json_option


@bench.command("cli")
@click.option("--photos", required=True, type=click.Path(exists=True, file_okay=False),
              help="Photo folder, indexed once per preset (e.g. 1,000 photos).")
@click.option("--preset", "presets", multiple=True, default=["default", "object"], show_default=True,
              help="Preset to measure (repeatable).")
@click.option("--workdir", default="bench-cli", show_default=True, help="Where the indexes go (kept for reruns).")
@click.option("--feature-store", default=None, metavar="DIR", help="Feature store shared by the index builds.")
@click.option("--runs", type=click.IntRange(1, None), default=20, show_default=True,
              help="Cold queries timed per preset (each a new process).")
@json_option("Print the result as JSON.")
@click.pass_context
def bench_cli_cmd(ctx, photos, presets, workdir, feature_store, runs, as_json):
    """Wall time of cold 'retrieval query' commands (a new process each: start, imports, index, search, output),
    median (p50) and p90 over RUNS indexed photos given by path, per preset, with the fixed cost of starting any
    command; the indexes are built once (--workers 1) when missing."""
    from retrieval.bench.cli_speed import bench_cli
    from retrieval.core.progress import callback_for, progress_bar

    with progress_bar(runs, "queries", enabled=not quiet_requested(ctx) and not as_json, unit="q") as bar:
        res = bench_cli(photos, presets=presets, workdir=workdir, feature_store=feature_store, runs=runs,
                        progress=callback_for(bar))
    if as_json:
        echo_json(res)
        return
    s = res["startup"]
    click.echo(f"{res['photos']} photos; 'retrieval --version' p50 {s['version']['p50_s']:.2f} s, "
               f"'retrieval query --help' p50 {s['query_help']['p50_s']:.2f} s")
    click.echo(f"{'preset':10}  {'runs':>4}  {'p50 s':>6}  {'p90 s':>6}  {'min s':>6}  {'max s':>6}  target")
    for name, r in res["presets"].items():
        verdict = "-" if r["target_s"] is None else (f"< {r['target_s']:.1f} s: " +
                                                     ("met" if r["meets_target"] else "missed"))
        click.echo(f"{name:10}  {r['runs']:4d}  {r['p50_s']:6.2f}  {r['p90_s']:6.2f}  {r['min_s']:6.2f}  "
                   f"{r['max_s']:6.2f}  {verdict}")
