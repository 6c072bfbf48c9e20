"""Revisited Oxford / Paris loaders (Radenovic et al., CVPR 2018), optionally with the R1M distractors.

Layout (as revisitop's download script): ``ROOT/jpg/<name>.jpg`` and ``ROOT/gnd_roxford5k.pkl`` (or
``gnd_rparis6k.pkl``), read with the restricted unpickler of :mod:`retrieval.evaluation.revisited`. The 70 queries
are cropped to their ``bbx``; the database is ``imlist`` (queries are not in it), then the R1M distractors
(``r1m_root``, every ``*.jpg`` below it, named ``r1m/<relative path>``). Scoring: Easy / Medium / Hard mAP and
mP@1, 5, 10 (revisitop ``compute_map``); ``write_results`` saves the ranks as ``ranks.npy`` (n_ranked, n_queries).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from retrieval.core.persistence import save_npy_atomic
from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.datasets.manifest import load_manifest, require_files
from retrieval.datasets.oxford import list_distractors
from retrieval.evaluation.revisited import RevisitedGroundTruth, evaluate_revisited, load_revisited_gnd

logger = logging.getLogger(__name__)


def rankings_to_ranks(rankings: dict, queries: list, index: dict) -> np.ndarray:
    """``{query: [names]}`` -> int64 array (k, n_queries) of database indices, k = the shortest list's length."""
    missing = [q for q in queries if q not in rankings]
    if missing:
        raise ValueError(f"no ranked list for {len(missing)} queries: {', '.join(missing[:5])}.")
    k = min(len(rankings[q]) for q in queries)
    if any(len(rankings[q]) != k for q in queries):
        logger.warning("ranked lists have different lengths; scoring the first %d of each", k)
    ranks = np.empty((k, len(queries)), dtype=np.int64)
    for j, q in enumerate(queries):
        for i, n in enumerate(list(rankings[q])[:k]):
            if n not in index:
                raise ValueError(f"results of query {q}: unknown image {n!r}.")
            ranks[i, j] = index[n]
    return ranks


def load_revisited(root, name: str = "roxford5k", *, r1m_root=None) -> RetrievalDataset:
    """Load ROxford5k / RParis6k (``name``) from ``root``, optionally with R1M distractors."""
    if name not in ("roxford5k", "rparis6k"):
        raise ValueError(f"name must be 'roxford5k' or 'rparis6k'; got {name!r}.")
    root = Path(root)
    require_files(load_manifest(name), root)
    gt = load_revisited_gnd(root / f"gnd_{name}.pkl", name=name)
    database = [f"{n}.jpg" for n in gt.imlist]
    paths = {n: root / "jpg" / n for n in database}
    label = name
    if r1m_root is not None:
        extra = list_distractors(r1m_root, prefix="r1m")
        paths.update(extra)
        database += list(extra)
        label = f"{name}+r1m"
    full = RevisitedGroundTruth(name=label, imlist=[n[:-4] if n.endswith(".jpg") else n for n in database],
                                qimlist=gt.qimlist, gnd=gt.gnd)
    index = {n: i for i, n in enumerate(database)}
    queries = [Query(name=q, path=root / "jpg" / f"{q}.jpg", box=g["bbx"]) for q, g in zip(gt.qimlist, gt.gnd,
                                                                                            strict=True)]
    qnames = list(gt.qimlist)

    def scorer(rankings):
        s = evaluate_revisited(rankings_to_ranks(rankings, qnames, index), full)
        js = s.to_json()
        js["mAP_medium"] = js["medium"]["mAP"]
        return js

    def writer(rankings, folder):
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "ranks.npy"
        save_npy_atomic(out, rankings_to_ranks(rankings, qnames, index))
        return [out]

    return RetrievalDataset(name=label, root=root, database=database, paths=paths, queries=queries,
                            scorer=scorer, writer=writer,
                            notes=["queries cropped to their bbx", "Easy/Medium/Hard as revisitop"])
