"""``retrieval bench verify``: the error rates and the speed of the one geometric verification
(:func:`retrieval.rerank.verification.verify`).

- Pairs of real images: UKBench (groups of 4 consecutive image numbers) and INRIA Holidays (group = the first 4
  digits of the name). True pairs: every pair of images of the same group; unrelated pairs: a seeded sample of
  pairs from different groups.
- Tentative matches as spatial re-ranking makes them: RootSIFT, the ratio test of
  :func:`retrieval.rerank.matching.tentative_matches` (``ratio`` 0.85, the presets' value).
- Evidence of a pair: the one-to-one inliers of :func:`verify` when its model is sane and its inliers spread,
  else 0; a pair is verified at threshold ``t`` when its evidence is at least ``t``. The trade-off table gives
  the false- and true-verification rates for every threshold in ``thresholds``.
- Speed: the verification of 50-image shortlists (a query against 3 true mates and 47 unrelated images, tentative
  matches computed beforehand) against OpenCV ``findHomography`` with ``USAC_MAGSAC`` on the same tentative
  matches, in the same run, both on one core.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from retrieval.features.extractor import FeatureExtractor
from retrieval.features.rootsift import root_sift
from retrieval.rerank.matching import tentative_matches
from retrieval.rerank.verification import DEFAULT_MIN_INLIERS, verify


def ukbench_groups(folder) -> tuple[list[Path], np.ndarray]:
    """UKBench images of ``folder`` (``ukbenchNNNNN.jpg``) and their groups (number // 4)."""
    paths = sorted(Path(folder).glob("ukbench*.jpg"))
    if not paths:
        raise ValueError(f"no ukbench*.jpg image in {folder}.")
    return paths, np.array([int(p.stem[len("ukbench"):]) // 4 for p in paths], np.int64)


def holidays_groups(folder) -> tuple[list[Path], np.ndarray]:
    """Holidays images of ``folder`` (or its ``jpg/`` subfolder) and their groups (first 4 digits of the name)."""
    folder = Path(folder)
    if (folder / "jpg").is_dir():
        folder = folder / "jpg"
    paths = sorted(folder.glob("*.jpg"))
    if not paths:
        raise ValueError(f"no .jpg image in {folder}.")
    return paths, np.array([int(p.stem[:4]) for p in paths], np.int64)


def true_pairs(groups) -> np.ndarray:
    """Every pair ``(i, j)``, ``i < j``, of the same group: ndarray of shape (p, 2), int64."""
    g = np.asarray(groups)
    i, j = np.triu_indices(len(g), k=1)
    keep = g[i] == g[j]
    return np.stack([i[keep], j[keep]], axis=1)


def unrelated_pairs(groups, n: int, random_state: int = 0) -> np.ndarray:
    """A seeded sample of ``n`` distinct pairs ``(i, j)``, ``i < j``, of different groups (all of them when
    fewer exist): ndarray of shape (n, 2), int64, sorted."""
    g = np.asarray(groups)
    i, j = np.triu_indices(len(g), k=1)
    keep = g[i] != g[j]
    i, j = i[keep], j[keep]
    rng = np.random.default_rng(random_state)
    sel = np.sort(rng.choice(len(i), size=min(int(n), len(i)), replace=False))
    return np.stack([i[sel], j[sel]], axis=1)


def pair_evidence(features, pairs, *, ratio: float = 0.85, verify_params=None, progress=None, cells=None,
                  query_features: int = 0, database_features=None, evidence=None) -> dict:
    """Tentative matches and :func:`verify` (``min_inliers=1``) of every pair (query image, database image); with
    ``cells`` (a :class:`~retrieval.rerank.cells.MatchCells` of the RootSIFT space), the matches of pairs of at least
    :data:`~retrieval.rerank.cells.EXACT_BELOW` comparisons are those of the probed test, as the verifier makes them;
    ``query_features`` > 0: the query side keeps its largest features, as the presets'
    ``search.verify_query_features`` makes it. ``database_features``: the database side of each pair read from these
    instead (the same images as a compact feature store returns them, for instance). ``evidence`` (an
    :class:`~retrieval.rerank.evidence.EvidenceModel`): the database side of each pair is its evidence, matched and
    decided as the verifier does (:class:`~retrieval.rerank.evidence.EvidenceRule` with ``min_inliers`` 1 and no
    weight threshold), all of the query's features; the pair's ``evidence`` is then its inliers' Hamming weight
    (0 when the model is not sane or spread).

    Returns
    -------
    dict of ndarrays of shape (p,): ``tentative``, ``inliers`` (one-to-one inliers of the best model),
    ``evidence`` (``inliers`` when the model is sane and spread, else 0), ``seconds`` (verification only),
    ``probed`` (1 for a pair matched by the probed test).
    """
    from retrieval.features.frames import largest
    from retrieval.rerank.verifier import Verifier

    params = {**(verify_params or {}), "min_inliers": 1}
    if evidence is not None:
        return _pair_weights(features, pairs, evidence, params, progress)
    matcher = Verifier(ratio=ratio, cells=cells)    # the verifier's matching (RootSIFT; probed with cells)
    queries, databases = {}, {}

    def query(i):
        if i not in queries:
            f = largest(features[i], query_features)
            queries[i] = (f, matcher.described(f, roles=("query",)))
        return queries[i]

    stored = features if database_features is None else database_features

    def database(i):
        if i not in databases:
            databases[i] = matcher.described(stored[i], roles=("database",))
        return databases[i]

    def matches(a, b):
        if not (len(features[a]) and len(features[b])):
            return np.zeros((0, 2), np.int64), False
        qa, db = query(a)[1], database(b)
        return matcher.matches(qa, db), matcher.probed(qa, db)

    p = len(pairs)
    out = {k: np.zeros(p, np.int64) for k in ("tentative", "inliers", "evidence", "probed")}
    out["seconds"] = np.zeros(p)
    for n, (a, b) in enumerate(pairs):
        fa, fb = query(a)[0], features[b]
        m, out["probed"][n] = matches(a, b)
        t0 = time.perf_counter()
        v = verify(fa.frames, fb.frames, m, **params)
        out["seconds"][n] = time.perf_counter() - t0
        out["tentative"][n] = len(m)
        out["inliers"][n] = v.inliers
        out["evidence"][n] = v.inliers if v.verified else 0
        if progress is not None:
            progress(n + 1, p)
    return out


def _pair_weights(features, pairs, model, params, progress) -> dict:
    """:func:`pair_evidence` on the evidence of the database side (its ``evidence`` branch)."""
    from dataclasses import replace

    from retrieval.rerank.evidence import EvidenceRule, hamming_weights
    from retrieval.rerank.verifier import Verifier

    rule = replace(EvidenceRule(), min_weight=0.0)   # the inliers' floor of the rule; every weight reported
    matcher = Verifier(evidence=model, rule=rule)
    queries, databases = {}, {}

    def query(i):
        if i not in queries:
            queries[i] = matcher.query_side(features[i])
        return queries[i]

    def database(i):
        if i not in databases:
            f = features[i]
            described = matcher.described(f, roles=())
            databases[i] = matcher.database_side(model.database(
                rootsift_like(f), described.frames, f.image_size))
        return databases[i]

    p = len(pairs)
    out = {k: np.zeros(p, np.int64) for k in ("tentative", "inliers", "probed")}
    out["evidence"] = np.zeros(p)
    out["seconds"] = np.zeros(p)
    for n, (a, b) in enumerate(pairs):
        q, db = query(a), database(b)
        t0 = time.perf_counter()
        m, dist = matcher.evidence_matches(q, db)
        v = verify(q.evidence.frames, db.frames, m, **{**params, "min_inliers": rule.min_inliers})
        out["seconds"][n] = time.perf_counter() - t0
        out["tentative"][n] = len(m)
        out["inliers"][n] = v.inliers
        if v.verified and len(m):
            out["evidence"][n] = float(hamming_weights(dist[np.asarray(v.inlier_mask, bool)], rule.sigma).sum())
        if progress is not None:
            progress(n + 1, p)
    return out


def rootsift_like(features) -> np.ndarray:
    """The RootSIFT descriptors (float32) of :class:`LocalFeatures`, what the evidence describes."""
    from retrieval.rerank.verifier import rootsift_descriptors

    return rootsift_descriptors(features.descriptors) if len(features) else np.zeros((0, 128), np.float32)


def tradeoff(evidence_unrelated, evidence_true, thresholds) -> list[dict]:
    """Rates of verified pairs (evidence >= t) for every threshold ``t``: false (unrelated) and true."""
    u, t = np.asarray(evidence_unrelated), np.asarray(evidence_true)
    return [{"min_inliers": k if isinstance(k, float) else int(k), "false_verified": int((u >= k).sum()),
             "false_rate": float((u >= k).mean()) if len(u) else 0.0,
             "true_verified": int((t >= k).sum()), "true_rate": float((t >= k).mean()) if len(t) else 0.0}
            for k in thresholds]


def _distribution(x) -> dict:
    x = np.asarray(x)
    if len(x) == 0:
        return {}
    q = np.percentile(x, [50, 90, 99, 99.9])
    return {"mean": float(x.mean()), "median": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "p99.9": float(q[3]), "max": int(x.max())}


def shortlist_speed(features, groups, *, n_queries: int = 20, shortlist: int = 50, ratio: float = 0.85,
                    random_state: int = 0, verify_params=None) -> dict:
    """Verification time per ``shortlist``-image shortlist, ours vs OpenCV USAC_MAGSAC on the same tentative
    matches (one core: OpenCV and BLAS limited to one thread during the timing).

    Each query is an image with at least one true mate; its shortlist holds its mates and unrelated images.
    Returns mean milliseconds per shortlist for both and their ratio (OpenCV / ours).
    """
    import cv2
    from threadpoolctl import threadpool_limits

    g = np.asarray(groups)
    rng = np.random.default_rng(random_state)
    cand = [i for i in range(len(g)) if (g == g[i]).sum() > 1]
    queries = rng.choice(cand, size=min(n_queries, len(cand)), replace=False)
    work = []
    for qi in queries:
        mates = [j for j in np.flatnonzero(g == g[qi]) if j != qi]
        others = rng.choice(np.flatnonzero(g != g[qi]), size=shortlist - len(mates), replace=False)
        dq = root_sift(features[qi].descriptors)
        items = []
        for j in [*mates, *others.tolist()]:
            m = tentative_matches(dq, root_sift(features[j].descriptors), ratio=ratio)
            items.append((features[qi].frames, features[j].frames, m))
        work.append(items)
    params = {**(verify_params or {})}
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        with threadpool_limits(limits=1):
            ours, usac = [], []
            for items in work:
                t0 = time.perf_counter()
                for fq, fd, m in items:
                    verify(fq, fd, m, **params)
                ours.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                for fq, fd, m in items:
                    if len(m) >= 4:
                        cv2.findHomography(fq[m[:, 0], :2].astype(np.float64), fd[m[:, 1], :2].astype(np.float64),
                                           cv2.USAC_MAGSAC, 3.0, maxIters=10000, confidence=0.9999)
                usac.append(time.perf_counter() - t0)
    finally:
        cv2.setNumThreads(threads)
    ours_ms, usac_ms = 1000 * float(np.mean(ours)), 1000 * float(np.mean(usac))
    return {"queries": len(work), "shortlist": shortlist, "ours_ms_per_shortlist": ours_ms,
            "ours_ms_max": 1000 * float(np.max(ours)), "usac_magsac_ms_per_shortlist": usac_ms,
            "usac_over_ours": usac_ms / ours_ms if ours_ms > 0 else float("inf"),
            "mean_tentative": float(np.mean([len(m) for items in work for _, _, m in items]))}


def bench_verify(ukbench, holidays, *, store=None, n_unrelated: int = 20000, random_state: int = 0,
                 ratio: float = 0.85, thresholds=range(4, 21), min_inliers: int = DEFAULT_MIN_INLIERS,
                 speed_queries: int = 20, progress=None, match_cells: bool = False, query_features: int = 0,
                 compact_features: int = 0, evidence_words: int = 0) -> dict:
    """False- and true-verification rates on UKBench and Holidays, the trade-off over ``thresholds`` and the
    shortlist speed (see the module doc). ``n_unrelated`` unrelated pairs in all, half from each set.
    ``match_cells``: tentative matches as a verifier with match cells makes them (cells learnt on 200,000 RootSIFT
    descriptors of both sets, as an object preset learns them on its collection). ``query_features``: the query
    side of each pair keeps its largest features (the presets' ``search.verify_query_features``; 0: all).
    ``compact_features`` (16 or 32): the database side of each pair as a compact feature store returns it, with a
    codebook of that many bytes learnt on the features of both sets (as an index learns it on its photos).
    ``evidence_words`` > 0: the database side of each pair is its evidence (:mod:`retrieval.rerank.evidence`: that
    many words and 64-bit signatures learnt on the RootSIFT of both sets), decided by its inliers' Hamming weight:
    ``min_inliers`` is then the weight threshold (:attr:`EvidenceRule.min_weight
    <retrieval.rerank.evidence.EvidenceRule.min_weight>`) and ``thresholds`` are weights.

    Features: the ``features`` section of the ``default`` preset (Hessian-affine, ``max_side`` 1024), read from
    or written to ``store`` (a :class:`FeatureStore`).

    Returns
    -------
    dict (JSON-able)
    """
    extractor = FeatureExtractor("hesaff", max_side=1024)
    sets = {"ukbench": ukbench_groups(ukbench), "holidays": holidays_groups(holidays)}
    if evidence_words:
        from retrieval.rerank.evidence import EvidenceRule

        min_inliers = EvidenceRule().min_weight
        thresholds = [round(0.125 * k, 3) for k in range(4, 33)]
    out = {"ratio": ratio, "min_inliers": min_inliers if evidence_words else int(min_inliers),
           "random_state": int(random_state),
           "query_features": int(query_features), "sets": {}}
    all_u, all_t = [], []
    feats_of = {name: [store.get_or_extract(p, extractor) if store is not None else extractor(p) for p in paths]
                for name, (paths, _) in sets.items()}
    cells = None
    if match_cells:
        from retrieval.engine.object.backend import train_cells

        cells = train_cells([f for fs in feats_of.values() for f in fs], True, random_state)
        out["match_cells"] = {"cells": len(cells.centres), "probes": cells.probes}
    model = None
    if evidence_words:
        from retrieval.rerank.evidence import EvidenceModel

        model = EvidenceModel.learn(np.concatenate([rootsift_like(f) for fs in feats_of.values() for f in fs]),
                                    n_words=int(evidence_words), bits=64, random_state=random_state)
        out["evidence"] = {"words": int(evidence_words), "bits": 64, "rule": vars(EvidenceRule()).copy()}
    stored = feats_of
    if compact_features:
        from retrieval.features.compact import DescriptorCodebook, as_stored

        book = DescriptorCodebook.learn(np.concatenate([f.descriptors for fs in feats_of.values() for f in fs]),
                                        M=int(compact_features), seed=random_state)
        stored = {name: [as_stored(f, book) for f in fs] for name, fs in feats_of.items()}
        out["compact_features"] = int(compact_features)
    for k, (name, (paths, groups)) in enumerate(sets.items()):
        feats = feats_of[name]
        n = n_unrelated // 2 + (n_unrelated % 2 if k == 0 else 0)
        pu = unrelated_pairs(groups, n, random_state + k)
        pt = true_pairs(groups)
        kw = {"ratio": ratio, "progress": progress, "cells": cells, "query_features": query_features,
              "database_features": stored[name], "evidence": model}
        eu, et = pair_evidence(feats, pu, **kw), pair_evidence(feats, pt, **kw)
        all_u.append(eu["evidence"])
        all_t.append(et["evidence"])
        worst = np.argsort(-eu["evidence"])[:5]
        out["sets"][name] = {
            "images": len(paths), "unrelated_pairs": len(pu), "true_pairs": len(pt),
            "false_verified": int((eu["evidence"] >= min_inliers).sum()),
            "false_rate": float((eu["evidence"] >= min_inliers).mean()),
            "true_verified": int((et["evidence"] >= min_inliers).sum()),
            "true_rate": float((et["evidence"] >= min_inliers).mean()),
            "unrelated_evidence": _distribution(eu["evidence"]), "true_evidence": _distribution(et["evidence"]),
            "unrelated_tentative": _distribution(eu["tentative"]), "true_tentative": _distribution(et["tentative"]),
            "worst_unrelated": [[paths[pu[i, 0]].name, paths[pu[i, 1]].name, int(eu["evidence"][i])]
                                for i in worst],
            "verify_ms_per_pair": 1000 * float(np.mean(np.r_[eu["seconds"], et["seconds"]])),
            "probed_pairs": int(eu["probed"].sum() + et["probed"].sum()),
            "tradeoff": tradeoff(eu["evidence"], et["evidence"], thresholds)}
        if name == "ukbench" and speed_queries:
            out["speed"] = shortlist_speed(feats, groups, n_queries=speed_queries, ratio=ratio,
                                           random_state=random_state)
    u, t = np.concatenate(all_u), np.concatenate(all_t)
    out["all"] = {"unrelated_pairs": len(u), "true_pairs": len(t),
                  "false_verified": int((u >= min_inliers).sum()), "false_rate": float((u >= min_inliers).mean()),
                  "true_rate": float((t >= min_inliers).mean()), "tradeoff": tradeoff(u, t, thresholds)}
    return out
