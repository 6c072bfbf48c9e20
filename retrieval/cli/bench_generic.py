"""CLI command ``retrieval bench generic``: the shipped generic model against a model learnt on the folder, by
folder size (the measure behind ``use_below``, :mod:`retrieval.app.generic_models`)."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench, quiet_requested
from retrieval.cli.options import echo_json, json_option, workers_option


@bench.command("generic")
@click.option("--preset", "presets", multiple=True, default=["default", "compact", "accurate", "object"],
              show_default=True, help="Preset with a generic model (repeatable).")
@click.option("--set", "sets", multiple=True, type=click.Choice(["holidays805", "ukbench400"]),
              default=["holidays805", "ukbench400"], show_default=True, help="Real set (repeatable).")
@click.option("--n", "sizes", type=click.IntRange(2), multiple=True, default=[25, 50, 100, 200, 400, 800],
              show_default=True, help="Photos indexed (repeatable; sizes above a set's are skipped).")
@click.option("--data", "data_dir", default="../shared/data", show_default=True,
              help="Shared data folder (real/holidays805.json, real/ukbench400.json and their photos).")
@click.option("--workdir", default=".cache/bench-generic", show_default=True,
              help="Scratch folder: the indexes (removed after each measure) and the stand-in models.")
@click.option("--feature-store", default=None, metavar="DIR",
              help="Feature store shared by every index (default: WORKDIR/features).")
@workers_option("Extraction processes.")
@json_option("Print one JSON object per row, one per line.")
@click.pass_context
def bench_generic_cmd(ctx, presets, sets, sizes, data_dir, workdir, feature_store, workers, as_json):
    """mAP of the generic model and of a model learnt on the folder, for the first N photos of each real set
    (whole groups, Holidays protocol), and the indexing time the generic model saves; then, per preset, the
    largest N up to which the generic model is at least as good everywhere (docs/results.md "Generic model or the
    folder's own"). On Holidays, whose photos the shipped models learnt from, the shipped model's mAP is shown but
    the verdict takes a stand-in learnt the same way from the Holidays photos outside the N (from the UKBench and
    Oxford photos at 800, a stand-in also shown at every size)."""
    from retrieval.bench.generic_threshold import bench_generic, crossover

    rows = []
    talk = not as_json and not quiet_requested(ctx)
    if talk:
        click.echo("| preset | set | photos | groups | shipped | stand-in: other sets | stand-in: rest of set | "
                   "folder's own | generic >= own | indexing s generic / own | training s |")
        click.echo("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in bench_generic(data_dir, workdir, presets=presets, sets=sets, sizes=sorted(set(sizes)),
                             feature_store=feature_store, workers=workers):
        rows.append(row)
        if as_json:
            echo_json(row, indent=None)
        elif talk:
            click.echo(table_row(row))
    for preset in presets:
        n = crossover(rows, preset)
        if as_json:
            echo_json({"preset": preset, "generic_at_least_as_good_up_to": n}, indent=None)
        else:
            click.echo(f"{preset}: generic at least as good up to "
                       + (f"{n} photos" if n is not None else "no size measured"))


def table_row(row: dict) -> str:
    """One Markdown table row of a :func:`retrieval.bench.generic_threshold.bench_generic` result."""
    def cell(key, size=None):
        if row[key] is None:
            return "-"
        return f"{row[key]:.4f}" + (f" ({row[size]})" if size else "")

    shipped = cell("map_shipped") + (" (trained on these photos)" if row["overlap"] else "")
    return (f"| {row['preset']} | {row['set']} | {row['n']} | {row['groups']} | {shipped} | "
            f"{cell('map_other_sets', 'other_images')} | {cell('map_rest_of_set', 'rest_images')} | "
            f"{row['map_folder']:.4f} | {'yes' if row['map_generic'] >= row['map_folder'] else 'no'} | "
            f"{row['index_s_generic']:.1f} / {row['index_s_folder']:.1f} | {row['train_s']:.1f} |")
