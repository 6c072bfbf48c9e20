"""CLI command ``retrieval duplicates``: exact copies, RAW + JPEG pairs of one shot, near duplicates and same-scene
photos of an index, in groups that never mix kinds, with a suggested keeper; safe actions on the extra copies (dry run by default, undoable); and
``--against NEW_DIR``: which of these new photos does the index already have?"""

from __future__ import annotations

import click

from retrieval.cli.groups import main, quiet_requested
from retrieval.cli.options import check_output_extension
from retrieval.cli.output import format_options

GROUP_COLUMNS = ["group", "kind", "keeper", "id", "width", "height", "bytes", "format", "date", "camera", "path",
                 "hard_link"]
"""Columns of ``retrieval duplicates --format csv`` (one row per photo; ``hard_link``: the keeper's own file under
another name, not an extra copy)."""

AGAINST_COLUMNS = ["path", "kind", "matches"]

KINDS = ("exact", "formats", "near", "scene")
"""The kinds of groups (:data:`retrieval.app.duplicates.groups.KINDS`)."""


def _kinds(text: str) -> tuple:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise click.BadParameter(f"{text!r}: expected a comma list of {', '.join(KINDS)}.", param_hint="--kinds")
    return kinds


def _group_numbers(text: str | None) -> set | None:
    if not text:
        return None
    try:
        return {int(v) for v in text.split(",") if v.strip()}
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected group numbers separated by commas (e.g. 3,7).",
                                 param_hint="--groups") from None


@main.command("duplicates")
@click.option("--index", "index_dir", default=None, metavar="DIR",
              help="Index folder (default: $RETRIEVAL_INDEX or ./retrieval-index).")
@click.option("--against", "against", default=None, metavar="PATH",
              help="A folder (or one image) of new photos: for each, the indexed photos it duplicates. Nothing is "
                   "added to the index.")
@click.option("--kinds", default=None, metavar="LIST",
              help="Kinds listed and acted on, comma-separated from exact, formats (a RAW and the JPEG of one "
                   "shot), near, scene [default: all four listed; actions and --format paths: exact,near].")
@click.option("--keeper", "keeper_rule", default=None, metavar="RULE",
              help="Criteria choosing the photo to keep in each group, in order, comma-separated from raw, "
                   "resolution, smallest, not-backup, format, oldest, newest, bytes, path, under:DIR, not-under:DIR "
                   "[default: raw,resolution,not-backup,oldest,path: the RAW of a RAW+JPEG pair, the most pixels, a "
                   "file outside backup/copy/export/tmp folders, the earliest date, the shortest path].")
@click.option("--prefer-folder", "prefer_folders", multiple=True, metavar="DIR",
              help="Keep the copy under DIR when pixels and RAW do not decide (your main library); repeatable.")
@click.option("--never-keep-in", "never_keep_in", multiple=True, metavar="DIR",
              help="Never keep the copy under DIR when another exists (a backup disk); repeatable.")
@click.option("--action", type=click.Choice(["move", "trash", "link"]), default=None,
              help="Act on every photo that is not its group's keeper: move (to --to, keeping the folder "
                   "structure), trash (the desktop trash), link (exact copies become hard links to the keeper). "
                   "A dry run unless --yes.")
@click.option("--to", "to_dir", default=None, metavar="DIR", help="Destination folder of --action move.")
@click.option("--groups", "groups_named", default=None, metavar="N,N",
              help="Only these group numbers (needed to act on a scene or formats group).")
@click.option("--yes", is_flag=True, help="Carry out --action (otherwise only print the plan).")
@click.option("--plan", "plan_path", default=None, metavar="FILE",
              help="Where --action --yes writes its plan and undo file [default: INDEX/duplicate-plans/].")
@click.option("--undo", "undo_path", default=None, metavar="PLAN",
              help="Undo an action from its plan file: files put back, the index given them again.")
@click.option("--threshold", type=float, default=None, metavar="T",
              help="Least global similarity for which a pair the cheap check (the largest features) did not verify "
                   "is verified with all its features [default: 0.6]; lower finds more same-scene pairs, slower.")
@click.option("--candidates", type=click.IntRange(1, None), default=10, show_default=True,
              help="Most similar photos checked for each photo.")
@click.option("--min-inliers", type=click.IntRange(1, None), default=None,
              help="One-to-one inliers a same-scene pair needs [default: 12].")
@click.option("--html", "html_path", default=None, metavar="FILE",
              help="Write the groups side by side as a self-contained HTML page.")
@format_options(json_help="Same as --format json: a JSON list of {group, kind, keeper, keeper_path, keeper_reason, "
                          "images: [...], pairs: [...]} (with --against: {path, kind, matches: [{id, path, kind}]}).")
