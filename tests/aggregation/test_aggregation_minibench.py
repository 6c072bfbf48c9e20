"""Real photos: Fisher vectors (K = 16) on minibench under protocol (b) (local PCA and GMM learnt on the
benchmark collection itself), Holidays-protocol mAP.

Here the GMM sees a 50k-descriptor sample and 20 EM iterations (a few seconds). With seeds 0-3 this gives
mAP 0.907, 0.905, 0.885, 0.905 (the full grid of scripts/aggregation_table.py: 0.88). The bound 0.85 is above
the 0.84 the SPEC quotes for a plain FV-64 pipeline on the same benchmark and leaves 0.035 below the worst seed.
The same vectors without the power normalisation of eq. 7 score lower (0.86 for seed 0): checked as well.
"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def minibench_descriptors(minibench, features_of):
    from retrieval.features import root_sift
    from retrieval.features.pca import LocalPCA

    paths = minibench["paths"]
    raw = [root_sift(features_of(p).descriptors) for p in paths]
    pca = LocalPCA(64, max_samples=100_000, random_state=0).fit(np.concatenate(raw))
    return paths, [pca.transform(d).astype(np.float32) for d in raw]


def holidays_map(minibench, paths, V):
    """Mean AP over the queries, query excluded from its own list (retrieval.evaluation.groups semantics)."""
    from retrieval.evaluation.ap import ap_from_ranks

    idx = {p: i for i, p in enumerate(paths)}
    aps = []
    for g in minibench["groups"]:
        q, pos = idx[g["images"][0]], {idx[p] for p in g["images"][1:]}
        d = ((V - V[q]) ** 2).sum(1)
        order = [j for j in np.argsort(d, kind="stable") if j != q]
        aps.append(ap_from_ranks([r for r, j in enumerate(order) if j in pos], len(pos)))
    return float(np.mean(aps))


def test_fisher16_minibench_protocol_b(minibench, minibench_descriptors):
    from retrieval.aggregation import FisherVector

    paths, descs = minibench_descriptors
    fv = FisherVector(16, gmm_params={"max_samples": 50_000, "max_iter": 20}, random_state=0).fit(descs)
    m = holidays_map(minibench, paths, fv.transform(descs))
    m_nopower = holidays_map(minibench, paths, FisherVector.from_gmm(fv, alpha=1.0).transform(descs))
    print(f"FV-16 (b): {m:.3f}, without power normalisation {m_nopower:.3f}")
    assert m >= 0.85, f"FV-16 protocol (b) mAP {m:.3f} (without power normalisation: {m_nopower:.3f})"
    assert m > m_nopower, (m, m_nopower)
