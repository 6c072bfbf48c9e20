"""The one result record of every search, :class:`Hit`, and the one ordering key of every ranked list.

A backend's first stage gives each hit a ``similarity`` in [0, 1] (larger = more similar): its first-stage score
relative to the score that the query photo's own encoding gets through the same path (the stored form of the query:
its vector, its PQ or binary code, its histogram or kernel signatures), clipped to [0, 1]. So the query photo itself
scores 1 in every preset, whether it is indexed or an outside copy of the same file, and the mapping is increasing
in the first-stage score (one positive factor, or one shift, per query: the first-stage order is unchanged). The
per-stage formulas are the ``similarity_*`` functions below (docs/formats.md, "Scores"). Spatial re-ranking may
then mark hits ``verified``. :func:`finish_ranking` applies the ordering key and writes ``score``:

- verified hits first, by decreasing inliers, ties by decreasing similarity:
  ``score = 1 + inliers / (inliers + VERIFIED_SCALE)``, in (1, 2);
- then unverified hits, by decreasing similarity (ties: first-stage order): ``score = similarity``, in [0, 1].

So ``score`` never increases with the rank, and a score above 1 means "verified". Without re-ranking no hit is
verified and ``score == similarity``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VERIFIED_SCALE = 10.0
"""``c`` of the verified score ``1 + inliers / (inliers + c)``: 10 inliers give 1.5, 30 give 1.75."""


@dataclass
class Hit:
    """One ranked search result.

    Attributes
    ----------
    id : int
        Image id (the catalog's ``images.id`` in an index; the caller's id for
        :class:`retrieval.engine.object.searcher.ObjectSearcher`).
    score : float
        The ranking key, non-increasing with the rank (:func:`finish_ranking`): ``1 + inliers / (inliers + 10)``
        for a verified hit (in (1, 2)), ``similarity`` for an unverified one (in [0, 1]).
    inliers : int or None
        One-to-one inliers of the geometric verification, set only when ``verified``.
    box : tuple of 4 float or None
        The matched region ``(x1, y1, x2, y2)`` in the result image (original pixels after EXIF orientation); only
        on a verified hit (and None there too when the projected query box falls outside the image).
    rank : int or None
        1 = best; set by :meth:`Index.search <retrieval.app.index.Index.search>`.
    path : str or None
        Absolute path of the indexed image; set by :meth:`Index.search <retrieval.app.index.Index.search>`.
    similarity : float or None
        The first-stage score relative to the one the query photo's own encoding gets, in [0, 1], larger = more
        similar: 1 for the query photo itself (docs/formats.md, "Scores"); set for every hit a backend returns.
    verified : bool
        Geometric verification vouches for this hit (only spatial re-ranking sets it).
    distance : float or None
        The first stage's own distance or dissimilarity (smaller = closer) when it ranks by one: the object
        preset's l1 / l2 / delta_1 / delta_2 (Zhu et al. 2013; delta_1 may be negative), the ADC squared distance,
        the binary codes' distance; None for the inner product.
    """

    id: int
    score: float
    inliers: int | None = None
    box: tuple[float, float, float, float] | None = None
    rank: int | None = None
    path: str | None = None
    similarity: float | None = None
    verified: bool = False
    distance: float | None = None

    def to_json(self) -> dict:
        """The ``retrieval query --json`` object (docs/formats.md): ``id``, ``rank``, ``path``, ``score``, ``similarity``
        (6 decimals), ``verified``, and ``inliers`` / ``box`` (1 decimal) / ``distance`` (6 decimals) only when
        they are set."""
        out = {"id": int(self.id), "rank": self.rank, "path": self.path, "score": round(float(self.score), 6)}
        if self.inliers is not None:
            out["inliers"] = int(self.inliers)
        if self.box is not None:
            out["box"] = [round(float(v), 1) for v in self.box]
        out["similarity"] = None if self.similarity is None else round(float(self.similarity), 6)
        out["verified"] = bool(self.verified)
        if self.distance is not None:
            out["distance"] = round(float(self.distance), 6)
        return out


def verified_by_rerank(hit: Hit) -> bool:
    """Whether spatial re-ranking verified ``hit`` (:meth:`retrieval.rerank.verifier.Verifier.rerank` sets
    ``hit.verified`` from :func:`retrieval.rerank.verification.verify`). The one place that reads the decision."""
    return bool(hit.verified)


def rank_score(similarity: float, verified: bool, inliers: int | None) -> float:
    """The ordering key as a number: ``1 + inliers / (inliers + VERIFIED_SCALE)`` when verified, else
    ``similarity`` (see the module docstring)."""
    if verified:
        n = max(int(inliers or 0), 0)
        return 1.0 + n / (n + VERIFIED_SCALE) if n else 1.0
    return float(similarity)


def finish_ranking(hits: list[Hit], *, reranked: bool) -> list[Hit]:
    """Apply the ordering key to ``hits`` (first-stage order, ``similarity`` set) and return them re-ordered.

    ``reranked``: spatial re-ranking ran on (a prefix of) the hits; their ``verified`` flag is read by
    :func:`verified_by_rerank`. An unverified hit loses ``inliers`` and ``box``; ``score`` is written on every
    hit (:func:`rank_score`). The sort is stable: ties keep the first-stage order.
    """
    for hit in hits:
        if hit.similarity is None:
            raise ValueError(f"hit {hit.id}: similarity is not set; every first stage must set it.")
        hit.verified = bool(reranked and verified_by_rerank(hit))
        if not hit.verified:
            hit.inliers, hit.box = None, None
        hit.score = rank_score(hit.similarity, hit.verified, hit.inliers)
    return sorted(hits, key=lambda h: (not h.verified, -(h.inliers or 0) if h.verified else 0, -h.similarity))


REFERENCE_FLOOR = 1e-12
"""A reference score at or below this is no reference (a query without features scores 0 against everything)."""


def similarity_ratio(score, reference: float, alpha: float = 1.0):
    """``(score / reference) ** (1 / alpha)`` clipped to [0, 1], for the first stages whose score is a similarity
    that the query's own encoding maximises (an inner product, a normalised kernel): ``reference`` is the score of
    that encoding. ``alpha``: the exponent of a selective kernel's per-word similarity ``u ** alpha`` (ASMK*,
    Tolias et al. 2013, eq. 7), whose root brings the ratio back to the scale of ``u`` (a cosine of descriptors).
    Without a positive reference the score is only clipped."""
    score = np.asarray(score, dtype=np.float64)
    reference = float(reference)
    if reference > REFERENCE_FLOOR:
        score = score / reference
    score = np.clip(score, 0.0, 1.0)
    return score if alpha == 1.0 else score ** (1.0 / float(alpha))


def similarity_from_ip(ip, reference_ip: float):
    """Inner product of a query with stored unit vectors -> ``ip / reference_ip`` clipped to [0, 1], with
    ``reference_ip`` the query's inner product with its own stored vector (1 for a unit vector stored in float32;
    within 1e-3 of 1 in float16): about the cosine, 1 for the query photo, 0 for orthogonal or opposite vectors."""
    return similarity_ratio(ip, reference_ip)


def similarity_from_sq_distance(d, reference_d: float, energy: float = 1.0):
    """Squared distances ``d`` of a query ``x`` to codes (ADC, the asymmetric distances of binary codes: about
    ``||x||^2 + ||y||^2 - 2 <x, y>`` plus the coding error) -> ``1 - (d - reference_d) / (2 energy)`` clipped to
    [0, 1], with ``reference_d`` the query's distance to its own code through the same tables and ``energy`` the
    squared norm of the query as coded (1 for unit vectors; ``||g(x)||^2`` for the centred projection of a binary
    embedding): the estimated cosine, shifted so that the query photo's code scores 1. A query of no energy (no
    features) scores 0."""
    d = np.asarray(d, dtype=np.float64)
    if not energy > REFERENCE_FLOOR:
        return np.zeros(d.shape)
    return np.clip(1.0 - (d - float(reference_d)) / (2.0 * float(energy)), 0.0, 1.0)


def similarity_from_hamming(h, reference_h: float, nbits: float):
    """Hamming distances ``h`` of ``nbits``-bit codes -> ``1 - 2 (h - reference_h) / nbits`` clipped to [0, 1]
    (the normalised Hamming similarity ``1 - 2 h / b``, Charikar 2002; ``reference_h``: the distance to the query
    photo's own code, 0 for the query itself): 1 for the query photo, 0 for half the bits differing (unrelated).
    A weighted Hamming distance passes the sum of its weights as ``nbits``."""
    h = np.asarray(h, dtype=np.float64)
    return np.clip(1.0 - 2.0 * (h - float(reference_h)) / float(nbits), 0.0, 1.0)
