"""Oxford5k / Paris6k loaders (Philbin et al. 2007, 2008), and Oxford105k / Paris106k with the Flickr100k distractors.

Layout: ``ROOT/jpg/<name>.jpg`` and the official ground-truth folder (``gt_files_170407/`` for Oxford,
``gt_files_120310/`` for Paris; see the manifests). Queries are the 55 ``<query>_query.txt`` entries; each is
searched with its box (``Query.box``, x1 y1 x2 y2 in original pixels): the query image is cropped to its box, as in
the official protocol. Scoring is :func:`retrieval.evaluation.oxford.score_oxford` (``compute_ap.cpp``).
Distractors (``distractors_root``, e.g. the unpacked Flickr100k) are every ``*.jpg`` below that folder, named
``flickr100k/<relative path>`` in rankings; they are negatives for every query.
"""

from __future__ import annotations

from pathlib import Path

from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.datasets.manifest import check_files, fileset, load_manifest, require_files
from retrieval.evaluation.oxford import load_oxford_gt, normalize_name, score_oxford, write_results_folder


def list_distractors(distractors_root, prefix: str = "flickr100k", expected: int | None = None) -> dict:
    """``{prefix/relative path: Path}`` for every ``*.jpg`` under ``distractors_root`` (sorted)."""
    droot = Path(distractors_root)
    if expected is not None:
        m = load_manifest(prefix) if prefix in ("flickr100k", "r1m") else None
        if m is not None:
            rep = check_files(dict(m, filesets=[dict(m["filesets"][0], folder=".")]), droot)
            if not rep.ok:
                raise FileNotFoundError(rep.message())
    files = sorted(p for p in droot.rglob("*.jpg") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no .jpg distractor under {droot}.")
    return {f"{prefix}/{p.relative_to(droot).as_posix()}": p for p in files}


def load_oxford(root, name: str = "oxford5k", *, distractors_root=None, check_distractors: bool = True):
    """Load Oxford5k or Paris6k (``name``), with distractors for Oxford105k / Paris106k."""
    if name not in ("oxford5k", "paris6k"):
        raise ValueError(f"name must be 'oxford5k' or 'paris6k'; got {name!r}.")
    root = Path(root)
    manifest = load_manifest(name)
    require_files(manifest, root)
    names = fileset(manifest, "images")["names"]
    gt = load_oxford_gt(root / fileset(manifest, "ground truth")["folder"])
    paths = {n: root / "jpg" / n for n in names}
    database = list(names)
    label = name
    if distractors_root is not None:
        extra = list_distractors(distractors_root, expected=100071 if check_distractors else None)
        paths.update(extra)
        database += list(extra)
        label = {"oxford5k": "oxford105k", "paris6k": "paris106k"}[name]
    queries = [Query(name=q, path=paths[f"{g.image}.jpg"], box=g.box, image=f"{g.image}.jpg") for q, g in gt.items()]

    def scorer(rankings):
        s = score_oxford({q: list(r) for q, r in rankings.items()}, gt, database=database, protocol=label)
        return {"protocol": label, "mAP": s.mAP, "per_query": s.per_query}

    def writer(rankings, folder):
        write_results_folder(folder, {q: [normalize_name(n) for n in r] for q, r in rankings.items()})
        return [folder / f"{q}.txt" for q in rankings]

    return RetrievalDataset(name=label, root=root, database=database, paths=paths, queries=queries,
                            scorer=scorer, writer=writer,
                            notes=["queries cropped to their box (official protocol)",
                                   "positives = good + ok, junk ignored (compute_ap.cpp)"])
