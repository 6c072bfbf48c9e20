"""INRIA Holidays loader (Jegou, Douze, Schmid, ECCV 2008).

Layout: ``ROOT/jpg/<number>.jpg`` (1491 images; see the manifest ``holidays``), optionally the rotation-corrected
copy in ``ROOT/jpg_rotated/`` with the same names (``rotated=True``).

EXIF policy: images are read through :func:`retrieval.features.load_image`, which applies the EXIF orientation
tag when the file has one. The official Holidays files are stored as shot and many portrait photos carry no usable
tag, so roughly 5-10 % of them appear sideways; the ground truth was made on these files, and the papers of seed
002 report figures on them. The rotation-corrected copy (turned upright by hand) gives higher figures; reports state
which copy was used (``notes``). Every image is both in the database and, for the 500 with number % 100 == 0, a
query; the query is excluded from its own list (``holidays_map.py``).
"""

from __future__ import annotations

from pathlib import Path

from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.datasets.manifest import fileset, load_manifest, require_files
from retrieval.evaluation.holidays import parse_holidays_gt, score_holidays, write_holidays_results

EXIF_POLICY = ("EXIF orientation applied when present (retrieval.features.load_image); the official files are "
               "mostly untagged, so some photos are sideways, as in the papers' figures")


def load_holidays(root, *, rotated: bool = False) -> RetrievalDataset:
    """Load Holidays from ``root`` (``FileNotFoundError`` listing the missing images)."""
    root = Path(root)
    manifest = load_manifest("holidays")
    names = fileset(manifest, "images")["names"]
    folder = "jpg_rotated" if rotated else "jpg"
    if rotated:
        manifest = dict(manifest, filesets=[dict(fileset(manifest, "images"), folder=folder)])
    require_files(manifest, root)
    gt = parse_holidays_gt(names)
    paths = {n: root / folder / n for n in names}
    queries = [Query(name=q, path=paths[q], image=q) for q in gt.queries]

    def scorer(rankings):
        s = score_holidays({q: list(r) for q, r in rankings.items()}, gt)
        return {"protocol": "holidays", "mAP": s.mAP, "per_query": s.per_query, "missing_queries": s.missing}

    def writer(rankings, folder_out):
        folder_out.mkdir(parents=True, exist_ok=True)
        out = folder_out / "holidays_results.dat"
        write_holidays_results(out, rankings)
        return [out]

    notes = [f"EXIF policy: {EXIF_POLICY}", f"images: {'rotation-corrected copy' if rotated else 'official files'}"]
    return RetrievalDataset(name="holidays" + ("_rotated" if rotated else ""), root=root, database=list(names),
                            paths=paths, queries=queries, exclude_query=True, scorer=scorer, writer=writer,
                            notes=notes)
