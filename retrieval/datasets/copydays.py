"""INRIA Copydays loader (Douze et al., CIVR 2009), with optional distractors.

Layout of the release: ``ROOT/original/<n>.jpg`` (157), ``ROOT/crops/<percent>/<n>.jpg``,
``ROOT/jpegqual/<quality>/<n>.jpg``, ``ROOT/strong/<n>.jpg``. Database = originals (+ every ``*.jpg`` below
``distractors_root``, named ``distractors/<relative path>``); queries = every transformed image; mAP per
transformation family (:func:`retrieval.evaluation.copydays.score_copydays`).
"""

from __future__ import annotations

from pathlib import Path

from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.datasets.manifest import load_manifest, require_files
from retrieval.datasets.oxford import list_distractors
from retrieval.evaluation.copydays import score_copydays


def load_copydays(root, *, distractors_root=None) -> RetrievalDataset:
    """Load Copydays from ``root``."""
    root = Path(root)
    require_files(load_manifest("copydays"), root)
    originals = sorted(f"original/{p.name}" for p in (root / "original").glob("*.jpg"))
    paths = {n: root / n for n in originals}
    database = list(originals)
    if distractors_root is not None:
        extra = list_distractors(distractors_root, prefix="distractors")
        paths.update(extra)
        database += list(extra)
    queries = []
    for family in ("crops", "jpegqual", "strong"):
        for p in sorted((root / family).rglob("*.jpg")):
            queries.append(Query(name=p.relative_to(root).as_posix(), path=p))
    known = set(database)

    def scorer(rankings):
        out = score_copydays(rankings, originals, database=known)
        return {"protocol": "copydays", **out}

    return RetrievalDataset(name="copydays", root=root, database=database, paths=paths, queries=queries,
                            scorer=scorer, notes=["mAP per transformation family"])
