"""UKB loader (Nister & Stewenius, CVPR 2006): ``ROOT/full/ukbench00000.jpg`` .. ``ukbench10199.jpg``.

Every image is a query against all 10,200 (itself included); score = 4 x recall@4 (N-S score,
:func:`retrieval.evaluation.ukb.ukb_score`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.datasets.manifest import fileset, load_manifest, require_files
from retrieval.evaluation.ukb import ukb_score


def load_ukb(root) -> RetrievalDataset:
    """Load UKB from ``root`` (``FileNotFoundError`` listing the missing images)."""
    root = Path(root)
    manifest = load_manifest("ukb")
    require_files(manifest, root)
    names = fileset(manifest, "images")["names"]
    paths = {n: root / "full" / n for n in names}
    index = {n: i for i, n in enumerate(names)}

    def scorer(rankings):
        qs = list(rankings)
        ids = np.full((len(qs), 4), -1, dtype=np.int64)
        for i, q in enumerate(qs):
            for j, n in enumerate(list(rankings[q])[:4]):
                if n not in index:
                    raise ValueError(f"results of query {q}: unknown image {n!r}.")
                ids[i, j] = index[n]
        score, per = ukb_score(ids, [index[q] for q in qs])
        return {"protocol": "ukb", "mAP": None, "N-S score": score,
                "per_query": {q: int(v) for q, v in zip(qs, per, strict=True)}}

    return RetrievalDataset(name="ukb", root=root, database=list(names), paths=paths,
                            queries=[Query(name=n, path=paths[n], image=n) for n in names], scorer=scorer,
                            notes=["score = 4 x recall@4 (N-S score), the query counts"])
