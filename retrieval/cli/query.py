"""``retrieval query``: the command line's edge of a search, and how hits are printed.

The options become one :class:`~retrieval.engine.params.SearchParams` here (``--top`` is ``k``, ``--scoring`` the
``method``, ``--qe`` the ``query_expansion``); a value the library refuses is worded with the option that set it
by the command group (:func:`retrieval.cli.groups.flag_of`), from the error's fields.
"""

from __future__ import annotations

import os

import click

from retrieval.cli.groups import main
from retrieval.cli.options import (
    box_option,
    check_image_file,
    check_output_extension,
    deprecated_alias,
    index_dir_of,
    index_option,
    use_alias,
    verification_cache_mb,
)
from retrieval.cli.output import Output, format_options
from retrieval.cli.scale import cluster_option, open_client
from retrieval.engine.params import SearchParams

QUERY_HEADER = f"{'rank':>4}  {'score':>7}  {'similarity':>10}  {'verified':8}  {'inliers':>7}  {'box':19}  path"
"""The column header of the ``retrieval query`` table (docs/cli.md)."""


def format_hit(h) -> str:
    """One row of the ``retrieval query`` table: rank, score, similarity, ``yes`` / ``no`` (verified), inliers and
    box (``-`` when unverified), path (last: it may hold spaces)."""
    sim = "-" if h.similarity is None else f"{h.similarity:.4f}"
    inl = "-" if h.inliers is None else str(int(h.inliers))
    box = "-" if h.box is None else ",".join(f"{v:.0f}" for v in h.box)
    return (f"{h.rank:4d}  {h.score:7.4f}  {sim:>10}  {'yes' if h.verified else 'no':8}  {inl:>7}  {box:19}  "
            f"{h.path}")


HIT_COLUMNS = ["id", "rank", "score", "similarity", "verified", "inliers", "box", "distance", "path"]
"""The columns of ``retrieval query --format csv``."""


def print_hits(hits, out: Output | bool) -> None:
    if isinstance(out, bool):
        out = Output("json" if out else "table")

    def table():
        click.echo(QUERY_HEADER)
        for h in hits:
            click.echo(format_hit(h))

    out.records([h.to_json() for h in hits], columns=HIT_COLUMNS, table=table)


@main.command("query")
@click.argument("image")
@index_option
@box_option("Restrict the query to a box (pixels of the original image after EXIF rotation).")
@click.option("--top", "-k", "k", type=click.IntRange(1, None), default=10, show_default=True,
              help="Number of results.")
@format_options(json_help="Same as --format json: a JSON list of {id, rank, path, score, inliers?, box?, "
                          "similarity, verified, distance?}.")
@click.option("--html", "html_path", default=None, metavar="FILE", help="Write a self-contained HTML gallery.")
@click.option("--scoring", "method", default=None, help="How hits are scored, among the preset's choices (global: "
              "ip; binary: hamming, expectation, lower_bound; object: l1, l2, delta1, delta2, asmk).")
@deprecated_alias("--method", "--scoring")
@click.option("--alpha", type=float, default=None, help="alpha_1 / alpha_2 of delta_1 / delta_2, or the selectivity exponent of "
              "asmk (object presets).")
@click.option("--rerank", default=None, help="Re-ranking: none, spatial (object: also exact).")
@click.option("--qe", "qe", type=click.IntRange(0, None), default=None, metavar="N",
              help="Average query expansion from the N best verified hits (0: off; needs spatial re-ranking) "
                   "[default: the preset's search.query_expansion].")
@click.option("--min-similarity", type=float, default=None, metavar="S",
              help="Of the best hits, only those verified or of at least this similarity (0 to 1); nothing above it "
                   "is said in one line.")
@click.option("--verified-only", is_flag=True, help="Of the best hits, only those verified (the same object or "
              "place was found in them; needs spatial re-ranking).")
@click.option("--exclude-duplicates", is_flag=True,
              help="Drop hits that are exact copies or near duplicates (resized, re-encoded) of the query or of a "
                   "better-ranked hit; the query's own photo stays, first, and photos of the same scene stay.")
@cluster_option("Search a sharded index's shards on the workers of the Dask cluster at ADDRESS [default: "
                "$RETRIEVAL_DASK_SCHEDULER].")
@click.pass_context
def query_cmd(ctx, image, index_dir, bbox, k, out, html_path, method, deprecated_method, alpha, rerank, qe,
              min_similarity, verified_only, exclude_duplicates, cluster):
    """Search the index with IMAGE: an indexed image (path or id) or any image file.

    The table has a header line; hits are ordered verified first (by inliers), then by similarity, and the score
    column never increases down the list (docs/formats.md, "Scores").
    """
    method = use_alias(method, deprecated_method, "--method", "--scoring")
    check_output_extension(html_path, (".html", ".htm"), "--html")
    from retrieval.app.index import Index

    idx = Index.open(index_dir_of(index_dir), verification_cache_mb=verification_cache_mb())
    check_image_file(image)
    idx.use_cluster(open_client(ctx, cluster))
    params = SearchParams(k=3 * k + 5 if exclude_duplicates else k, method=method, rerank=rerank, query_expansion=qe,
                          alpha=alpha, min_similarity=min_similarity, verified_only=verified_only)
    hits = idx.search(image, bbox=bbox, params=params)   # a refused value is worded with its option (flag_of)
    if exclude_duplicates:
        from retrieval.app.duplicates import exclude_duplicates as drop_duplicates

        hits, _ = drop_duplicates(idx, image, hits, k)
    print_hits(hits, out)
    if not hits and (min_similarity is not None or verified_only):
        cut = "verified" if verified_only else f"verified or of similarity >= {min_similarity:g}"
        click.echo(f"nothing similar: none of the {k} best hits is {cut}.", err=True)
    if html_path:
        from retrieval.app.gallery import write_gallery
        from retrieval.features import parse_box

        feats_row = idx.query_features(image)[1]
        qpath = feats_row["path"] if feats_row else image
        write_gallery(html_path, qpath, hits, query_box=None if bbox is None else parse_box(bbox),
                      title=f"query: {os.path.basename(str(qpath))}")
        click.echo(f"gallery written to {html_path}", err=True)
