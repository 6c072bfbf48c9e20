"""CLI commands for application: index, query, info, remove, presets, demo.

Each command is a few lines over :class:`retrieval.app.index.Index`; results on stdout, progress bars and logs on
stderr. ``--json`` outputs are documented in docs/cli.md and docs/user-guide.md.
"""

from __future__ import annotations

import json
import os
import sys
import time

import click

from retrieval.cli.groups import bench, main
from retrieval.cli.index_notes import SmallFolderNotes, stopped_message
from retrieval.cli.options import (
    compact_features_option,
    echo_json,
    index_dir_of,
    index_option,
    json_option,
    workers_option,
)
from retrieval.cli.output import format_options
from retrieval.cli.query import print_hits
from retrieval.cli.scale import cluster_option, open_client, shards_option
from retrieval.cli.suggest import check_preset_name


def _quiet(ctx) -> bool:
    return bool(ctx.find_root().obj and ctx.find_root().obj.get("quiet"))


def _verbose(ctx) -> int:
    return int((ctx.find_root().obj or {}).get("verbose") or 0)


@main.command("index")
@click.argument("photo_dir")
@index_option
@click.option("--preset", default=None,
              help="Preset name (see 'retrieval presets') or a preset .json file, for a new index [default: "
                   "default]; an existing index keeps its own (giving another one is an error).")
@click.option("--model", "model_dir", default=None, metavar="DIR",
              help="Reuse a trained model (an index folder or its model/ folder) instead of training.")
@click.option("--train-on", type=click.Choice(["auto", "collection", "generic"]), default="auto", show_default=True,
              help="A new index's model: the generic model (built by make setup from independent photos), the "
                   "collection itself, or auto: generic for a small first sync (up to 25 photos for default and "
                   "accurate, 50 for object, 100 for compact; docs/results.md).")
@click.option("--feature-store", default=None, metavar="DIR",
              help="Feature-store folder shared between indexes (default: DIR/features); only used to create.")
@click.option("--max-megapixels", type=click.FloatRange(0, None, min_open=True), default=None, metavar="MP",
              help="Refuse larger images (decompression guard) [default: the preset's features.max_megapixels, "
                   "150].")
@workers_option()
@cluster_option()
@shards_option
@compact_features_option(help="A new index keeps its features in compact form, with codes of this many bytes a "
                              "descriptor (docs/results.md \"The compact feature store\") [default: 0, in full].")
@click.option("--add-root", is_flag=True, help="PHOTO_DIR is another folder: follow it as well as the index's.")
@click.option("--replace-root", is_flag=True,
              help="PHOTO_DIR is another folder: follow only it (the other folders' images are dropped).")
@click.option("--prune", "--yes", "prune", is_flag=True,
              help="Confirm a sync that removes more than half of the indexed images.")
@click.option("--include", "include", multiple=True, metavar="PATH",
              help="Index again a file removed with 'retrieval remove' (repeatable).")
@click.option("--strict", is_flag=True, help="Exit 1 when any file could not be read (default: 0 once every file "
              "was handled; unreadable files are listed).")
@click.option("--retrain", is_flag=True,
              help="Train the IVFADC quantiser of the search state again on the collection as it is now (it is "
                   "trained once, when the collection reaches index.min_images, and again when it outgrew it).")
