"""The one verifier of the application: :class:`Verifier`, so that a pair of images gets the same verdict, inliers
and box wherever it is checked (re-ranking of a query, the object search, ``retrieval match --index``, the web
page's match view and ``POST /api/match``, the duplicate finder).

A verifier is immutable and holds only settings: the ratio of Lowe's test, the decision threshold and the space in
which descriptors are compared (``describe``). What varies per call (the features of a database image, the cache
of described images, the threads) is an argument. Steps for a query and a database image:

1. both sides described (``describe``: RootSIFT by default; the global presets use RootSIFT reduced by their
   local PCA), the database side read from the feature store and kept in the caller's cache;
2. tentative matches by the ratio test (:func:`retrieval.rerank.matching.tentative_matches`), or, when the
   verifier has the model's :class:`~retrieval.rerank.cells.MatchCells`, by
   :func:`retrieval.rerank.cells.probed_matches` (only matches the exact test keeps, in a fraction of its time)
   for pairs of at least :data:`~retrieval.rerank.cells.EXACT_BELOW` descriptor comparisons;
3. :func:`retrieval.rerank.verification.verify` (affine hypotheses from single correspondences, local
   optimisation, homography refit, degenerate models rejected, one-to-one inliers, ``min_inliers``);
4. the query box projected through the verified transform into the database image
   (:func:`retrieval.rerank.boxes.project_box`); a pair whose projected box falls outside the image is not verified.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import dataclass

import numpy as np

from retrieval.core.cache import BytesLRU, cached
from retrieval.core.threads import parallel_map, shared_pool, single_threaded_blas
from retrieval.features.frames import largest
from retrieval.features.rootsift import root_sift
from retrieval.rerank.boxes import project_box
from retrieval.rerank.cells import EXACT_BELOW, MatchCells, probed_matches
from retrieval.rerank.evidence import (
    Evidence,
    EvidenceModel,
    EvidenceRule,
    QueryEvidence,
    evidence_matches,
    hamming_weights,
)
from retrieval.rerank.matching import tentative_matches
from retrieval.rerank.verification import DEFAULT_MIN_INLIERS, Verification, verify

__all__ = ["Described", "Outcome", "StoredEvidence", "Verifier", "rootsift_descriptors"]


def rootsift_descriptors(descriptors) -> np.ndarray:
    """RootSIFT (float32) of uint8 SIFT descriptors; float descriptors are taken as they are."""
    d = np.asarray(descriptors)
    if d.dtype == np.uint8:
        return np.ascontiguousarray(root_sift(d), dtype=np.float32)
    return np.ascontiguousarray(d, dtype=np.float32)


@dataclass(frozen=True)
class Described:
    """One side of a pair: frames (n, 6), described descriptors (n, d) float32 and the image size (w, h); with
    match cells, the descriptors' place in them: as a query, ``probes`` (:meth:`MatchCells.place_query`), as the
    database side, ``cells`` (:meth:`MatchCells.place_database`)."""

    frames: np.ndarray
    descriptors: np.ndarray
    image_size: tuple[int, int]
    probes: tuple | None = None
    cells: tuple | None = None
    evidence: QueryEvidence | None = None

    @property
    def nbytes(self) -> int:
        extra = sum(a.nbytes for part in (self.probes, self.cells) if part is not None for a in part)
        return int(self.frames.nbytes + self.descriptors.nbytes + extra + 64)


@dataclass(frozen=True)
class StoredEvidence:
    """A database side read from its evidence (:class:`~retrieval.rerank.evidence.Evidence`), its frames
    unpacked once."""

    evidence: Evidence
    frames: np.ndarray

    @property
    def image_size(self) -> tuple[int, int]:
        return self.evidence.image_size

    @property
    def nbytes(self) -> int:
        return int(self.evidence.nbytes + self.frames.nbytes + 64)


@dataclass(frozen=True)
class Outcome:
    """The verdict on one pair: ``verified``, one-to-one ``inliers``, the query ``box`` projected into the database
    image (only when verified), and the underlying :class:`Verification` with its ``matches`` (tentative pairs
    (m, 2), query index then database index)."""

    verified: bool
    inliers: int
    box: tuple[float, float, float, float] | None
    verification: Verification
    matches: np.ndarray

    @property
    def inlier_pairs(self) -> np.ndarray:
        return self.matches[np.asarray(self.verification.inlier_mask, bool)]


@dataclass(frozen=True)
class Verifier:
    """Geometric verification with fixed settings (module docstring).

    Parameters
    ----------
    ratio : float — Lowe's ratio test of the tentative matches (the presets' ``search.ratio``)
    min_inliers : int — one-to-one inliers for a verified pair (the presets' decision threshold)
    describe : callable(uint8 SIFT (n, 128)) -> float32 (n, d), or None for RootSIFT
    cells : :class:`MatchCells` of the described space, or None: the exact ratio test on every pair
    query_features : int — at most this many of a query's features are matched, those of largest scale (0: all;
        the presets' ``search.verify_query_features``); the database side keeps all of its features, so the ratio
        test of each query feature is the same. Not applied to pairs verified on evidence (all features matched).
    evidence : :class:`~retrieval.rerank.evidence.EvidenceModel` or None — with it, a database image stored as its
        evidence (``get_features`` returns an :class:`~retrieval.rerank.evidence.Evidence`) is matched by words
        and signatures (:func:`~retrieval.rerank.evidence.evidence_matches`) with all of the query's features
    rule : :class:`~retrieval.rerank.evidence.EvidenceRule` — how those pairs are matched and decided
    """

    ratio: float = 0.85
    min_inliers: int = DEFAULT_MIN_INLIERS
    describe: Callable | None = None
    cells: MatchCells | None = None
    query_features: int = 0
    evidence: EvidenceModel | None = None
    rule: EvidenceRule = EvidenceRule()

    def described(self, features, roles=("query", "database")) -> Described:
        """The frames and compared descriptors of :class:`LocalFeatures`, placed in the match cells for ``roles``.
        Computed with one BLAS thread wherever it runs (a search, a duplicates run's workers, a test), so that the
        same features always give the same floats (OpenBLAS splits even small products across its threads)."""
        frames = np.asarray(features.frames, np.float32) if len(features) else np.zeros((0, 6), np.float32)
        with single_threaded_blas():
            if len(features) == 0:
                desc = np.zeros((0, 0), np.float32)
            elif self.describe is None:
                desc = rootsift_descriptors(features.descriptors)
            else:
                desc = np.asarray(self.describe(features.descriptors), np.float32)
            return self.side(frames, desc, features.image_size, roles)

    def query_side(self, features) -> Described:
        """A query's side of its pairs: its :attr:`query_features` largest features, described; placed in the match
        cells by :meth:`check_many` when a pair needs it. With an evidence model, also all of its features'
        evidence (:meth:`EvidenceModel.query`), what the pairs with an image stored as evidence match."""
        side = self.described(largest(features, self.query_features), roles=())
        if self.evidence is None:
            return side
        with single_threaded_blas():
            rs = rootsift_descriptors(features.descriptors) if len(features) else np.zeros((0, 128), np.float32)
            q = self.evidence.query(rs, np.asarray(features.frames, np.float32).reshape(-1, 6), self.rule.multiple)
        return Described(side.frames, side.descriptors, side.image_size, side.probes, side.cells, q)

    def side(self, frames, desc, image_size, roles=("query", "database")) -> Described:
        """One side of a pair from frames and descriptors already described, placed in the cells (when there are,
        of the same dimension) for ``roles`` ("query", "database")."""
        probes = cells = None
        if self.cells is not None and len(desc) and desc.shape[1] == self.cells.centres.shape[1]:
            probes = self.cells.place_query(desc) if "query" in roles else None
            cells = self.cells.place_database(desc) if "database" in roles else None
        return Described(frames, desc, tuple(int(v) for v in image_size), probes, cells)

    def database(self, image_id: int, get_features: Callable, cache: BytesLRU | None = None) -> Described:
        """The described database image ``image_id`` (``get_features(id)``), kept in ``cache`` under
        ``("described", id)`` (the caller guarantees an id always names the same content)."""
        return cached(cache, ("described", int(image_id)),
                      lambda: self.database_side(get_features(int(image_id))), lambda v: v.nbytes)

    def database_side(self, stored):
        """A database image's side from what the store returned: its evidence as it is (frames unpacked), or its
        features described."""
        if isinstance(stored, Evidence):
            return StoredEvidence(stored, stored.frames)
        return self.described(stored, roles=("database",))

    def probes_pair(self, n_query: int, n_db: int) -> bool:
        """Whether a pair of ``n_query`` and ``n_db`` described features is large enough for the probed test (this
        verifier has match cells and the pair at least :data:`EXACT_BELOW` comparisons): only then do its sides need
        a place in the cells."""
        return self.cells is not None and int(n_query) * int(n_db) >= EXACT_BELOW

    @staticmethod
    def probed(query: Described, db: Described) -> bool:
        """Whether the pair is matched by the probed test (both sides placed, at least :data:`EXACT_BELOW`
        comparisons) rather than the exact one."""
        return query.probes is not None and db.cells is not None and \
            len(query.descriptors) * len(db.descriptors) >= EXACT_BELOW

    def matches(self, query: Described, db) -> np.ndarray:
        """The tentative matches of a pair, (m, 2) int64 (query index, database index): the probed test or the
        exact one (module docstring, step 2); for a database side stored as evidence, the words and signatures
        shared with the query (all of its features)."""
        if isinstance(db, StoredEvidence):
            return self.evidence_matches(query, db)[0]
        if self.probed(query, db):
            return probed_matches(query.descriptors, query.probes[0], db.descriptors, db.cells[0], db.cells[1],
                                  ratio=self.ratio, query_bound=query.probes[1])
        if len(query.descriptors) and len(db.descriptors):
            return tentative_matches(query.descriptors, db.descriptors, ratio=self.ratio)
        return np.empty((0, 2), np.int64)

    def evidence_matches(self, query: Described, db: StoredEvidence) -> tuple[np.ndarray, np.ndarray]:
        """The tentative matches of a pair whose database side is stored as evidence, and their Hamming
        distances (:func:`~retrieval.rerank.evidence.evidence_matches` with :attr:`rule`)."""
        if query.evidence is None:
            raise ValueError("a database image stored as evidence needs a verifier with its evidence model.")
        r = self.rule
        return evidence_matches(query.evidence, db.evidence, r.hamming, ratio=r.ratio, mutual=r.mutual)

    def check(self, query: Described, db, query_box) -> Outcome:
        """The verdict on ``query`` (the features searched: inside the box) against ``db``; ``query_box`` is projected
        into the database image when the pair verifies. A database side stored as evidence is decided by
        :attr:`rule` (its inliers' Hamming weights), any other by ``min_inliers``."""
        if isinstance(db, StoredEvidence):
            matches, distances = self.evidence_matches(query, db)
            v = verify(query.evidence.frames, db.frames, matches, min_inliers=self.rule.min_inliers)
            weight = float(hamming_weights(distances[np.asarray(v.inlier_mask, bool)], self.rule.sigma).sum()) \
                if len(matches) else 0.0
            ok = bool(v.verified) and weight >= self.rule.min_weight
        else:
            matches = self.matches(query, db)
            v = verify(query.frames, db.frames, matches, min_inliers=self.min_inliers)
            ok = bool(v.verified)
        box = project_box(query_box, v.transform, db.image_size) if ok else None
        return Outcome(bool(ok and box is not None), int(v.inliers), box, v, matches)

    def check_many(self, query: Described, image_ids, query_box, get_features: Callable, *,
                   cache: BytesLRU | None = None, threads: int = 1) -> list[Outcome]:
        """:meth:`check` of ``query`` against each of ``image_ids``, side by side on ``threads`` threads of the
        shared pool (the ratio test's products release the GIL); same outcomes in the same order whatever
        ``threads``. A query not yet placed in the match cells is placed once, when one of the pairs is large
        enough for the probed test (:meth:`probes_pair`): pairs of thumbnails never need it, and then load no
        compiled kernel."""
        ids = [int(i) for i in image_ids]
        dbs = parallel_map(lambda i: self.database(i, get_features, cache), ids, threads)
        placed = self._placing(query)
        return parallel_map(lambda db: self.check(placed(db), db, query_box), dbs, threads)

    def _placing(self, query: Described) -> Callable:
        """``db -> query`` for the pair with ``db``: ``query`` placed in the match cells (once, by the first pair
        that needs it, under a lock) when the pair is large enough for the probed test, else as it is."""
        placed, lock = {}, threading.Lock()

        def query_for(db):
            if self.cells is None or query.probes is not None or isinstance(db, StoredEvidence) or \
                    not self.probes_pair(len(query.descriptors), len(db.descriptors)):
                return query
            with lock:
                if "query" not in placed:
                    placed["query"] = self.side(query.frames, query.descriptors, query.image_size, roles=("query",))
            return placed["query"]

        return query_for

    def rerank(self, hits: list, query_features, query_box, get_features: Callable, *, shortlist: int,
               cache: BytesLRU | None = None, threads: int = 1, patience: int = 0, enough: int = 0) -> list:
        """Spatial re-ranking of the first ``shortlist`` hits (Philbin et al. 2007): each gets ``inliers``, and
        ``verified`` and ``box`` when it verifies; verified hits first by decreasing inliers (ties by first-stage
        score), then the rest of the shortlist and the tail in their first-stage order. ``hits`` are this call's
        own records (set in place).

        Early stopping (the shortlist is then verified in its order, a few hits ahead on the ``threads``; the
        outcomes beyond the stopping point are dropped, so the result does not depend on ``threads``):

        - ``patience`` > 0: verification stops after ``patience`` unverified hits in a row; the hits after that
          point are left unverified, after those that failed (in their order);
        - ``enough`` > 0: verification stops once ``enough`` hits have verified (a burst of near-copies need not
          all be checked); the hits not checked follow the verified ones, in their order, before those that
          failed (a failed check is evidence against a hit, an unchecked one has none)."""
        if len(query_features) == 0 or not hits:
            return hits
        query = self.query_side(query_features)
        head, tail = hits[:shortlist], hits[shortlist:]
        if patience <= 0 and enough <= 0:
            outcomes = self.check_many(query, [h.id for h in head], query_box, get_features, cache=cache,
                                       threads=threads)
        else:
            outcomes = self._until(query, head, query_box, get_features, cache, threads, patience, enough)
        verified, unverified = [], []
        for hit, o in zip(head, outcomes, strict=False):
            hit.inliers, hit.verified, hit.box = o.inliers, o.verified, o.box
            (verified if o.verified else unverified).append(hit)
        verified.sort(key=lambda h: (-h.inliers, -h.score))
        unchecked = head[len(outcomes):]
        if enough > 0 and len(verified) >= enough:
            return verified + unchecked + unverified + tail
        return verified + unverified + unchecked + tail

    def _until(self, query, head, query_box, get_features, cache, threads, patience, enough) -> list[Outcome]:
        """The outcomes of ``head`` in its order up to the stopping point of :meth:`rerank`'s ``patience`` /
        ``enough``: checked on ``threads`` threads of the shared pool, at most ``2 threads`` ahead of the outcome
        examined, so that the stopping point depends on the outcomes only and little is checked beyond it (what
        is, is dropped). The query is placed in the match cells once, by the first pair that needs it."""
        query_for = self._placing(query)

        def one(hit):
            db = self.database(hit.id, get_features, cache)
            return self.check(query_for(db), db, query_box)

        outcomes, counts = [], {"misses": 0, "found": 0}

        def take(o):
            outcomes.append(o)
            counts["misses"] = 0 if o.verified else counts["misses"] + 1
            counts["found"] += bool(o.verified)
            return (patience > 0 and counts["misses"] >= patience) or (enough > 0 and counts["found"] >= enough)

        if threads <= 1:
            for hit in head:
                if take(one(hit)):
                    break
            return outcomes
        pool, ahead, pending = shared_pool(threads), 2 * int(threads), deque()
        nxt = 0
        try:
            while nxt < len(head) or pending:
                while nxt < len(head) and len(pending) < ahead:
                    pending.append(pool.submit(one, head[nxt]))
                    nxt += 1
                if take(pending.popleft().result()):
                    break
        finally:
            for f in pending:
                f.cancel()
            wait(pending)
        return outcomes
