"""CLI command ``retrieval bench duplicates``: accuracy of the duplicate kinds on a labelled set of real photos, and
photos per second of ``retrieval duplicates`` at library sizes."""

from __future__ import annotations

import click

from retrieval.cli.groups import bench, quiet_requested
from retrieval.cli.options import echo_json, json_option, workers_option


@bench.command("duplicates")
@click.option("--n", "ns", type=click.IntRange(1), multiple=True, default=[1000, 10000], show_default=True,
              help="Photos in the index (repeatable: one speed result per N).")
@click.option("--labelled/--no-labelled", default=True, show_default=True,
              help="Also build the labelled set (100 real photos with edited copies, other shots, unrelated photos) "
                   "and score every kind.")
@click.option("--preset", default="default", show_default=True, help="Preset of the index.")
@click.option("--workdir", default=".cache/bench-duplicates", show_default=True,
              help="Scratch folder: the feature store, the generated photos and one index per N (kept between "
                   "runs); the labelled set is rebuilt in it.")
@click.option("--data", "data_dir", default="../shared/data", show_default=True,
              help="Shared data folder (real/holidays805, real/ukbench400, real/oxford133).")
@click.option("--sources", "n_sources", type=click.IntRange(1), default=100, show_default=True,
              help="Source photos of the labelled set.")
@click.option("--again/--no-again", default=True, show_default=True,
              help="Time a second run in the same process after the first.")
@workers_option("Extraction processes.")
@json_option("Print one JSON object per result, one per line.")
@click.pass_context
def bench_duplicates_cmd(ctx, ns, labelled, preset, workdir, data_dir, n_sources, again, workers, as_json):
    """Score 'retrieval duplicates' on a labelled set built from real photos (exact and near precision and recall,
    scene pairs labelled near, unrelated pairs grouped, UKBench shots labelled near), then time it on indexes of N
    photos: the real photos, 5 % edited copies of them, and synthetic distinct photos beyond the real ones
    (docs/benchmarks.md "Duplicates"): the first run on a newly opened index (codes kept by the sync), then again."""
    import shutil
    from pathlib import Path

    from retrieval.bench.duplicates import bench_speed, evaluate_labelled

    talk = not as_json and not quiet_requested(ctx)
    if labelled:
        work = Path(workdir) / f"labelled-{preset}"
        shutil.rmtree(work, ignore_errors=True)
        res = evaluate_labelled(data_dir, work, preset=preset, n_sources=n_sources, workers=workers,
                                feature_store=Path(workdir) / "features")
        if as_json:
            echo_json({"labelled": res}, indent=None)
        else:
            e, n = res["exact"], res["near"]
            click.echo(f"labelled set ({res['photos']} photos, preset {preset}): exact precision {e['precision']:.3f} "
                       f"recall {e['recall']:.3f}; near precision {n['precision']:.4f} recall {n['recall']:.4f} "
                       f"({n['pairs']} pairs); scene pairs labelled near/exact {res['scene_labelled_near_or_exact']}; "
                       f"scene recall {res['scene']['recall']:.3f}; unrelated pairs in a group "
                       f"{res['unrelated_sampled_in_one_group']} of {res['unrelated_sampled']}; UKBench different "
                       f"shots near/exact {res['ukbench_shots_near_or_exact']} of {res['ukbench_shot_pairs']}; "
                       f"{res['seconds']:.1f} s")
    for row in bench_speed(data_dir, workdir, sizes=ns, preset=preset, workers=workers, again=again):
        if as_json:
            echo_json({"speed": row}, indent=None)
        elif talk or not quiet_requested(ctx):
            c = row["candidates"]
            search = (f"inverted file of {c['cells']} cells: {c['recall']:.3f} of a sample's exact candidates found, "
                      f"{c['recall_above']:.4f} of those of similarity >= 0.6" if c["inverted_file"]
                      else "every code compared")
            repeat = (f", again {row['again_photos_per_s']:.1f} ({row['again_s']:.1f} s)" if "again_s" in row else "")
            click.echo(f"N={row['n']}: {row['first_photos_per_s']:.1f} photos/s ({row['first_s']:.1f} s){repeat}; "
                       f"groups {row['groups']}; candidates: {search}; indexing {row['index_s']:.0f} s, of which "
                       f"the duplicate codes {row['codes_s']:.0f} s")