@click.option("--skip-errors", is_flag=True, hidden=True, help="Accepted for compatibility: exit 0 is the default.")
@json_option("Print the sync report as JSON.")
@click.pass_context
def index_cmd(ctx, photo_dir, index_dir, preset, model_dir, train_on, feature_store, max_megapixels, workers,
              cluster, shards, compact_features, add_root, replace_root, prune, include, strict, retrain, skip_errors,
              as_json):
    """Index PHOTO_DIR (recursively), or bring an existing index in line with it.

    New and changed files are added, deleted ones dropped, moved ones recognised by content. Photos in JPEG, PNG,
    TIFF, WebP, BMP, PPM, GIF, HEIC, AVIF and camera RAW (CR2, CR3, NEF, ARW, DNG, RAF, ORF, RW2) are indexed; the
    other files are counted by reason after the summary ("3 skipped: 2 not images (.txt), 1 unsupported (.xyz)";
    "skipped" in --json). Unreadable files are listed on stderr once, in the run where they fail (`retrieval info`
    lists them all); unchanged, they are not retried. Exit status 0 once every file was handled, 1 with --strict
    when any could not be read.
    """
    from retrieval.app.index import Index, walk_photos
    from retrieval.app.index_support import skipped_summary

    check_preset_name(preset)
    index_dir = index_dir_of(index_dir)
    skipped: dict = {}
    files = walk_photos(photo_dir, skipped=skipped)  # validates the folder before anything is created
    if not files:
        from retrieval.features.image import IMAGE_EXTENSIONS

        more = skipped_summary(skipped.items())
        raise click.ClickException(f"photo folder {photo_dir!r} holds no images "
                                   f"({', '.join(e[1:] for e in IMAGE_EXTENSIONS)}; hidden files are skipped)"
                                   + (f"; {more}" if more else "") + ".")
    from pathlib import Path

    client = open_client(ctx, cluster)   # before anything is created: a wrong address changes nothing
    if preset is None and (Path(index_dir) / "catalog.db").exists():
        idx = Index.open(index_dir)
    else:
        idx = Index.create(index_dir, preset=preset or "default", model=model_dir, feature_store=feature_store,
                           train_on=train_on, shards=shards or 1, exist_ok=True,
                           compact_features=int(compact_features or 0))
    if compact_features is not None and idx.compact_features != int(compact_features):
        raise click.ClickException(f"--compact-features {compact_features}: this index keeps {idx.compact_features}; "
                                   f"'retrieval compact --compact-features N' changes it.")
    if model_dir and idx.catalog.get_meta("model") is None:
        idx.writer().import_model(Path(model_dir))
    if max_megapixels is not None:   # a guard of this run only: the features themselves do not depend on it
        idx.extractor.max_megapixels = float(max_megapixels)
    if include:
        back = idx.writer().include(include)
        missing = sorted({os.path.abspath(os.path.expanduser(p)) for p in include} - set(back))
        if missing:
            raise click.ClickException(f"--include {missing[0]}: not a removed file (see 'retrieval info').")
    before = {"generation": idx.catalog.generation(), "indexed": idx.catalog.count("indexed"), "started": time.time()}
    try:
        with SmallFolderNotes() as notes:
            report = idx.sync(photo_dir, workers=workers, progress=not _quiet(ctx), add_root=add_root,
                              replace_root=replace_root, prune=prune, cluster=client, retrain=retrain)
    except KeyboardInterrupt:   # Ctrl-C: say what was kept, exit status 130 (128 + SIGINT)
        click.echo(f"\n{stopped_message(idx, **before)}", err=True)
        ctx.exit(130)
    model = idx.catalog.get_meta("model") or {}
    notes.tell(dict(model.get("effective") or {}) if report.trained else {}, verbose=_verbose(ctx),
               quiet=_quiet(ctx))
    for path, reason in report.errors:
        click.echo(f"error: {path}: {reason}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        n = idx.catalog.count("indexed")
        click.echo(f"{n} images indexed in {index_dir} (preset {idx.preset['name']}): {report.added} added, "
                   f"{report.changed} changed, {report.moved} moved, {report.removed} removed, "
                   f"{report.unchanged} unchanged, {len(report.errors) + report.failed_before} unreadable"
                   + (f" ({report.failed_before} unchanged since they failed, see 'retrieval info')"
                      if report.failed_before else "") + f"; {report.seconds:.1f} s")
        if report.skipped:   # every file of the folder that is not indexed, by reason
            click.echo(skipped_summary(report.skipped))
    if report.errors:
        click.echo(f"{len(report.errors)} file(s) could not be read (listed above).", err=True)
    if strict and (report.errors or report.failed_before):
        ctx.exit(1)


@main.command("info")
@index_option
@format_options(json_help="Same as --format json: the summary as one JSON object.")
def info_cmd(index_dir, out):
    """Summary of an index: preset, model, counts, unreadable files, last run. --format csv gives field,value
    rows; --format paths the photo folders the index follows."""
    from retrieval.app.index import Index

    info = Index.open(index_dir_of(index_dir)).info()
    if out.fmt == "jsonl":
        out.lines([info])
        return
    if not out.is_table:
        out.records([{"field": k, "value": v} for k, v in info.items()], columns=["field", "value"], table=None,
                    paths=info.get("roots", []), document=info)
        return
    p = info["preset"]
    click.echo(f"index      {info['index']}")
    click.echo(f"preset     {p['name']} (version {p['version']}, {p['kind']})")
    m = info["model"] or {}
    origin = "the generic model, " if m.get("generic") else ""
    click.echo(f"model      {m.get('id', '-')} ({origin}trained on {m.get('trained_on', '-')} images)")
    click.echo(f"images     {info['indexed']} indexed, {info['errors']} unreadable; generation {info['generation']}")
    click.echo(f"disk       {info['bytes_on_disk'] / 1e6:.1f} MB (catalog, model, search state; the feature store apart)")
    click.echo(f"state      {info['shards']} shard(s); features in {info['compact_features'] or 'full'}{'-byte codes' * bool(info['compact_features'])}")  # noqa: E501
    if info["last_run"]:
        r = info["last_run"]
        click.echo(f"last run   {r['started']} {r['status']}: +{r['added'] or 0} ~{r['changed'] or 0} "
                   f">{r['moved'] or 0} -{r['removed'] or 0}, {r['errors'] or 0} errors")
    for r in info.get("roots", []):
        click.echo(f"folder     {r}")
    for e in info["error_files"]:
        click.echo(f"unreadable {e['path']}: {e['error']}")
    for x in info.get("excluded", []):
        click.echo(f"removed    {x} (left out of syncs; 'retrieval index DIR --include PATH' takes it back)")


@main.command("check")
@index_option
@click.option("--repair", is_flag=True, help="Rebuild what can be rebuilt (a damaged generation, from the model and "
              "the feature store; no feature is re-extracted) and say what could not.")
@json_option("Print the findings as JSON.")
@click.pass_context
def check_cmd(ctx, index_dir, repair, as_json):
    """Verify an index: the catalog (SQLite integrity_check), the model and every generation against their
    manifests (sizes and checksums). Exit 0 when everything is intact (or was repaired), 1 otherwise."""
    from retrieval.app.index import Index
    from retrieval.app.integrity import check_index, repair_index, restore_catalog

    restored = restore_catalog(index_dir_of(index_dir)) if repair else None
    idx = Index.open(index_dir_of(index_dir))
    report = check_index(idx)
    if restored:
        report["restored"] = restored
    if repair and not report["ok"]:
        report["repair"] = repair_index(idx)
        report["after_repair"] = check_index(idx)
    final = report.get("after_repair", report)
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        click.echo(f"catalog    {report['catalog']}")
        for line in report.get("catalog_backup", []) + report.get("model_backup", []):
            click.echo(f"copy       {line}")
        click.echo(f"model      {'ok' if not report['model'] else '; '.join(report['model'])}")
        for g, problems in sorted(report["generations"].items()):
            mark = " (committed)" if g == report["committed"] else ""
            click.echo(f"generation {g}{mark}: {'ok' if not problems else '; '.join(problems)}")
        if restored:
            click.echo(f"repaired   {restored}")
        for line in report.get("repair", {}).get("repaired", []):
            click.echo(f"repaired   {line}")
        for line in report.get("repair", {}).get("could_not", []):
            click.echo(f"not repaired: {line}", err=True)
        if not final["ok"] and not repair:
            click.echo(f"damaged: run 'retrieval check --repair --index {idx.path}'", err=True)
    if not final["ok"]:
        ctx.exit(1)


@main.command("remove")
@click.argument("paths", nargs=-1, required=True)
@index_option
def remove_cmd(paths, index_dir):
    """Drop images (paths or ids) from the index and print each one removed. The files themselves are not touched;
    later syncs leave them out until 'retrieval index DIR --include PATH'."""
    from retrieval.app.index import Index

    idx = Index.open(index_dir_of(index_dir))
    rows = []
    for p in paths:
        r = idx.catalog.row_by_id(int(p)) if str(p).isdigit() and not os.path.exists(p) else None
        r = r or idx.catalog.row_by_path(os.path.abspath(os.path.expanduser(str(p))))
        if r is not None:
            rows.append(r)
    n = idx.remove(list(paths))
    for r in rows:
        click.echo(f"removed {r['id']} {r['path']}")
    click.echo(f"{n} image(s) removed", err=True)


@main.command("compact")
@index_option
@click.option("--retrain", is_flag=True, help="Also train the IVFADC quantiser again on the collection as it is now.")
@compact_features_option()
@json_option("Print what was merged as JSON.")
def compact_cmd(index_dir, retrain, compact_features, as_json):
    """Merge the segments of the index's search state into one, dropping the rows of removed images (syncs merge
    small segments themselves; safe to interrupt); with --compact-features, or in an index that keeps its features
    in compact form, convert the feature store (docs/formats.md)."""
    from retrieval.app.index import Index

    idx = Index.open(index_dir_of(index_dir))
    out = idx.compact(retrain=retrain, compact_features=None if compact_features is None else int(compact_features))
    if as_json:
        return click.echo(json.dumps(out, indent=2))
    if (feats := out["features"])["compact"]:
        click.echo(f"features: {feats['compact']} photo(s) in compact form, {feats['full_dropped']} full removed")
    if out["segments_before"] is None:
        click.echo(f"preset {idx.preset['name']!r} writes one search state per generation: nothing to merge.")
    else:
        click.echo(f"{out['segments_before']} segment(s) merged into {out['segments_after']} ({out['images']} images, "
                   f"generation {out['generation']}, {out['seconds']:.1f} s)")


@main.command("list")
@index_option
@click.option("--status", type=click.Choice(["ok", "failed", "excluded", "all"]), default="all", show_default=True,
              help="Indexed images, unreadable files, files removed with 'remove', or all of them.")
@format_options(json_help="Same as --format json: a JSON list of {id, path, status, size, features, error?}.")
def list_cmd(index_dir, status, out):
    """The images of an index: id, status, size in bytes, number of local features, path (a header line, then
    tab-separated rows; the path last)."""
    from retrieval.app.index import Index

    idx = Index.open(index_dir_of(index_dir))

    def records():   # read from the catalog as they are written (never the whole catalog in memory)
        if status in ("ok", "failed", "all"):
            wanted = {"ok": "indexed", "failed": "error"}.get(status)
            for r in idx.catalog.iter_rows(wanted):
                st = "ok" if r["status"] == "indexed" else "failed"
                yield {"id": r["id"], "path": r["path"], "status": st, "size": r["size"],
                       "features": r["n_features"], **({"error": r["error"]} if r["error"] else {})}
        if status in ("excluded", "all"):
            yield from ({"id": None, "path": p, "status": "excluded", "size": None, "features": None}
                        for p in idx.excluded)

    cols = ("id", "status", "size", "features", "path")

    def table():
        click.echo("\t".join(cols))
        for r in records():
            click.echo("\t".join("-" if r[k] is None else str(r[k]) for k in cols))

    out.records(records() if not out.is_table else [], columns=[*cols, "error"], table=table)


@main.command("presets")
@click.option("--show", "show", metavar="NAME", default=None,
              help="Print the effective configuration of preset NAME (a bundled name or a .json file): every key, "
                   "with the defaults it leaves unset filled in and marked '(default)'.")
@click.option("--all", "show_all", is_flag=True, help="Also list the presets that reproduce published tables.")
@click.option("--json", "as_json", is_flag=True, help="Print the presets (or with --show, the configuration) as JSON.")
def presets_cmd(show, show_all, as_json):
    """List the presets for photo folders (with --all also those that reproduce papers), whether each is
    available, and what a missing one needs. 'retrieval presets --show NAME' gives the full description."""
    from retrieval.engine.presets import describe_presets, effective_preset, format_preset

    check_preset_name(show, "--show")
    if show is not None:
        click.echo(json.dumps(effective_preset(show), indent=2, ensure_ascii=False) if as_json else format_preset(show))
        return
    rows = describe_presets()
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    from retrieval.cli.describe import presets_table

    for line in presets_table(rows, show_all):
        click.echo(line)


@main.command("demo")
@click.option("--out", "out_dir", default="demo-output", show_default=True, metavar="DIR",
              help="Where the demo photos, the index and the galleries go.")
@click.option("--preset", default="default", show_default=True, help="Preset to demonstrate.")
@click.pass_context
def demo_cmd(ctx, out_dir, preset):
    """Build a demo photo folder (scikit-image's real photos + generated views), index it, run one image query
    and one box query, print both ranked lists and write the HTML galleries."""
    from pathlib import Path

    from retrieval.app.demo_data import build_demo_folder
    from retrieval.app.gallery import write_gallery
    from retrieval.app.index import Index

    check_preset_name(preset)
    t0 = time.perf_counter()
    out = Path(out_dir)
    photos = out / "photos"
    made = build_demo_folder(photos)
    n_files = len(made["photos"]) + sum(len(v) for v in made["views"].values())
    click.echo(f"[demo] {n_files} photos in {photos} ({len(made['photos'])} scikit-image photos + generated "
               f"views: crops, rotations, scale changes, JPEG)", err=True)
    idx = Index.create(out / "index", preset=preset, exist_ok=True)
    report = idx.sync(photos, progress=not _quiet(ctx))
    click.echo(f"[demo] indexed {idx.catalog.count('indexed')} images in {report.seconds:.1f} s", err=True)

    q1 = made["views"]["coffee"][0] if "coffee" in made["views"] else made["photos"][0]
    click.echo(f"\nImage query: {q1}")
    hits1 = idx.search(q1, k=8)
    print_hits(hits1, False)
    write_gallery(out / "query-image.html", q1, hits1, title="demo: image query")

    q2 = str(photos / "chelsea.png") if (photos / "chelsea.png").exists() else made["photos"][0]
    box = (140.0, 20.0, 320.0, 200.0) if q2.endswith("chelsea.png") else None
    click.echo(f"\nBox query: {q2} --bbox " + ("" if box is None else ",".join(f"{v:.0f}" for v in box)))
    hits2 = idx.search(q2, bbox=box, k=8)
    print_hits(hits2, False)
    write_gallery(out / "query-box.html", q2, hits2, query_box=box, title="demo: box query")
    click.echo(f"\nGalleries: {out / 'query-image.html'}  {out / 'query-box.html'}  "
               f"(open them in a browser)", err=True)
    click.echo(f"[demo] done in {time.perf_counter() - t0:.1f} s", err=True)
    sys.stdout.flush()


@bench.command("app")
@click.option("--minibench", "minibench_json", default=None, metavar="FILE",
              help="minibench.json: mAP of each --preset, indexed and queried as 'retrieval index' and "
                   "'retrieval query' do.")
@click.option("--n", "n_images", type=click.IntRange(1, None), default=None,
              help="Throughput run: index N generated small images, then time queries.")
@click.option("--queries", type=click.IntRange(1, None), default=200, show_default=True,
              help="Timed queries of the throughput run.")
@click.option("--preset", "presets", multiple=True, default=["default"], show_default=True,
              help="Preset to measure (repeatable; the throughput run uses the first).")
@click.option("--workdir", default="bench-app", show_default=True, help="Scratch folder (photos, indexes).")
@click.option("--feature-store", default=None, metavar="DIR", help="Shared feature store (minibench).")
@workers_option()
@json_option("No progress bars (the result is printed as JSON either way).")
def bench_app_cmd(minibench_json, n_images, queries, presets, workdir, feature_store, workers, as_json):
    """Application benchmarks: minibench mAP per preset, and indexing throughput / query latency."""
    if not minibench_json and not n_images:
        raise click.UsageError("give --minibench FILE and/or --n N")
    from retrieval.bench.app import bench_app

    echo_json(bench_app(minibench_json=minibench_json, n_images=n_images, queries=queries, presets=presets,
                        workdir=workdir, feature_store=feature_store, workers=workers, progress=not as_json))
