"""CLI commands for evaluation: eval score, eval run, data download."""

from __future__ import annotations

import json
import math

import click

from retrieval.cli.groups import bench, data, eval_
from retrieval.cli.options import json_option, workers_option
from retrieval.cli.suggest import check_preset_name

PROTOCOLS = ("holidays", "oxford5k", "paris6k", "roxford5k", "rparis6k")


def _dump(obj) -> str:
    def clean(v):
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(obj), indent=2)


def score_results(protocol: str, results: str, gt: str):
    """Score a results file/folder; returns the score object (``.format()`` / ``.to_json()``)."""
    if protocol == "holidays":
        from retrieval.evaluation.holidays import load_holidays_gt, parse_holidays_results, score_holidays

        try:
            with open(results, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except UnicodeDecodeError:
            raise ValueError(f"{results}: not a text file; expected 'query rank name rank name ...' lines.") from None
        parsed = parse_holidays_results(lines, source=results)
        return score_holidays(parsed, load_holidays_gt(gt))
    if protocol in ("oxford5k", "paris6k"):
        from retrieval.datasets.manifest import load_manifest
        from retrieval.evaluation.oxford import load_oxford_gt, read_results_folder, score_oxford

        g = load_oxford_gt(gt)
        names = load_manifest(protocol)["filesets"][0]["names"]
        return score_oxford(read_results_folder(results, g), g, database=names, protocol=protocol)
    import numpy as np

    from retrieval.evaluation.revisited import evaluate_revisited, load_revisited_gnd

    try:
        ranks = np.load(results, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{results}: expected a .npy array of ranks (n_database, n_queries): {exc}") from None
    return evaluate_revisited(ranks, load_revisited_gnd(gt, name=protocol))


@eval_.command("score")
@click.option("--protocol", "-p", type=click.Choice(PROTOCOLS), required=True,
              help="holidays: holidays_map.py results file; oxford5k/paris6k: folder of <query>.txt; "
                   "roxford5k/rparis6k: .npy ranks (n_database, n_queries).")
@click.argument("results", type=click.Path(exists=True))
@click.option("--gt", required=True, type=click.Path(exists=True),
              help="holidays_images.dat, the gt_files folder, or gnd_r*.pkl.")
@json_option("Print {protocol, mAP, per_query} as JSON.")
def eval_score(protocol, results, gt, as_json):
    """Score RESULTS with the official protocol (same numbers and precision as the official tools).

    \b
    holidays   mAP for RESULTS: 0.xxxxx            (holidays_map.py, 5 decimals)
    oxford5k   <query> <AP as compute_ap prints it> then mAP: 0.xxxxxx (6 decimals)
    roxford5k  >> roxford5k: mAP E: .., M: .., H: .. and the mP@k line (revisitop, percent, 2 decimals)
    """
    score = score_results(protocol, results, gt)
    if as_json:
        click.echo(_dump(score.to_json()))
    elif protocol == "holidays":
        click.echo(score.format(results))  # missing queries are warned about on stderr by the scorer
    else:
        click.echo(score.format())


@data.command("download")
@click.argument("dataset")
@click.option("--root", required=True, type=click.Path(file_okay=False), help="Dataset folder.")
@click.option("--base-url", default=None, help="Mirror: fetch <BASE_URL>/<archive name> instead of the manifest URL.")
@click.option("--remove-archives", is_flag=True, help="Delete each archive after extracting it.")
@click.option("--timeout", default=60.0, show_default=True, help="Network timeout in seconds.")
@click.pass_context
def data_download(ctx, dataset, root, base_url, remove_archives, timeout):
    """Download DATASET (a name from `retrieval data list`, or a manifest .json) into ROOT.

    Resumable (run it again after an interruption), checksum-verified, safe against archives that try to write
    outside ROOT. Ends with the check of ROOT against the dataset's official file list.
    """
    from retrieval.core.progress import progress_bar
    from retrieval.datasets.download import download_dataset

    bars = {}

    def progress(name, done, total):
        bar = bars.get(name)
        if bar is None:
            bar = bars[name] = progress_bar(total or None, name, enabled=not ctx.obj.get("quiet"), unit="B")
        bar.update(done - bar.n)

    try:
        report = download_dataset(dataset, root, base_url=base_url, keep_archives=not remove_archives,
                                  timeout=timeout, progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
    click.echo(report.message())
    if not report.ok:
        raise click.exceptions.Exit(1)


@data.command("check")
@click.argument("dataset")
@click.option("--root", required=True, type=click.Path(file_okay=False), help="Dataset folder.")
@click.option("--md5", is_flag=True, help="Also verify the per-file checksums the manifest gives.")
def data_check(dataset, root, md5):
    """Check ROOT against DATASET's official file list and say exactly what is missing."""
    from retrieval.datasets.manifest import check_files, load_manifest

    report = check_files(load_manifest(dataset), root, verify_checksums=md5)
    click.echo(report.message())
    if not report.ok:
        raise click.exceptions.Exit(1)


@data.command("list")
def data_list():
    """The datasets with a bundled manifest."""
    from retrieval.datasets.manifest import load_manifest, manifest_names

    for name in manifest_names():
        m = load_manifest(name)
        auto = "download" if m.get("archives") else "manual"
        click.echo(f"{name:12s} {auto:8s} {m.get('description', '')}")


def _default_work_dir():
    import os
    from pathlib import Path

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "retrieval" / "eval"


@eval_.command("run")
@click.argument("dataset")
@click.option("--root", type=click.Path(file_okay=False, exists=True), help="Dataset folder (not for 'groups').")
@click.option("--spec", type=click.Path(dir_okay=False, exists=True),
              help="For DATASET 'groups': a minibench-format JSON spec (paths relative to it).")
@click.option("--database", type=click.Path(file_okay=False, exists=True),
              help="For DATASET 'crops': the folder of database images the query lists name.")
@click.option("--preset", "preset", default="default", show_default=True, help="Preset name or JSON file.")
@click.option("--train-root", type=click.Path(file_okay=False, exists=True),
              help="Independent training images (e.g. Flickr60k for Holidays, Paris6k for Oxford).")
@click.option("--distractors", type=click.Path(file_okay=False, exists=True),
              help="Distractor folder for oxford105k/paris106k (Flickr100k), +r1m, copydays, and groups (its "
              "images join the database as negatives).")
@click.option("--out", type=click.Path(file_okay=False), help="Write official result files and report.json here.")
@click.option("--work", type=click.Path(file_okay=False), help="Index and feature-cache folder "
              "(default: $XDG_CACHE_HOME/retrieval/eval).")
@click.option("--top", "-k", "--k", "k", type=int, default=None, help="Ranked-list length (default: whole database up to 10,000).")
@workers_option()
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a preset value (strict: the key must exist), e.g. projection.n_components=512, "
                   "index.bits=64, search.method=lower_bound. Repeatable.")
@click.option("--compare", type=click.Choice(["asmk"]), default=None,
              help="Also run a reference method on the same features, training images and queries: asmk = ASMK* "
                   "(the 'asmk' package by its authors; benchmark extra).")
@json_option("Print the JSON report.")
@click.pass_context
def eval_run(ctx, dataset, root, spec, database, preset, train_root, distractors, out, work, k, workers, overrides,
             compare, as_json):
    """Evaluate PRESET on DATASET end to end: features (cached), training, index, queries, official score.

    \b
    DATASET: holidays, holidays_rotated, oxford5k, paris6k, oxford105k, paris106k, roxford5k, rparis6k,
             roxford5k+r1m, rparis6k+r1m, ukb, copydays, groups (with --spec FILE.json), or crops
             (--root: query images NAME.jpg with NAME_TP.txt / NAME_FP.txt; --database: the images they name).
    """
    from pathlib import Path

    from retrieval.app.evaluate import crops_dataset, groups_dataset, run_benchmark
    from retrieval.datasets import load_dataset

    check_preset_name(preset)
    if dataset == "groups":
        if spec is None:
            raise click.UsageError("'eval run groups' needs --spec FILE.json.")
        ds = groups_dataset(spec, distractors=distractors)
    elif dataset == "crops":
        if root is None or database is None:
            raise click.UsageError("'eval run crops' needs --root DIR (query crops and their lists) and "
                                   "--database DIR (the images the lists name).")
        ds = crops_dataset(root, database)
    else:
        if root is None:
            raise click.UsageError(f"'eval run {dataset}' needs --root DIR (the dataset folder).")
        ds = load_dataset(dataset, root, distractors_root=distractors)
    train_images = None
    if train_root is not None:
        from retrieval.app.index import walk_photos

        train_images = walk_photos(train_root)
    work_dir = Path(work) if work else _default_work_dir()
    report = run_benchmark(ds, preset, work_dir=work_dir, train_images=train_images, k=k, workers=workers,
                           out_dir=out, progress=not ctx.obj.get("quiet"), overrides=overrides)
    if compare == "asmk":
        from retrieval.bench.peers import compare_asmk

        report["compare"] = {"asmk": compare_asmk(ds, report, train_paths=train_images)}
    # report["warnings"] were already logged on stderr by the runner
    if as_json:
        click.echo(_dump(report))
        return
    score = report["score"]
    if "easy" in score:
        m = score["mAP"]
        click.echo(f"{report['dataset']} / {report['preset']}: mAP E {m['easy']:.4f}  M {m['medium']:.4f}  "
                   f"H {m['hard']:.4f}")
    elif report["mAP"] is None:
        click.echo(f"{report['dataset']} / {report['preset']}: N-S score {score.get('N-S score'):.4f}")
    else:
        click.echo(f"{report['dataset']} / {report['preset']}: mAP {report['mAP']:.4f}")
    click.echo(f"  {report['indexed']} images, {report['queries']} queries, {report['bytes_per_image']:.0f} bytes/image, "
               f"extraction {report['extraction_seconds_per_image']:.3f} s/image, "
               f"query {1000 * report['query_seconds_mean']:.1f} ms")
    ref = (report.get("compare") or {}).get("asmk")
    if ref is not None:
        click.echo(f"  ASMK* (same features, {ref['training']} training, {ref['codebook_size']} words): mAP "
                   f"{ref['mAP']:.4f}; {report['preset']} - ASMK* = {report['mAP'] - ref['mAP']:+.4f}; query "
                   f"{1000 * ref['query_seconds_mean']:.1f} ms")
    eff = report.get("effective_parameters") or {}
    if eff:  # preset parameters reduced to fit a small training set (docs/user-guide.md, "Small collections")
        click.echo("  reduced for this collection: " + ", ".join(
            f"{p} {e['preset']} -> {'dropped' if e['used'] is None else e['used']}" for p, e in eff.items()))
    if out:
        click.echo(f"  report: {Path(out) / 'report.json'}")


@bench.command("peers")
@click.option("--data", "data_root", type=click.Path(exists=True, file_okay=False), default="../shared/data",
              show_default=True, help="Data folder holding minibench.json and real/.")
@click.option("--preset", "presets", multiple=True, default=("default",), show_default=True,
              help="Preset to measure (repeatable).")
@click.option("--set", "sets", multiple=True, help="Only these sets (repeatable): minibench, holidays805, "
              "ukbench400, oxford_crops [default: all].")
@click.option("--work", type=click.Path(file_okay=False), help="Index and feature-cache folder "
              "(default: $XDG_CACHE_HOME/retrieval/eval).")
@click.option("--protocol", type=click.Choice(["transductive", "independent"]), default="transductive",
              show_default=True, help="Training images: each set's own (transductive), or another benchmark's "
              "(independent: Holidays for the others, UKBench + Oxford for Holidays).")
@workers_option()
@json_option("Print the rows as JSON.")
@click.pass_context
def bench_peers(ctx, data_root, presets, sets, work, protocol, workers, as_json):
    """Each PRESET and ASMK* on every real set, same features and training images, one table.

    Training is transductive (each set's own images, as indexing a folder does) or independent (--protocol); the
    Oxford crops are scored over their true and false lists (docs/results.md, "Against ASMK*").
    """
    from pathlib import Path

    from retrieval.bench.peers import REAL_SETS, peers

    rows = peers(data_root, presets=presets, sets=sets or REAL_SETS,
                 work_dir=Path(work) if work else _default_work_dir(), workers=workers,
                 progress=not ctx.obj.get("quiet"), protocol=protocol)
    if as_json:
        click.echo(_dump(rows))
        return
    names = list(rows[0]["presets"]) if rows else []
    click.echo(f"training: {protocol}")
    click.echo("| set | images / queries / training | " + " | ".join(names) + " | ASMK* | best preset - ASMK* |")
    click.echo("|---|---|" + "---|" * len(names) + "---|---|")
    for r in rows:
        maps = [r["presets"][n]["mAP"] for n in names]
        click.echo(f"| {r['set']} | {r['images']} / {r['queries']} / {r['train_images']} | "
                   + " | ".join(f"{m:.4f}" for m in maps)
                   + f" | {r['asmk']['mAP']:.4f} | {max(maps) - r['asmk']['mAP']:+.4f} |")
