#!/usr/bin/env python
"""Pair precision and recall of ``retrieval duplicates`` on a folder with known groups.

``--set ukbench``: UKBench images 0-399 (../shared/data/real/ukbench400; each group of 4 consecutive images is one
object photographed 4 times, so a reported pair is right when both images are of one group); ``--set demo``: the
``retrieval demo`` folder (scikit-image photos and generated views: a pair is right when both files show one
photo, or the two halves of the motorcycle stereo pair). Builds the index (preset ``--preset``, ``--workers 1``)
in ``--work`` when it is not there yet, then runs ``find_duplicates`` as ``retrieval duplicates`` does.

Pairs: every pair of images inside a reported group (stricter than the linked pairs); precision = right / reported;
recall = right reported / all true pairs.

Usage:
    python scripts/duplicates_eval.py --set ukbench --work /tmp/dup-ukb --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def truth_ukbench(work: Path) -> tuple[Path, dict]:
    src = (ROOT / ".." / "shared" / "data" / "real" / "ukbench400").resolve()
    if not src.is_dir():
        sys.exit(f"not found: {src}")
    return src, {str(p): int(re.findall(r"\d+", p.name)[0]) // 4 for p in sorted(src.glob("*.jpg"))}


def truth_demo(work: Path) -> tuple[Path, dict]:
    from retrieval.app.demo_data import build_demo_folder

    photos = work / "photos"
    made = build_demo_folder(photos)
    group = {}
    for p in made["photos"]:
        name = Path(p).stem
        group[str(Path(p).resolve())] = "motorcycle" if name.startswith("motorcycle_") else name
    for name, views in made["views"].items():
        for p in views:
            group[str(Path(p).resolve())] = "motorcycle" if name.startswith("motorcycle_") else name
    return photos, group


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=["ukbench", "demo"], required=True)
    ap.add_argument("--work", required=True, help="Scratch folder (photos for demo, the index).")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--candidates", type=int, default=10)
    ap.add_argument("--min-inliers", type=int, default=None)
    ap.add_argument("--pairs", default=None, help="Write every linked pair (paths, kind, similarity, inliers, right) "
                    "to this JSON file.")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from retrieval.app.duplicates import find_duplicates
    from retrieval.app.index import Index

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    photos, truth = (truth_ukbench if args.set == "ukbench" else truth_demo)(work)
    idx_dir = work / f"index-{args.preset}"
    if not (idx_dir / "catalog.db").exists():
        idx = Index.create(idx_dir, preset=args.preset, exist_ok=True)
        idx.sync(photos, workers=1)
    idx = Index.open(idx_dir)
    t0 = time.perf_counter()
    extra = {} if args.min_inliers is None else {"min_inliers": args.min_inliers}
    groups = find_duplicates(idx, threshold=args.threshold, candidates=args.candidates, **extra)
    seconds = time.perf_counter() - t0
    reported = set()
    linked = {"exact": 0, "near": 0, "scene": 0}
    for g in groups:
        paths = [os.path.realpath(im["path"]) for im in g.images]
        reported |= {frozenset(p) for p in itertools.combinations(paths, 2)}
        for p in g.pairs:
            linked[p.kind] += 1
    right = {p for p in reported if len({truth[q] for q in p}) == 1}
    if args.pairs:
        by_id = {im["id"]: os.path.realpath(im["path"]) for g in groups for im in g.images}
        Path(args.pairs).write_text(json.dumps([{**p.to_json(), "a_path": by_id[p.a], "b_path": by_id[p.b],
                                                 "right": truth[by_id[p.a]] == truth[by_id[p.b]]}
                                                for g in groups for p in g.pairs]))
    members: dict = {}
    for path, grp in truth.items():
        members.setdefault(grp, []).append(path)
    n_true = sum(len(v) * (len(v) - 1) // 2 for v in members.values())
    res = {"set": args.set, "preset": args.preset, "images": len(truth), "groups": len(groups),
           "reported_pairs": len(reported), "right_pairs": len(right),
           "precision": round(len(right) / len(reported), 4) if reported else None,
           "true_pairs": n_true, "recall": round(len(right) / n_true, 4) if n_true else None,
           "linked_pairs_by_kind": linked, "threshold": args.threshold, "min_inliers": args.min_inliers, "candidates": args.candidates,
           "seconds": round(seconds, 1),
           "wrong": sorted(sorted(Path(q).name for q in p) for p in reported - right)[:20]}
    print(json.dumps(res, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