@click.pass_context
def duplicates_cmd(ctx, index_dir, against, kinds, keeper_rule, prefer_folders, never_keep_in, action, to_dir, groups_named, yes, plan_path,
                   undo_path, threshold, candidates, min_inliers, html_path, out):
    """Exact copies (same bytes or pixels), the same photograph in two formats (a camera's RAW file and the JPEG
    beside it, same name: kept together), near duplicates (the same photograph resized, re-encoded, cropped, turned
    or retouched) and photos of the same scene, in groups that never mix kinds, each with a suggested keeper.

    The table lists one photo per line (* marks the keeper); --format paths prints the photos that are not their
    group's keeper in exact and near groups (the extra copies), for xargs. --action acts on them (a dry run until
    --yes) and writes a plan file that --undo reverses. With --against, one line per new photo: the kind of its
    best match (or -) and the indexed photos it duplicates; --format paths lists the new photos already present.
    """
    from retrieval.app.index import Index
    from retrieval.cli.options import index_dir_of, verification_cache_mb

    check_output_extension(html_path, (".html", ".htm"), "--html")
    idx = Index.open(index_dir_of(index_dir), verification_cache_mb=verification_cache_mb())
    ctx.call_on_close(idx.close)        # every catalog connection closed when the command ends
    if undo_path:
        _undo(idx, undo_path, ctx)
        return
    options = {"candidates": candidates}
    if threshold is not None:
        options["threshold"] = threshold
    if min_inliers is not None:
        options["min_inliers"] = min_inliers
    if against:
        if action:
            raise click.UsageError("--action applies to the groups of the index, not to --against.")
        _against(idx, against, options, out, ctx)
        return
    from retrieval.app.photo_facts import KEEPER_RULE, keeper_rule_with, parse_keeper_rule

    try:
        rule = keeper_rule_with(parse_keeper_rule(keeper_rule) if keeper_rule else KEEPER_RULE, prefer_folders,
                                never_keep_in)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--keeper") from None
    listed = _kinds(kinds) if kinds else KINDS
    acted = _kinds(kinds) if kinds else ("exact", "near")
    named = _group_numbers(groups_named)
    groups = _find(idx, options, rule, ctx)
    shown = [g for g in groups if g.kind in listed and (named is None or g.group in named)]
    if action:
        _act(idx, groups, action, acted, to_dir, named, yes, plan_path, ctx)
        return
    _print_groups(shown, acted, out, ctx, idx)
    if html_path:
        from retrieval.app.duplicates.report_html import write_duplicates_html

        write_duplicates_html(html_path, shown, title=f"duplicates in {idx.path}")
        click.echo(f"groups written to {html_path}", err=True)


def _find(idx, options, rule, ctx):
    from retrieval.app.duplicates import find_duplicates
    from retrieval.core.progress import callback_for, progress_bar

    n = idx.catalog.count("indexed")
    with progress_bar(n, "comparing", enabled=not quiet_requested(ctx), unit="img") as bar:
        return find_duplicates(idx, keeper_rule=rule, progress=callback_for(bar), **options)


def _print_groups(groups, acted, out, ctx, idx) -> None:
    rows = [{"group": g.group, "kind": g.kind, "keeper": im["keeper"], "id": im["id"], "width": im["width"],
             "height": im["height"], "bytes": im["bytes"], "format": im["format"], "date": im["date"],
             "camera": im["camera"], "path": im["path"], "hard_link": im.get("hard_link", False)}
            for g in groups for im in g.images]
    why = {g.group: g.keeper_reason for g in groups}

    def table():
        from retrieval.core.units import human_bytes

        click.echo("group  kind     keep    id  resolution        size  format  date                 path")
        for r in rows:
            res = f"{r['width']}x{r['height']}" if r["width"] else "?"
            reason = f"   (kept: {why[r['group']]})" if r["keeper"] else \
                "   (a hard link of the keeper: no space of its own)" if r["hard_link"] else ""
            click.echo(f"{r['group']:5d}  {r['kind']:7}  {'*' if r['keeper'] else ' ':4}  {r['id']:>4}  {res:>10}  "
                       f"{human_bytes(r['bytes']):>10}  {(r['format'] or '?'):6}  {(r['date'] or '-'):19}  "
                       f"{r['path']}{reason}")

    extras = [im["path"] for g in groups if g.kind in acted for im in g.images
              if not im["keeper"] and not im.get("hard_link")]
    links = sum(bool(im.get("hard_link")) for g in groups for im in g.images)
    if out.fmt == "jsonl":
        out.lines([g.to_json() for g in groups])
    else:
        out.records(rows, columns=GROUP_COLUMNS, table=table, paths=extras, document=[g.to_json() for g in groups])
    if not quiet_requested(ctx):
        counts = {k: sum(g.kind == k for g in groups) for k in KINDS}
        click.echo(f"{len(groups)} groups of {len(rows)} photos (of {idx.catalog.count('indexed')}): "
                   f"{counts['exact']} exact, "
                   + (f"{counts['formats']} the same photograph in two formats (kept together), "
                      if counts["formats"] else "")
                   + f"{counts['near']} near, {counts['scene']} same scene; "
                   f"{len(extras)} extra copies ({', '.join(acted)})"
                   + (f", {links} {'hard link' if links == 1 else 'hard links'} of a keeper (no space of "
                      f"{'its' if links == 1 else 'their'} own)" if links else ""), err=True)


