"""``retrieval.bench.invfile.bench_invfile`` on a small synthetic collection: every count is recomputed from the
postings it is built on (the times are only checked for shape)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.bench.invfile import METHODS, bench_invfile
from retrieval.bench.zipf_synth import zipf_postings, zipf_query


def test_counts_equal_a_recomputation_from_the_same_postings():
    kw = dict(n_images=300, words_per_image=40, n_words=2000, query_words=25, zipf_s=1.0, n_queries=4, k=10, seed=3)
    res = bench_invfile(**kw)
    json.dumps(res)
    indptr, ids, tf = zipf_postings(300, 40, 2000, s=1.0, random_state=3)
    assert res["n_postings"] == len(ids)
    assert res["postings_per_image"] == pytest.approx(len(ids) / 300)
    rng = np.random.default_rng(4)
    queries = [zipf_query(25, 2000, s=1.0, random_state=rng) for _ in range(4)]
    df = np.diff(indptr)
    visited = [sum(int(df[w]) for w in set(np.asarray(q).tolist())) for q in queries]
    assert res["visited_postings_per_query"] == pytest.approx(np.mean(visited))
    assert set(res["ms_per_query"]) == set(res["ms_per_query_median"]) == set(METHODS)
    assert all(v > 0 for v in res["ms_per_query"].values())
    assert res["ratio_delta1_over_l1"] == pytest.approx(res["ms_per_query"]["delta1"] / res["ms_per_query"]["l1"])
    assert res["ratio_delta2_over_l2"] == pytest.approx(res["ms_per_query"]["delta2"] / res["ms_per_query"]["l2"])
    assert {k: res[k] for k in ("n_images", "words_per_image", "n_words", "k")} == \
        {"n_images": 300, "words_per_image": 40, "n_words": 2000, "k": 10}
