"""Jegou et al. 2012, Fig. 4 on real images: projection + quantisation error of PCA-D' + random rotation + ADC 16x8
(128-bit codes) on Fisher vectors, as a function of D'; prints the curve and the chosen D' (eq. 27-28).

Fisher vectors (K=64 on RootSIFT reduced to 64-d by PCA, power + L2 normalised: D = 4096) of every image under
../shared/data and of 8 sub-windows of each (the windows multiply the learning set beyond the 256 vectors
an 8-bit sub-quantiser needs; every vector is still the FV of real image content). The images are split in
two halves: vectors of the first half form the learning set L, of the second the evaluation set.

    .venv/bin/python scripts/indexing_fig4.py [--code-size 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from retrieval.aggregation import FisherVector, PCAProjection
from retrieval.codes import select_dim
from retrieval.features import FeatureExtractor, root_sift, select_in_box

log = logging.getLogger("fig4")


def windows(w, h):
    """8 sub-windows (x1, y1, x2, y2): 4 quadrants at 60 %, the centre, and the left/right/top halves."""
    a, b = 0.6 * w, 0.6 * h
    return [(0, 0, a, b), (w - a, 0, w, b), (0, h - b, a, h), (w - a, h - b, w, h),
            (0.2 * w, 0.2 * h, 0.8 * w, 0.8 * h), (0, 0, 0.5 * w, h), (0.5 * w, 0, w, h), (0, 0, w, 0.5 * h)]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--code-size", type=int, default=16)
    ap.add_argument("--K", type=int, default=64)
    ap.add_argument("--nbits", type=int, default=8)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N images (smoke test)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    root = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    # the 114 shared images (the independent benchmark photos of data/real/ are not part of this figure)
    paths = sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".ppm", ".pgm")
                   and "real" not in p.relative_to(root).parts)
    if args.limit:
        paths = paths[:args.limit]
    ex = FeatureExtractor("hesaff")
    sets = []  # (image index, descriptors)
    for i, p in enumerate(paths):
        try:
            f = ex(p)
        except ValueError as exc:
            log.warning("skip %s: %s", p, exc)
            continue
        if len(f) == 0:
            log.warning("skip %s: no features", p)
            continue
        d = root_sift(f.descriptors)
        xy = f.xy
        w, h = xy[:, 0].max() + 1, xy[:, 1].max() + 1
        sets.append((i, d))
        for box in windows(w, h):
            m = select_in_box(f, box)
            if m.sum() >= 50:
                sets.append((i, d[m]))
    log.info("%d images, %d descriptor sets", len(paths), len(sets))
    img = np.array([s[0] for s in sets])
    learn = img < np.median(np.unique(img))
    rng = np.random.default_rng(0)
    sample = np.concatenate([s[1] for s, lm in zip(sets, learn, strict=True) if lm])
    sample = sample[rng.choice(len(sample), min(200_000, len(sample)), replace=False)]
    lpca = PCAProjection(64, random_state=0).fit(sample)
    fv = FisherVector(args.K, random_state=0).fit(lpca.transform(sample))
    V = fv.transform([lpca.transform(s[1]) for s in sets])
    res = select_dim(V[learn], args.code_size, X_eval=V[~learn], nbits=args.nbits, random_state=0)
    out = res.as_dict()
    out.update(n_learn=int(learn.sum()), n_eval=int((~learn).sum()), D=int(V.shape[1]), K=args.K,
               n_images=len(paths))
    print(f"Fisher K={args.K} D={V.shape[1]}, ADC {res.M}x{res.nbits} ({args.code_size} bytes); "
          f"learn {out['n_learn']} / eval {out['n_eval']} vectors")
    print("D'      e_p      e_q      e")
    for dd, a, b, c in zip(res.dims, res.projection_error, res.quantization_error, res.total_error, strict=True):
        print(f"{dd:5d} {a:8.4f} {b:8.4f} {c:8.4f}{'  <- chosen' if dd == res.best_dim else ''}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
