"""``retrieval.bench.binary``: the recall rows equal a brute-force recomputation, the speed report's schema."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.bench.binary import EMBEDDINGS, binary_rows, euclidean_gt, speed_rows
from retrieval.codes.binary import make_embedding


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((400, 16)).astype(np.float32), rng.standard_normal((300, 16)).astype(np.float32),
            rng.standard_normal((20, 16)).astype(np.float32))


def test_euclidean_gt_is_the_brute_force_nearest_neighbour():
    _, base, queries = _data()
    d = ((queries[:, None, :].astype(np.float64) - base[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(euclidean_gt(queries, base, k=3), np.argsort(d, axis=1)[:, :3])


def test_rows_recall_equals_a_recomputation():
    train, base, queries = _data()
    gt = euclidean_gt(queries, base)
    rows = binary_rows(train, base, queries, gt, [16, 32], ["LSH", "PCAE-ITQ"], ["hamming", "expectation"], seed=2)
    json.dumps(rows)
    assert [(r["embedding"], r["bits"], r["distance"]) for r in rows] == [
        (e, b, d) for e in ("LSH", "PCAE-ITQ") for b in (16, 32) for d in ("hamming", "expectation")
        if not (e == "PCAE-ITQ" and b == 32)]           # PCAE-family codes cannot exceed d = 16 bits: skipped
    truth = np.argmin(((queries[:, None, :] - base[None]) ** 2).sum(-1), axis=1)
    for r in rows:
        emb = make_embedding(r["embedding"], r["bits"], random_state=2).fit(train)
        emb.add(base)
        _, ids = emb.search(queries, 100, distance=r["distance"])
        for R in (10, 100):
            assert r[f"recall@{R}"] == pytest.approx(np.mean([truth[i] in ids[i, :R] for i in range(len(queries))]))
        assert r["ms_per_query"] >= 0 and {"var_ratio", "alpha_spread_ratio", "alpha_asymmetry"} <= set(r)


def test_every_embedding_name_is_known_to_the_library():
    for name in EMBEDDINGS:
        assert make_embedding(name, 8, random_state=0) is not None


def test_speed_report_on_a_small_database():
    out = speed_rows(n=2000, nbytes=4, nq=10, k=5, seed=0)
    json.dumps(out)
    assert (out["n"], out["nbytes"], out["nq"], out["k"], out["threads"]) == (2000, 4, 10, 5, 1)
    expected = {"hamming", "asym_dE", "asym_dLB", "pq_adc"}
    try:
        import faiss  # noqa: F401

        expected.add("faiss_binary_flat")
        assert out["hamming_vs_faiss"] > 0
    except ImportError:
        assert "hamming_vs_faiss" not in out
    assert set(out["ms_per_query"]) == expected
    assert out["dE_vs_pq_adc"] > 0 and out["dLB_vs_pq_adc"] > 0
