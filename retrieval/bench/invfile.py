"""The measurement behind ``retrieval bench invfile``: query time of the inverted-file scorings on Zipf words.

The four scorings l1, delta1, l2, delta2 (Zhu et al. 2013, section 3.3) run on the same index and the same
queries, interleaved query by query in one thread, so that the ratios delta1 / l1 and delta2 / l2 come from
one run on one machine state.
"""

from __future__ import annotations

import time

import numpy as np

from retrieval.bench.zipf_synth import zipf_postings, zipf_query
from retrieval.search.invfile import InvertedFile

METHODS = ("l1", "delta1", "l2", "delta2")


def bench_invfile(*, n_images: int = 100_000, words_per_image: int = 3000, n_words: int = 1_000_000,
                  query_words: int = 1000, zipf_s: float = 1.0, n_queries: int = 20, k: int = 200,
                  seed: int = 0) -> dict:
    """Build an inverted file of ``n_images`` synthetic images and time ``n_queries`` queries per scoring.

    Images draw ``words_per_image`` words from a Zipf law of exponent ``zipf_s`` over ``n_words`` words
    (:func:`~retrieval.bench.zipf_synth.zipf_postings`, seed ``seed``); each query has ``query_words``
    distinct words (seed ``seed + 1``). Every method is warmed up once (numba compilation) before the timing.

    Returns a JSON-able dict: the parameters, ``n_postings``, ``postings_per_image``, ``bytes_per_posting``,
    ``postings_bytes``, ``visited_postings_per_query`` (mean over the queries of the summed posting-list
    lengths of their words), ``generate_s``, ``build_s``, ``ms_per_query`` and ``ms_per_query_median``
    ({method: ms}), ``ratio_delta1_over_l1`` and ``ratio_delta2_over_l2`` (of the means).
    """
    t0 = time.perf_counter()
    indptr, ids, tf = zipf_postings(n_images, words_per_image, n_words, s=zipf_s, random_state=seed)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    inv = InvertedFile.from_csr(indptr, ids, tf, np.arange(n_images, dtype=np.int64))
    t_build = time.perf_counter() - t0
    rng = np.random.default_rng(seed + 1)
    queries = [zipf_query(query_words, n_words, s=zipf_s, random_state=rng) for _ in range(n_queries)]
    for m in METHODS:                                   # compile / warm up
        inv.search(queries[0], k, method=m)
    times = {m: [] for m in METHODS}
    for q in queries:
        for m in METHODS:
            t0 = time.perf_counter()
            inv.search(q, k, method=m)
            times[m].append(time.perf_counter() - t0)
    df = np.diff(inv.indptr_)
    visited = [int(df[np.unique(q)].sum()) for q in queries]
    res = {
        "n_images": n_images, "words_per_image": words_per_image, "n_words": n_words, "zipf_s": zipf_s,
        "query_distinct_words": query_words, "n_queries": n_queries, "k": k,
        "n_postings": inv.n_postings, "postings_per_image": inv.n_postings / n_images,
        "bytes_per_posting": inv.bytes_per_posting,
        "postings_bytes": int(inv.postings_ids_.nbytes + inv.postings_tf_.nbytes),
        "visited_postings_per_query": float(np.mean(visited)),
        "generate_s": t_gen, "build_s": t_build,
        "ms_per_query": {m: 1000 * float(np.mean(v)) for m, v in times.items()},
        "ms_per_query_median": {m: 1000 * float(np.median(v)) for m, v in times.items()},
    }
    res["ratio_delta1_over_l1"] = res["ms_per_query"]["delta1"] / res["ms_per_query"]["l1"]
    res["ratio_delta2_over_l2"] = res["ms_per_query"]["delta2"] / res["ms_per_query"]["l2"]
    return res
