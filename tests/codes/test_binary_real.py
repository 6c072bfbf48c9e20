"""Binary codes and kernel search on real descriptors (Hessian-affine SIFT of shared Holidays photos)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_path

TRAIN = ["100200.jpg", "100201.jpg", "103100.jpg"]
BASE = ["103300.jpg", "108100.jpg", "112406.jpg", "115100.jpg", "129000.jpg"]
QUERY = ["100600.png", "100601.png"]


@pytest.fixture(scope="module")
def real_sift(features_of):
    def load(names):
        return np.concatenate([features_of(shared_path("holidays", "images", n)).descriptors for n in names])

    return load(TRAIN), load(BASE), load(QUERY)


def test_asymmetric_distances_beat_hamming_on_real_rootsift(real_sift):
    from retrieval.bench.binary import euclidean_gt, recall
    from retrieval.codes.binary import PCAE, PCAEITQ
    from retrieval.features import root_sift

    train, base, queries = (root_sift(x) for x in real_sift)
    queries = queries[:: max(1, len(queries) // 300)]
    gt = euclidean_gt(queries, base)
    for cls in (PCAE, PCAEITQ):
        e = cls(32, random_state=0).fit(train)
        e.add(base)
        rec = {d: recall(e.search(queries, 20, d)[1], gt, 20) for d in ("hamming", "expectation", "lower_bound")}
        assert rec["expectation"] >= rec["hamming"] and rec["lower_bound"] >= rec["hamming"], (cls.__name__, rec)


def test_exact_chi2_search_on_real_sift(real_sift):
    from retrieval.codes.kernel_pca import KernelPCAEmbedding
    from retrieval.codes.kernels import kernel_topk, l1_normalize
    from retrieval.search.kernel_exact import ExactKernelSearch

    train, base, queries = (l1_normalize(x.astype(np.float32)) for x in real_sift)
    queries = queries[:100]
    emb = KernelPCAEmbedding("chi2", 1024, 128, random_state=0).fit(train)
    ex = ExactKernelSearch(emb)
    ex.add(base)
    vals, ids, evals = ex.search(queries, 1)
    tv, _ = kernel_topk(queries, base, 1)
    np.testing.assert_allclose(vals[:, 0], tv[:, 0], rtol=1e-6)
    assert evals.mean() < 0.1 * len(base), evals.mean() / len(base)
