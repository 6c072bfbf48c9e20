"""CLI commands of issue 8 (evaluation): eval score, eval run, data download."""

from __future__ import annotations

import json
import math

import click

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401

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
@click.option("--json", "as_json", is_flag=True, help="Print {protocol, mAP, per_query} as JSON.")
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
