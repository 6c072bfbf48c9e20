"""CLI command ``retrieval duplicates``: groups of exact copies, near duplicates and same-scene photos."""

from __future__ import annotations

import click

from retrieval.cli.groups import main, quiet_requested
from retrieval.cli.options import check_output_extension
from retrieval.cli.output import format_options

GROUP_COLUMNS = ["group", "kind", "id", "size", "path"]
"""Columns of ``retrieval duplicates --format csv`` (one row per photo)."""


@main.command("duplicates")
@click.option("--index", "index_dir", default=None, metavar="DIR",
              help="Index folder (default: $RETRIEVAL_INDEX or ./retrieval-index).")
@click.option("--threshold", type=click.FloatRange(None, None), default=None, metavar="T",
              help="Minimum global similarity of a candidate pair (default: none; the nearest photos of each "
                   "photo are candidates). Every pair but exact copies must pass geometric verification.")
@click.option("--candidates", type=click.IntRange(1, None), default=10, show_default=True,
              help="Nearest photos checked for each photo.")
@click.option("--min-inliers", type=click.IntRange(1, None), default=None,
              help="One-to-one inliers a same-scene pair needs [default: 12; near duplicates need 9; lower finds "
                   "more pairs and joins unrelated groups more often].")
@click.option("--html", "html_path", default=None, metavar="FILE",
              help="Write the groups side by side as a self-contained HTML page.")
@format_options(json_help="Same as --format json: a JSON list of {group, kind, images: [{id, path, size, kind}], "
                          "pairs: [{a, b, kind, similarity, inliers}]}.")
@click.pass_context
def duplicates_cmd(ctx, index_dir, threshold, candidates, min_inliers, html_path, out):
    """Groups of exact copies (same content), near duplicates (resized, re-encoded) and photos of the same scene
    or object, found from what the index holds: candidates by the global code, confirmed by geometric
    verification of the stored features.

    The table lists one photo per line: group, kind (the tightest of its pairs in the group: exact, near or
    scene), id, size, path; --format csv the same columns;
    --format paths the paths of each group, groups separated by an empty line (an empty record with -0).
    """
    check_output_extension(html_path, (".html", ".htm"), "--html")
    from retrieval.app.duplicates import find_duplicates, render_duplicates_html
    from retrieval.app.index import Index
    from retrieval.cli.app import _index_dir
    from retrieval.cli.options import verification_cache_mb
    from retrieval.core.persistence import atomic_write
    from retrieval.core.progress import callback_for, progress_bar

    idx = Index.open(_index_dir(index_dir), verification_cache_mb=verification_cache_mb())
    n = idx.catalog.count("indexed")
    with progress_bar(n, "comparing", enabled=not quiet_requested(ctx), unit="img") as bar:
        extra = {} if min_inliers is None else {"min_inliers": min_inliers}
        groups = find_duplicates(idx, threshold=threshold, candidates=candidates, progress=callback_for(bar),
                                 **extra)
    rows = [{"group": g.group, **im} for g in groups for im in g.images]

    def table():
        click.echo("group  kind   id      size  path")
        for r in rows:
            click.echo(f"{r['group']:5d}  {r['kind']:5}  {r['id']:>4}  {r['size']:>8}  {r['path']}")

    paths = []
    for g in groups:
        if paths:
            paths.append("")
        paths += [im["path"] for im in g.images]
    if out.fmt == "jsonl":
        out.lines([g.to_json() for g in groups])
    else:
        out.records(rows, columns=GROUP_COLUMNS, table=table, paths=paths, document=[g.to_json() for g in groups])
    counts = {k: sum(p.kind == k for g in groups for p in g.pairs) for k in ("exact", "near", "scene")}
    if not quiet_requested(ctx):
        click.echo(f"{len(groups)} groups of {len(rows)} photos (of {n}); pairs: {counts['exact']} exact, "
                   f"{counts['near']} near, {counts['scene']} same scene", err=True)
    if html_path:
        with atomic_write(html_path, "w") as fh:
            fh.write(render_duplicates_html(groups, title=f"duplicates in {idx.path}"))
        click.echo(f"groups written to {html_path}", err=True)