def _act(idx, groups, action, kinds, to_dir, named, yes, plan_path, ctx) -> None:
    import time
    from pathlib import Path

    from retrieval.app.duplicates.actions import apply_plan, dry_run_text, plan_actions

    docs = [g.to_json() for g in groups]
    for d in docs:
        d["keeper"] = d["keeper_path"]
    try:
        plan = plan_actions(docs, action, kinds=kinds, to=to_dir, groups_named=named, index_path=str(idx.path),
                            roots=idx.roots)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for line in dry_run_text(plan):
        click.echo(line)
    if not yes:
        click.echo(f"dry run: {len(plan['steps'])} files would be acted on; nothing changed (add --yes to do it).",
                   err=True)
        return
    if plan_path is None:
        folder = Path(idx.path) / "duplicate-plans"
        folder.mkdir(exist_ok=True)
        plan_path = folder / f"plan-{time.strftime('%Y%m%d-%H%M%S')}-{action}.json"
    summary = apply_plan(idx, plan, plan_path=str(plan_path))
    click.echo(f"{summary['done']} files {action}d, {summary['skipped']} skipped, {summary['failed']} failed; "
               f"{summary['freed']}. Undo: retrieval duplicates --index {idx.path} --undo {plan_path}", err=True)
    if summary["failed"]:
        ctx.exit(1)


def _undo(idx, plan_path, ctx) -> None:
    from retrieval.app.duplicates.undo import undo_plan

    try:
        summary = undo_plan(idx, plan_path)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"{summary['restored']} files restored, {summary['skipped']} skipped, {summary['failed']} failed "
               f"({plan_path}).", err=True)
    if summary["failed"]:
        ctx.exit(1)


def _against(idx, against, options, out, ctx) -> None:
    from pathlib import Path

    from retrieval.app.duplicates import find_against
    from retrieval.core.progress import callback_for, progress_bar
    from retrieval.features.image import is_image_name

    p = Path(against)
    if p.is_dir():
        paths = sorted(str(f) for f in p.rglob("*") if f.is_file() and is_image_name(f.name))
    elif p.is_file():
        paths = [str(p)]
    else:
        raise click.BadParameter(f"{against}: no such file or folder.", param_hint="--against")
    with progress_bar(len(paths), "checking", enabled=not quiet_requested(ctx), unit="img") as bar:
        found = find_against(idx, paths, progress=callback_for(bar), **options)
    for e in found:
        if e["error"]:
            click.echo(f"skipped: {e['error']}", err=True)
    docs = [{"path": e["path"], "kind": e["kind"],
             "matches": [{"id": m["id"], "path": m["path"], "kind": m["kind"]} for m in e["matches"]]}
            for e in found]

    def table():
        click.echo("kind   matches  path")
        for d in docs:
            if not d["matches"]:
                click.echo(f"{'-':5}  {0:7d}  {d['path']}")
            kinds = [k for k in KINDS if any(m["kind"] == k for m in d["matches"])]
            for n, kind in enumerate(kinds):        # one line per match: the count of each kind, then its paths
                of_kind = [m["path"] for m in d["matches"] if m["kind"] == kind]
                for i, match in enumerate(of_kind):
                    head = f"{kind:5}  {len(of_kind):7d}" if i == 0 else " " * 14
                    shown = d["path"] if n == 0 and i == 0 else " " * len(d["path"])
                    click.echo(f"{head}  {shown}  ->  {match}")

    present = [d["path"] for d in docs if d["kind"] is not None]
    if out.fmt == "jsonl":
        out.lines(docs)
    else:
        out.records(docs, columns=AGAINST_COLUMNS, table=table, paths=present, document=docs)
    if not quiet_requested(ctx):
        click.echo(f"{len(present)} of {len(docs)} new photos already in the index "
                   f"({sum(d['kind'] == 'exact' for d in docs)} exact, {sum(d['kind'] == 'near' for d in docs)} "
                   f"near, {sum(d['kind'] == 'scene' for d in docs)} same scene)", err=True)
