"""The run behind ``retrieval bench object``: box queries among every shared image (see :mod:`.object_eval`).

Features (Hessian-affine, default parameters) come from a :class:`~retrieval.features.store.FeatureStore`, so
only the first run extracts; the vocabulary is learnt on the database images themselves (the Oxford105K
protocol of Zhu et al. 2013).
"""

from __future__ import annotations

import time

from retrieval.bench.object_eval import box_queries, evaluate, evaluate_asmk_reference, shared_images
from retrieval.features import FeatureExtractor
from retrieval.features.store import FeatureStore


def bench_object(data_root, *, feature_store=".cache/object-features", n_words: int = 20000,
                 assignment: str = "hard", methods=("l1", "delta1"), reranks=("none", "exact", "spatial"),
                 alpha: float = 0.5, alphas=(0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 5), seed: int = 0,
                 reference: bool = False) -> dict:
    """Top-1 and box IoU rates of each (method, re-ranking) and the delta1 alpha sweep.

    Returns :func:`~retrieval.bench.object_eval.evaluate`'s dict without the searcher, plus ``seconds``
    (evaluation time), ``queries`` (names) and, with ``reference``, ``reference``: ASMK* (the ``asmk`` package)
    on the same features and boxes (:func:`~retrieval.bench.object_eval.evaluate_asmk_reference`).
    """
    ex = FeatureExtractor("hesaff")
    store = FeatureStore(feature_store)
    feats = {p: store.get_or_extract(p, ex) for p in shared_images(data_root)}
    queries = box_queries(data_root)
    reranks = tuple(reranks)
    t0 = time.perf_counter()
    res = evaluate(feats, queries, n_words=n_words, methods=tuple(methods), reranks=reranks, alpha=alpha,
                   alphas=[float(a) for a in alphas], assignment=assignment, random_state=seed)
    res.pop("searcher")
    res["seconds"] = time.perf_counter() - t0
    res["queries"] = [q["name"] for q in queries]
    if reference:
        res["reference"] = evaluate_asmk_reference(feats, queries, seed=seed)
    return res
