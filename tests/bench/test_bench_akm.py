"""``retrieval.bench.akm.bench_akm`` on a small descriptor file: sizes follow the options, and probing every
cell with a lossless PCA (``n_components`` = d) assigns exactly like brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.aggregation.large_vocabulary import ApproximateKMeans
from retrieval.bench.akm import bench_akm


@pytest.fixture
def descriptors(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((40, 8)) * 4
    X = (centres[rng.integers(0, 40, 3000)] + rng.standard_normal((3000, 8))).astype(np.float32)
    path = tmp_path / "desc.npy"
    np.save(path, X)
    return path, X


def test_all_cells_and_full_pca_agree_with_brute_force(descriptors):
    path, X = descriptors
    res = bench_akm(str(path), train_words=32, train_descriptors=1000, n_iter=3, assign_words=200,
                    assign_descriptors=100, nprobe=10_000, nprobes=(10_000,), n_components=8, n_candidates=4,
                    threads=1, faiss_methods=(), seed=0)
    json.dumps(res)
    assert res["n_available"] == 3000 and res["dim"] == 8 and res["descriptors"] == str(path)
    t = res["train"]
    assert t["words"] == 32 and t["descriptors"] == 1000 and t["n_iter"] == 3
    assert t["agreement_exact"] == 1.0                  # every cell probed, lossless PCA: exact assignment
    a = res["assign"]
    assert a["words"] == 200 and a["descriptors"] == 100 and a["n_components"] == 8 and "faiss" not in a
    assert [r["nprobe"] for r in a["by_nprobe"]] == [10_000]
    assert a["by_nprobe"][0]["agreement_exact"] == 1.0


def test_agreement_is_the_fraction_of_exact_assignments(descriptors):
    path, X = descriptors
    res = bench_akm(str(path), train_words=0, assign_words=400, assign_descriptors=200, nprobes=(1, 2),
                    n_coarse=20, n_components=2, n_candidates=1, threads=1, faiss_methods=(), seed=1)
    assert "train" not in res
    held = X[-200:]
    # the vocabulary is the same sample of the non-held-out rows as the bench draws (seed 1)
    rng = np.random.default_rng(1)
    W = X[np.sort(rng.choice(2800, size=400, replace=False))]
    exact = np.argmin(((held[:, None, :] - W[None]) ** 2).sum(-1), axis=1)
    v = ApproximateKMeans.from_centers(W, n_coarse=20, n_components=2, n_candidates=1, random_state=1)
    for row in res["assign"]["by_nprobe"]:
        v.nprobe = row["nprobe"]
        assert row["agreement_exact"] == pytest.approx(float((v.perm_[v.predict(held)] == exact).mean()))
    assert [r["nprobe"] for r in res["assign"]["by_nprobe"]] == [1, 2]


def test_too_few_rows_is_one_clear_error(tmp_path):
    path = tmp_path / "small.npy"
    np.save(path, np.zeros((10, 4), np.float32))
    with pytest.raises(ValueError, match="more than 3000 rows"):
        bench_akm(str(path))
