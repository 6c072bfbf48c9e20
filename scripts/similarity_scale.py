"""Measure what ``similarity`` values mean on real photos: their distribution for true pairs and unrelated pairs.

A group spec (``retrieval eval run groups --spec``: groups of photos of one scene or object) is cut to its first
whole groups holding at least ``--images`` photos; one index per preset is built over them (trained on them, as
docs/results.md's transductive runs; the features extracted once into ``WORK/features``), and every photo is
searched (``rerank=none``: the first-stage similarity, what every hit reports, k = every photo). Each ordered pair
(query, other photo) is a *true pair* when both are in one group, *unrelated* otherwise. Printed per preset: the
query photo's own similarity (min and max: 1 by construction), the percentiles 5/25/50/75/95 and the maximum of
true and unrelated pairs, of each query's best true photo and of its best unrelated photo, and for thresholds t the
share of true pairs scoring >= t and the unrelated pairs scoring >= t per 10,000 (about the number of unrelated
photos above t for one query in a collection of 10,000).

    .venv/bin/python scripts/similarity_scale.py --spec ../shared/data/real/holidays805.json --images 300 \\
        --presets default,accurate,object --work /tmp/similarity-scale

Results as JSON with ``--json FILE``; the Markdown tables of docs/results.md ("Similarity: what the numbers mean")
on stdout. Uses the public Python API only (``Index.create``, ``add``, ``search``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

PERCENTILES = (5, 25, 50, 75, 95)
THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8)


def spec_subset(spec_path: Path, n_images: int) -> tuple[list[str], dict[str, int]]:
    """The first whole groups of the spec holding at least ``n_images`` photos: (paths, path -> group number)."""
    spec = json.loads(spec_path.read_text("utf-8"))
    paths, group = [], {}
    for g, entry in enumerate(spec["groups"]):
        if len(paths) >= n_images:
            break
        for rel in entry["images"]:
            p = str((spec_path.parent / rel).resolve())
            if p not in group:
                paths.append(p)
                group[p] = g
    return paths, group


def pair_similarities(idx, paths: list[str], group: dict[str, int]) -> dict:
    """Every photo searched (first stage, k = every photo): own, true-pair and unrelated-pair similarities."""
    own, true, unrelated, best_unrelated, best_true = [], [], [], [], []
    for n, p in enumerate(paths):
        hits = idx.search(p, k=len(paths), rerank="none")
        sims = {h.path: float(h.similarity) for h in hits}
        own.append(sims.get(p, float("nan")))
        others = [(q, sims.get(q, 0.0)) for q in paths if q != p]   # a photo the first stage left out: 0
        t = [s for q, s in others if group[q] == group[p]]
        u = [s for q, s in others if group[q] != group[p]]
        true += t
        unrelated += u
        if t:
            best_true.append(max(t))
        best_unrelated.append(max(u) if u else 0.0)
        if (n + 1) % 50 == 0:
            print(f"  {n + 1}/{len(paths)} queries", file=sys.stderr)
    return {"own": own, "true": true, "unrelated": unrelated, "best_unrelated": best_unrelated,
            "best_true": best_true}


def summary(values: dict) -> dict:
    true, unrelated = np.asarray(values["true"]), np.asarray(values["unrelated"])
    out = {"own_min": float(np.nanmin(values["own"])), "own_max": float(np.nanmax(values["own"])),
           "n_true": int(len(true)), "n_unrelated": int(len(unrelated))}
    for name in ("true", "unrelated", "best_unrelated", "best_true"):
        v = np.asarray(values[name])
        out[name] = [round(float(x), 3) for x in (*np.percentile(v, PERCENTILES), v.max())]
    out["thresholds"] = {}
    for t in THRESHOLDS:
        nt, nu = int((true >= t).sum()), int((unrelated >= t).sum())
        out["thresholds"][str(t)] = {"true_pairs": nt, "unrelated_pairs": nu,
                                     "recall": round(nt / len(true), 3) if len(true) else None,
                                     "unrelated_per_10000": round(1e4 * nu / len(unrelated), 2)
                                     if len(unrelated) else None}
    return out


def markdown(results: dict) -> str:
    lines = ["| set | preset | pairs | p5 | p25 | p50 | p75 | p95 | max |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, r in results.items():
        set_name, preset = key.split("/")
        for name, label in (("true", "true pairs"), ("unrelated", "unrelated pairs"),
                            ("best_true", "best true photo of a query"),
                            ("best_unrelated", "best unrelated photo of a query")):
            lines.append(f"| {set_name} | {preset} | {label} | " + " | ".join(f"{v:.2f}" for v in r[name]) + " |")
    lines += ["", "| set | preset | " + " | ".join(f">= {t}" for t in THRESHOLDS) + " |",
              "| --- | --- | " + " | ".join("---" for _ in THRESHOLDS) + " |"]
    for key, r in results.items():
        set_name, preset = key.split("/")
        cells = []
        for t in THRESHOLDS:
            c = r["thresholds"][str(t)]
            cells.append(f"{c['recall']:.2f} / {c['unrelated_per_10000']:g}")
        lines.append(f"| {set_name} | {preset} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, action="append", required=True, help="group spec JSON (repeatable)")
    ap.add_argument("--images", type=int, default=300, help="photos per spec (whole groups; default 300)")
    ap.add_argument("--presets", default="default,accurate,object")
    ap.add_argument("--work", type=Path, required=True, help="folder for the indexes and the shared features")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    from retrieval.app.index import Index

    a.work.mkdir(parents=True, exist_ok=True)
    results = {}
    for spec in a.spec:
        paths, group = spec_subset(spec, a.images)
        print(f"{spec.stem}: {len(paths)} photos in {len(set(group.values()))} groups", file=sys.stderr)
        for preset in a.presets.split(","):
            idx = Index.create(a.work / f"{spec.stem}-{len(paths)}-{preset}", preset,
                               feature_store=a.work / "features", exist_ok=True)
            idx.add(paths)
            print(f" {preset}: searching", file=sys.stderr)
            results[f"{spec.stem}/{preset}"] = summary(pair_similarities(idx, paths, group))
            idx.close()
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
