"""CLI commands for features: extract, match, bench extract, bench match, bench verify."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from retrieval.cli.groups import bench, main
from retrieval.cli.options import (
    PICTURE_FORMATS,
    box_option,
    check_image_file,
    check_output_extension,
    deprecated_alias,
    json_option,
    use_alias,
    write_picture,
)
from retrieval.cli.output import format_options


def _parse_params(items) -> dict:
    """``KEY=VALUE`` strings -> dict, VALUE read as JSON when possible (1.0, true, 3), else as a string."""
    out = {}
    for it in items:
        if "=" not in it:
            raise click.BadParameter(f"expected KEY=VALUE, got {it!r}.", param_hint="--param")
        k, v = it.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def _extractor(detector, max_side, params, rotation_invariant=False):
    from retrieval.features import FeatureExtractor

    params = dict(params)
    if rotation_invariant:
        params["rotation_invariance"] = True
    return FeatureExtractor(detector, max_side=None if max_side == 0 else max_side, **params)


@main.command("extract")
@click.argument("image", type=click.Path(dir_okay=False))
@click.option("--detector", default="hesaff", show_default=True, help="hesaff, sift or dense.")
@click.option("--max-side", type=int, default=1024, show_default=True,
              help="Working image size (larger side, pixels; 0 = full resolution).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Detector parameter, repeatable (e.g. --param threshold=1.0 --param rotation_invariance=true).")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="Write the features to this .npz (frames, descriptors, image_size, header).")
@json_option()
def extract_cmd(image, detector, max_side, params, out, as_json):
    """Extract the local features of IMAGE: number of features and time."""
    check_image_file(image)
    from retrieval.features.store import save_features

    ex = _extractor(detector, max_side, _parse_params(params))
    t0 = time.perf_counter()
    f = ex(image)
    dt = time.perf_counter() - t0
    if out:
        save_features(out, f)
    res = {"image": str(image), "n_features": len(f), "image_size": list(f.image_size), "seconds": round(dt, 4),
           "detector": detector, "config_key": ex.config_key, "out": out}
    if as_json:
        click.echo(json.dumps(res, ensure_ascii=False))
    else:
        click.echo(f"{image}: {len(f)} features ({detector}, image {f.image_size[0]}x{f.image_size[1]}) "
                   f"in {dt:.3f} s" + (f"; written to {out}" if out else ""))


@main.command("match")
@click.argument("image_a", type=click.Path(dir_okay=False))
@click.argument("image_b", type=click.Path(dir_okay=False))
@click.option("--detector", default="hesaff", show_default=True, help="hesaff, sift or dense.")
@click.option("--max-side", type=int, default=2048, show_default=True,
              help="Working image size (larger side, pixels; 0 = full resolution).")
@click.option("--rotation-invariant", is_flag=True,
              help="Rotation-invariant descriptors (the default upright features do not match rotated images).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="Detector parameter, repeatable.")
@click.option("--ratio", type=float, default=0.9, show_default=True, help="Lowe ratio test (1 = off).")
@click.option("--no-mutual", is_flag=True, help="Do not require mutual nearest neighbours.")
@click.option("--estimator", "method", default=None,
              type=click.Choice(["magsac", "usac_default", "usac_accurate", "ransac", "lmeds"]),
              help="Robust homography estimator (OpenCV USAC)  [default: magsac]")
@deprecated_alias("--method", "--estimator")
@click.option("--threshold", type=float, default=3.0, show_default=True, help="Inlier threshold, pixels.")
@click.option("--no-guided", is_flag=True, help="Skip the guided-matching stage.")
@click.option("--min-inliers", type=int, default=None,
              help="One-to-one inliers needed to verify the pair (default: the calibrated DEFAULT_MIN_INLIERS, "
                   "false-verification rate below 0.1 % on real unrelated pairs).")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="Write a side-by-side picture of the inliers and A's outline in B, in the format of the "
                   "extension (png, jpg, gif, webp, bmp, tif).")
@click.option("--index", "index_dir", type=click.Path(file_okay=False), default=None,
              help="Verify the pair as the index's searches do: IMAGE_B an indexed image (path or id), both sides "
                   "the index's features, its preset's ratio and threshold -- the verdict, inliers and box "
                   "IMAGE_B gets in IMAGE_A's ranked list (the options above are then ignored).")
@box_option("With --index: the query box in IMAGE_A (pixels of the original image after EXIF rotation).")
@format_options(json_help="Same as --format json: {verified, reason, n_features, tentative, inliers, homography, "
                          "params, image_a, image_b, seconds, out}.", dest="output")
@click.pass_context
def match_cmd(ctx, image_a, image_b, detector, max_side, rotation_invariant, params, ratio, no_mutual, method,
              threshold, no_guided, min_inliers, index_dir, bbox, out, output, deprecated_method):
    """Match IMAGE_A to IMAGE_B: tentative matches, geometric verification, homography A -> B.

    The pair is verified by the library's one geometric verification (affine hypotheses from single
    Hessian-affine correspondences, local optimisation, degenerate models rejected, one-to-one inliers); a
    verified pair's homography is refined with OpenCV USAC (--estimator, --threshold). Exit code 0 when verified,
    1 with "no geometric match" (JSON: verified false, homography null) otherwise. --format csv gives one row,
    --format paths the two images when verified (nothing otherwise).

    Homography and points are in pixels of the original images after EXIF orientation (centre of the top-left
    pixel = (0, 0)).

    With --index, the pair is verified by the index's own verifier on its stored features, as a search verifies
    it: the same verdict, inliers and box (JSON adds "box", the query box's bounding box in IMAGE_B).
    """
    if index_dir is not None:
        _match_in_index(ctx, index_dir, image_a, image_b, bbox, out, output)
        return
    if bbox is not None:
        raise click.UsageError("--bbox needs --index (the standalone matcher matches whole images).")
    method = use_alias(method, deprecated_method, "--method", "--estimator") or "magsac"
    check_image_file(image_a, "IMAGE_A")
    check_image_file(image_b, "IMAGE_B")
    check_output_extension(out, PICTURE_FORMATS, "--out")
    from retrieval.rerank.draw import draw_matches
    from retrieval.rerank.matching import match_images

    ex = _extractor(detector, max_side, _parse_params(params), rotation_invariant)
    t0 = time.perf_counter()
    res = match_images(image_a, image_b, extractor=ex, ratio=None if ratio >= 1 else ratio, mutual=not no_mutual,
                       method=method, threshold=threshold, guided=not no_guided, min_inliers=min_inliers)
    dt = time.perf_counter() - t0
    if out:
        ia, ib = res.inlier_pairs[:, 0], res.inlier_pairs[:, 1]
        write_picture(out, draw_matches(image_a, image_b, res.features_a.xy[ia], res.features_b.xy[ib],
                                        homography=res.homography))
    d = res.to_json()
    d.update({"image_a": str(image_a), "image_b": str(image_b), "seconds": round(dt, 3), "out": out})
    if not output.is_table:
        output.records([d], columns=["image_a", "image_b", "verified", "reason", "tentative", "inliers",
                                     "n_features", "homography", "seconds", "out"], table=None,
                       paths=[str(image_a), str(image_b)] if res.verified else [], document=d)
    elif not res.verified:
        click.echo(f"no geometric match ({res.tentative} tentative matches; {res.reason})")
    else:
        click.echo(f"features: {res.n_features[0]} in A, {res.n_features[1]} in B")
        click.echo(f"tentative matches: {res.tentative}")
        click.echo(f"inliers: {res.inliers} (verified)")
        click.echo("homography A -> B:")
        for row in res.homography:
            click.echo("  " + "  ".join(f"{v: .6g}" for v in row))
        if out:
            click.echo(f"picture: {out}")
    if not res.verified:
        ctx.exit(1)


def _match_in_index(ctx, index_dir, image_a, image_b, bbox, out, output) -> None:
    """``retrieval match A B --index DIR``: :meth:`Index.match <retrieval.app.index.Index.match>`."""
    import numpy as np

    from retrieval.app.index import Index
    from retrieval.app.matches import match_record
    from retrieval.rerank.draw import draw_matches

    idx = Index.open(index_dir)
    row = None
    if str(image_b).isdigit() and not os.path.exists(image_b):
        image_id = int(image_b)
        row = idx.catalog.row_by_id(image_id) if image_id < (1 << 63) else None
    else:
        row = idx.catalog.row_by_path(os.path.abspath(os.path.expanduser(str(image_b))))
    if row is None or row["status"] != "indexed":
        raise ValueError(f"IMAGE_B {image_b!r} is not an indexed image of {index_dir} (give its path or id).")
    if not (str(image_a).isdigit() and not os.path.exists(image_a)):
        check_image_file(image_a, "IMAGE_A")
    t0 = time.perf_counter()
    m = idx.match(image_a, row["id"], bbox=bbox)
    dt = time.perf_counter() - t0
    d = match_record(m, a_id=m.query.image_id, b_id=row["id"], b_path=row["path"], box_given=bbox is not None)
    if out:
        check_output_extension(out, PICTURE_FORMATS, "--out")
        if m.query.path is None:
            raise ValueError("--out needs IMAGE_A's file.")
        write_picture(out, draw_matches(m.query.path, row["path"], np.asarray(d["points_a"]).reshape(-1, 2),
                                        np.asarray(d["points_b"]).reshape(-1, 2),
                                        homography=None if d["homography"] is None else np.asarray(d["homography"])))
    d.update({"image_a": str(image_a), "image_b": row["path"], "seconds": round(dt, 3), "out": out})
    if not output.is_table:
        output.records([d], columns=["image_a", "image_b", "verified", "reason", "tentative", "inliers", "box",
                                     "n_features", "homography", "seconds", "out"], table=None,
                       paths=[str(image_a), row["path"]] if d["verified"] else [], document=d)
    elif not d["verified"]:
        click.echo(f"no geometric match ({d['tentative']} tentative matches; {d['reason']})")
    else:
        click.echo(f"features: {d['n_features'][0]} in A, {d['n_features'][1]} in B")
        click.echo(f"tentative matches: {d['tentative']}")
        click.echo(f"inliers: {d['inliers']} (verified)")
        click.echo("box in B: " + ",".join(f"{v:g}" for v in d["box"]))
        if out:
            click.echo(f"picture: {out}")
    if not d["verified"]:
        ctx.exit(1)


@bench.command("extract")
@click.option("--images", "images", required=True, type=click.Path(exists=True),
              help="Folder of images (searched recursively) or one image.")
@click.option("--workers", type=int, default=2, show_default=True, help="Workers compared with 1 worker.")
@click.option("--limit", type=int, default=0, help="Use at most this many images (0 = all).")
@click.option("--max-side", type=int, default=1024, show_default=True, help="Working image size.")
@click.option("--rounds", type=int, default=3, show_default=True, help="Repetitions of the overhead timing.")
@click.option("--upscale-to", "upscale_mp", type=float, default=None, metavar="MP",
              help="Benchmark JPEG copies of the images enlarged to MP megapixels (made in a temporary folder, "
                   "removed afterwards): the decoding figures of camera photos.")
@json_option()
@click.pass_context
def bench_extract_cmd(ctx, images, workers, limit, max_side, rounds, upscale_mp, as_json):
    """Extraction speed: images/s, features/image, overhead over raw pyhesaff, scaling with workers, and
    photos/s decoded at the size needed against a full decode."""
    import tempfile

    from retrieval.bench.extract import bench_extract, enlarged_copies
    from retrieval.core.progress import callback_for, progress_bar
    from retrieval.features.image import is_image_name

    p = Path(images)
    paths = [p] if p.is_file() else sorted(q for q in p.rglob("*") if is_image_name(q.name))
    if limit:
        paths = paths[:limit]
    if not paths:
        raise click.ClickException(f"no image files found under {images}.")
    if upscale_mp is not None and not upscale_mp > 0:
        raise click.ClickException(f"--upscale-to {upscale_mp}: expected a positive number of megapixels.")
    with tempfile.TemporaryDirectory(prefix="bench-extract-") as tmp:
        if upscale_mp is not None:
            paths = enlarged_copies(paths, upscale_mp, tmp)
        with progress_bar(None, "overhead timing", enabled=not (ctx.obj or {}).get("quiet")) as bar:
            res = bench_extract(paths, workers=workers, max_side=max_side, rounds=rounds,
                                progress=callback_for(bar))
    res["images"] = str(images)
    res["upscale_to_megapixels"] = upscale_mp
    if as_json:
        click.echo(json.dumps(res, ensure_ascii=False))
        return
    click.echo(f"images: {res['n_images']} (max_side {res['max_side']}), features/image: "
               f"{res['features_per_image']:.0f}")
    click.echo(f"overhead over raw pyhesaff on the same decoded images: x{res['overhead_ratio']:.3f} "
               f"({res['extractor_s']:.2f} s vs {res['raw_pyhesaff_s']:.2f} s, best of {res['rounds']})")
    for w, ips in res["images_per_s"].items():
        click.echo(f"end to end with {w} worker(s): {ips:.2f} images/s")
    click.echo(f"scaling {res['workers']} workers / 1 worker: x{res['scaling']:.2f} including the pool start-up, "
               f"x{res['scaling_warm_pool']:.2f} with a warm pool")
    d = res["decoding"]
    ips = d["images_per_s"]
    click.echo(f"photos of {d['megapixels_per_image']:.1f} MP, one process: {ips['reduced']:.2f} photos/s decoded at "
               f"the size needed, {ips['full_decode']:.2f} decoded in full then resized, {ips['raw_pyhesaff']:.2f} "
               f"raw pyhesaff on the working images (decoding excluded); decoding alone "
               f"{d['decode_s']['reduced']:.2f} s vs {d['decode_s']['full']:.2f} s")


@bench.command("match")
@click.option("--data", type=click.Path(exists=True, file_okay=False), default="../shared/data", show_default=True,
              help="Shared data folder with opencv_samples/ and homogr/.")
@click.option("--detector", default="hesaff", show_default=True, help="hesaff, sift or dense.")
@click.option("--max-side", type=int, default=2048, show_default=True, help="Working image size (0 = full).")
@click.option("--rotation-invariant", is_flag=True, help="Rotation-invariant descriptors.")
@click.option("--plain", is_flag=True, help="The plain pipeline: ratio 0.8, no mutual NN, no guided matching.")
@click.option("--feature-store", type=click.Path(file_okay=False), default=None,
              help="Feature-store folder to reuse extracted features.")
@json_option()
def bench_match_cmd(data, detector, max_side, rotation_invariant, plain, feature_store, as_json):
    """Matching accuracy: graf1 -> graf3 inliers and grid error, median error on the 16 homogr pairs."""
    from retrieval.bench.extract import bench_match, match_parameters
    from retrieval.features.store import FeatureStore

    res = bench_match(data, extractor=_extractor(detector, max_side, {}, rotation_invariant),
                      match_params=match_parameters(plain=plain),
                      store=FeatureStore(feature_store) if feature_store else None)
    if as_json:
        click.echo(json.dumps(res, ensure_ascii=False))
        return
    g = res["graf"]
    click.echo(f"graf1->graf3: {g['n_features'][0]}/{g['n_features'][1]} features, {g['tentative']} tentative, "
               f"{g['inliers']} inliers ({g.get('inliers_within_3px_of_truth')} within 3 px of H13), grid median "
               f"error {g.get('grid_median_px', float('nan')):.2f} px; ratio-0.8 matches within 3 px: "
               f"{g['ratio0.8_within_3px']}")
    for name, p in res["homogr"].items():
        e = "none" if p["median_px"] is None else f"{p['median_px']:.2f} px"
        click.echo(f"  {name:14s} {e:>10s}  ({p['inliers']} inliers)")
    click.echo(f"homogr pairs within 3 px: {res['homogr_within_3px']}/16")


@bench.command("verify")
@click.option("--ukbench", type=click.Path(exists=True, file_okay=False), default="../shared/data/real/ukbench400",
              show_default=True, help="UKBench folder (groups of 4 consecutive image numbers).")
@click.option("--holidays", type=click.Path(exists=True, file_okay=False),
              default="../shared/data/real/holidays805", show_default=True,
              help="Holidays folder (group = first 4 digits of the name).")
@click.option("--pairs", "n_unrelated", type=int, default=20000, show_default=True,
              help="Unrelated pairs in all (half from each set), seeded sample.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the unrelated-pair sample.")
@click.option("--speed-queries", type=int, default=20, show_default=True,
              help="50-image shortlists timed (ours vs OpenCV USAC_MAGSAC; 0 = skip).")
@click.option("--feature-store", type=click.Path(file_okay=False), default=None,
              help="Feature-store folder (features of the default preset, extracted once).")
@click.option("--match-cells", is_flag=True,
              help="Tentative matches as a verifier with match cells makes them (the probed ratio test for pairs of "
                   "at least 1,000,000 descriptor comparisons; cells learnt on both sets).")
@click.option("--query-features", type=click.IntRange(min=0), default=0, show_default=True,
              help="The query side of each pair keeps its N largest features, as the presets' "
                   "search.verify_query_features (1000) makes it; 0: all.")
@click.option("--compact-features", type=click.Choice(["0", "16", "32"]), default="0", show_default=True,
              help="The database side of each pair as a compact feature store returns it (codes of this many bytes "
                   "a descriptor, the codebook learnt on both sets); 0: the full features.")
@click.option("--evidence-words", type=click.IntRange(min=0), default=0, show_default=True,
              help="The database side of each pair as its verification evidence (visual words of a vocabulary of "
                   "this many words and 64-bit Hamming signatures, learnt on both sets; frames in 12 bytes), "
                   "decided by the inliers' Hamming weight; 0: descriptors and the ratio test.")
@json_option()
@click.pass_context
def bench_verify_cmd(ctx, ukbench, holidays, n_unrelated, seed, speed_queries, feature_store, match_cells,
                     query_features, compact_features, evidence_words, as_json):
    """Geometric verification: false- and true-verification rates on real pairs, trade-off table, speed."""
    from retrieval.bench.verify import bench_verify
    from retrieval.core.progress import callback_for, progress_bar
    from retrieval.features.store import FeatureStore

    with progress_bar(None, "pairs", enabled=not (ctx.obj or {}).get("quiet")) as bar:
        res = bench_verify(ukbench, holidays, store=FeatureStore(feature_store) if feature_store else None,
                           n_unrelated=n_unrelated, random_state=seed, speed_queries=speed_queries,
                           progress=callback_for(bar), match_cells=match_cells, query_features=query_features,
                           compact_features=int(compact_features), evidence_words=evidence_words)
    if as_json:
        click.echo(json.dumps(res, ensure_ascii=False))
        return
    for name, r in res["sets"].items():
        click.echo(f"{name}: {r['images']} images; unrelated pairs {r['unrelated_pairs']}: {r['false_verified']} "
                   f"verified ({100 * r['false_rate']:.3f} %); true pairs {r['true_pairs']}: {r['true_verified']} "
                   f"verified ({100 * r['true_rate']:.1f} %); {r['verify_ms_per_pair']:.2f} ms per pair; "
                   f"{r['probed_pairs']} pairs by the probed test")
    a = res["all"]
    decision = "min_weight" if "evidence" in res else "min_inliers"
    click.echo(f"all: {a['unrelated_pairs']} unrelated pairs, false-verification rate {100 * a['false_rate']:.3f} % "
               f"at {decision} {res['min_inliers']}; true-verification rate {100 * a['true_rate']:.1f} %")
    click.echo(f"{decision:>11s}  false (all)  true UKBench  true Holidays")
    for k, row in enumerate(a["tradeoff"]):
        u, h = res["sets"]["ukbench"]["tradeoff"][k], res["sets"]["holidays"]["tradeoff"][k]
        click.echo(f"{row['min_inliers']:>11}  {row['false_verified']:5d} {100 * row['false_rate']:7.3f} %  "
                   f"{u['true_verified']:4d} {100 * u['true_rate']:5.1f} %  {h['true_verified']:4d} "
                   f"{100 * h['true_rate']:5.1f} %")
    if "speed" in res:
        s = res["speed"]
        click.echo(f"speed ({s['queries']} shortlists of {s['shortlist']}, one core): ours "
                   f"{s['ours_ms_per_shortlist']:.1f} ms, OpenCV USAC_MAGSAC {s['usac_magsac_ms_per_shortlist']:.1f} "
                   f"ms (x{s['usac_over_ours']:.2f})")
