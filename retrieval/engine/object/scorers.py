"""The two scorings an :class:`retrieval.engine.object.searcher.ObjectSearcher` composes, and the state of one search.

- :class:`BowScorer`: Zhu et al. 2013 -- the query's BoW histogram scored through the inverted file with l1 / l2
  (eq. 1), delta_1 (eq. 8-9) or delta_2 (eq. 10-11), the top R re-scored exactly in float64 on the full histograms,
  then verified; average query expansion (Chum et al. 2007) averages the histograms of the verified images'
  features inside their matched boxes.
- :class:`AsmkScorer`: ASMK* (Tolias et al. 2013, :mod:`retrieval.search.smk`) -- the query's descriptors assigned
  to ``query_words`` words each and aggregated per word, scored against the stored binary signatures, then verified;
  query expansion in the kernel's space (the verified images' signatures of the words seen inside their boxes).

In both, a hit's ``similarity`` is its score relative to the score of the query photo's own encoding (its histogram,
or its signatures with one word per descriptor, as an indexed copy stores them) through the same formula, clipped
to [0, 1] (for ASMK*, its alpha-th root): 1 for the query photo. In the query-expansion round the unverified hits' are relative to the expanded
query's score of that same encoding, and a verified hit keeps its first-round similarity (:attr:`Round.first`).

Both read the searcher only. Everything that varies per search lives in one :class:`Round` (the query, the box,
``k``, the re-ranking, the verifier, the cache, the threads and the outcomes already verified), created by
:meth:`ObjectSearcher.search <retrieval.engine.object.searcher.ObjectSearcher.search>` for that call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from retrieval.core.cache import BytesLRU
from retrieval.engine.hits import similarity_ratio
from retrieval.engine.object.scores import (
    bow_dissimilarity,
    kernel_reference,
    object_similarity,
    topk_by_id,
    unverified_hits,
)
from retrieval.features.frames import select_in_box
from retrieval.rerank.verifier import Described, Verifier
from retrieval.search import smk

__all__ = ["AsmkScorer", "BowScorer", "Round"]


@dataclass
class Round:
    """The state of one search (never shared between searches).

    ``q`` = (query frames, query descriptors, query hard words) inside the box; ``described`` the query side of
    ``verifier``; ``checked`` (id -> (inliers, box) or None) the outcomes of an earlier round of the same query,
    filled in place, so that the expanded query's round verifies no image twice; ``first`` (ids -> similarities)
    the first round's similarities, set for the expanded query's round: its verified hits report them."""

    q: tuple
    box: tuple
    k: int
    rerank: str
    get_features: Callable | None
    exclude: set
    n_verify: int
    verifier: Verifier
    described: Described
    cache: BytesLRU | None = None
    threads: int = 1
    checked: dict = field(default_factory=dict)
    first: Callable | None = None

    def frames_of(self, image_id: int, kept):
        """An image's frames: ``kept`` (the forward index's), or those of its stored features (a searcher with
        ``keep_frames=False``: the same features, in the same order)."""
        if kept is not None:
            return kept
        if self.get_features is None:
            raise ValueError("this searcher keeps no frames (keep_frames=False): query expansion needs the stored "
                             "features (get_features).")
        return np.asarray(self.get_features(int(image_id)).frames, np.float32)

    def with_words(self, words) -> Round:
        self.q = (self.q[0], self.q[1], np.asarray(words))
        return self


class BowScorer:
    """Zhu et al. 2013 through the searcher's inverted file (module docstring)."""

    def __init__(self, searcher, method: str, alpha: float):
        self.searcher, self.method, self.alpha = searcher, method, alpha

    def search(self, rnd: Round, q_desc, n_qe: int):
        s = self.searcher
        q_words, q_weights = s.assign(q_desc)
        rnd.with_words(q_words[:, 0])
        qw, qtf = s.histogram(q_words, q_weights)
        own = (qw, qtf)   # the query photo's histogram as an indexed copy stores it: the reference of similarity
        hits, verified, rnd.first = self.rank(qw, qtf, rnd, own)
        if not (n_qe and verified):
            return hits
        hw, htf = [qw], [qtf]
        for hit in verified:
            if len(hw) > n_qe:
                break
            words, weights, frames, _ = s.forward(hit.id)
            inside = select_in_box(rnd.frames_of(hit.id, frames), hit.box)
            if inside.any():
                w2, t2 = s.histogram(words[inside], weights[inside])
                if len(w2) == len(qw) and np.array_equal(w2, qw) and np.allclose(t2, qtf):
                    continue  # the query's own image (or an exact copy) adds nothing: skipped
                hw.append(w2)
                htf.append(t2)
        if len(hw) == 1:
            return hits
        qw2, qtf2 = s.histogram(np.concatenate(hw), np.concatenate(htf) / len(hw))
        return self.rank(qw2, qtf2, rnd, own)[0]

    def similarities(self, d, qw, qtf, qv, weight, own):
        """:func:`object_similarity` of the dissimilarities ``d`` relative to that of the histogram ``own`` (0 for a
        query without words)."""
        if len(qw) == 0:
            return np.zeros(len(d))
        ref = bow_dissimilarity(qw, qtf, *own, self.searcher.invfile_.idf_, self.method, weight)
        sims = object_similarity(d, self.method, qv, weight)
        return similarity_ratio(sims, float(object_similarity([ref], self.method, qv, weight)[0]))

    def rank(self, qw, qtf, rnd: Round, own):
        """One round: inverted-file scores, the top R, exact re-scoring, verification; ``(hits[:k], verified,
        similarities)``, the last a function of ids giving this round's similarities. ``own``: the histogram that
        scores similarity 1."""
        s, method = self.searcher, self.method
        inv = s.invfile_
        inv.commit()   # a no-op on a committed searcher (every index's); idf_ must be current for qv
        qv = qtf * inv.idf_[qw]
        scores, weight = inv.scores_of_weights(qw, qv, method, self.alpha)
        if rnd.exclude:
            scores = np.where(np.isin(inv.ids_, list(rnd.exclude)), np.inf, scores)
        R = min(max(s.shortlist, rnd.k), int(np.isfinite(scores).sum()))
        top = topk_by_id(scores, inv.ids_, R)   # ties by id: the same lists however the images are stored
        ids, sc = inv.ids_[top], scores[top]
        k = rnd.k

        def similarities_of(wanted):
            return self.similarities(s.exact(qw, qtf, wanted, method, weight), qw, qtf, qv, weight, own)

        if rnd.rerank == "none":
            return unverified_hits(ids[:k], sc[:k], self.similarities(sc[:k], qw, qtf, qv, weight, own)), [], None
        sc = s.exact(qw, qtf, ids, method, weight)
        order = np.lexsort((ids, sc))
        ids, sc = ids[order], sc[order]
        sims = self.similarities(sc, qw, qtf, qv, weight, own)
        if rnd.rerank == "exact":
            return unverified_hits(ids[:k], sc[:k], sims[:k]), [], None
        return (*s.verified(unverified_hits(ids, sc, sims), rnd), similarities_of)


