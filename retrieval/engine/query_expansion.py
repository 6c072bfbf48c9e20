"""Average query expansion (Chum et al. 2007) of the global presets: the query vector averaged with the vectors of
its best verified hits and searched again (``search.query_expansion``)."""

from __future__ import annotations

import numpy as np

from retrieval.engine.hits import Hit, finish_ranking, similarity_from_ip

__all__ = ["average_query_expansion"]


def average_query_expansion(q, hits, checked, n_qe: int, *, first_stage, verify, vectors_of, depth: int,
                            shortlist: int) -> list[Hit]:
    """Average query expansion (Chum et al. 2007): the query vector ``q`` plus the vectors of the ``n_qe`` best
    verified hits (skipping the query's own image: inner product with the query above 1 - 1e-5),
    L2-normalised, searched again. Hits verified (or rejected) in the first round keep that
    outcome; new shortlist entries are verified against the original query. Verified hits of the first round
    that the second search misses are kept.

    Similarities: ``first_stage(v, n, reference=q)`` scores the second search's hits relative to the score the
    expanded query gives the query photo's own stored vector (the query photo stays at 1, the order is the expanded
    query's); a verified hit keeps its similarity to the query photo (the first round's; for a photo the first
    round did not rank, the cosine of its vector with ``q``), so that the photos averaged into the expanded query,
    which it scores about as high as the query photo, do not read as copies of it."""
    cand = [h for h in hits if h.verified][:n_qe + 1]
    V = vectors_of([h.id for h in cand]) if cand else np.zeros((0, len(q)), np.float32)
    V = V[V @ q < 1.0 - 1e-5][:n_qe]  # the query's own image (or an exact copy) adds nothing: skipped
    if len(V) == 0:
        return hits
    q2 = q.astype(np.float64) + V.sum(axis=0)
    norm = float(np.linalg.norm(q2))
    if norm == 0:
        return hits
    q2 = (q2 / norm).astype(np.float32)
    second = first_stage(q2, depth, reference=q)
    fresh = [h for h in second[:shortlist] if h.id not in checked]
    done = {h.id: h for h in verify(fresh)} if fresh else {}
    out = []
    for h in second:
        old = checked.get(h.id)
        if old is not None:
            h.verified, h.inliers, h.box = old.verified, old.inliers, old.box
        elif h.id in done:
            h = done[h.id]
        out.append(h)
    seen = {h.id for h in out}
    out.extend(h for h in hits if h.verified and h.id not in seen)   # with their first-round similarity
    first = {h.id: h.similarity for h in hits}
    unranked = [h for h in out if h.verified and h.id not in first]
    if unranked:
        sims = similarity_from_ip(vectors_of([h.id for h in unranked]) @ q, float(q @ q))
        first.update(zip([h.id for h in unranked], sims.tolist(), strict=True))
    for h in out:
        if h.verified:
            h.similarity = float(first[h.id])
    return finish_ranking(out, reranked=True)