class AsmkScorer:
    """ASMK* over the searcher's signatures (module docstring)."""

    def __init__(self, searcher, alpha: float):
        self.searcher, self.alpha = searcher, alpha

    def search(self, rnd: Round, q_desc, n_qe: int):
        s = self.searcher
        if not s.signatures:
            raise ValueError("method 'asmk' needs a searcher built with signatures=True (presets 'accurate' and "
                             "'object').")
        centers = s.vocabulary_.cluster_centers_
        words = (s.vocabulary_.kneighbors(q_desc, s.query_words)[1] if len(q_desc)
                 else np.zeros((0, s.query_words), np.int64))
        sw, sV = smk.aggregate_residuals(q_desc, words, centers)
        rnd.with_words(words[:, 0])
        hw, hV = smk.aggregate_residuals(q_desc, words[:, 0], centers)   # the query's own database signatures
        own = smk.binarize(hV)
        hits, verified, rnd.first = self.rank(sw, sV, rnd, (hw, own))
        if not (n_qe and verified):
            return hits
        parts = [(sw, sV)]
        for hit in verified:
            if len(parts) > n_qe:
                break
            fw, _, frames, _ = s.forward(hit.id)
            w2, s2 = s.smk_.signatures_of(hit.id, words=fw[:, 0])   # its lists only: no pass over every posting
            if len(w2) == len(hw) and np.array_equal(w2, hw) and np.array_equal(s2, own):
                continue  # the query's own image (or an exact copy) adds nothing: skipped
            keep = np.isin(w2, fw[select_in_box(rnd.frames_of(hit.id, frames), hit.box), 0])
            if keep.any():
                parts.append((w2[keep], smk.signature_vectors(s2[keep], centers.shape[1])))
        if len(parts) == 1:
            return hits
        ew, eV = smk.expand_query(parts)
        return self.rank(ew, eV, rnd, (hw, own))[0]

    def rank(self, sw, sV, rnd: Round, own):
        """One round: the kernel against every image, the top R by ``1 - K`` (the hits' ``distance``), ``similarity``
        = ``(K / K(own)) ** (1 / alpha)`` clipped to [0, 1] (``own``: the query photo's words and signatures; the
        root puts the kernel's per-word ``u ** alpha`` back on the scale of ``u``), verification;
        ``(hits[:k], verified, similarities)``, the last a function of ids giving this round's similarities."""
        s = self.searcher
        f = s.smk_
        options = {"alpha": self.alpha, "threshold": s.threshold, "asymmetric": s.asymmetric}
        sims = f.similarities(sw, sV, **options)
        ids = f.ids_
        d = 1.0 - sims
        if rnd.exclude:
            d = np.where(np.isin(ids, list(rnd.exclude)), np.inf, d)
        R = min(max(s.shortlist, rnd.k), int(np.isfinite(d).sum()))
        top = topk_by_id(d, ids, R)   # ties broken by id, also at the R-th
        ref = kernel_reference(sw, sV, *own, f.idf_ if s.idf else None, **options)
        hits = unverified_hits(ids[top], d[top], similarity_ratio(sims[top], ref, self.alpha))

        def similarities_of(wanted):
            wanted = np.asarray(wanted, np.int64)
            at = np.isin(ids, wanted)
            found = dict(zip(ids[at].tolist(), similarity_ratio(sims[at], ref, self.alpha).tolist(), strict=True))
            return np.array([found[int(i)] for i in wanted], np.float64)

        if rnd.rerank != "spatial":
            return hits[:rnd.k], [], None
        return (*s.verified(hits, rnd), similarities_of)
