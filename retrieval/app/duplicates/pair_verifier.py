"""The verdict on a pair of photos for ``retrieval duplicates`` (step 3 of :mod:`retrieval.app.duplicates`): the
cheap check on the largest features, then the full features, with the index's one verifier; the evidence that a
verified pair is the same photograph (:mod:`retrieval.app.duplicates.same_photo`)."""

from __future__ import annotations

import logging
from dataclasses import replace as _replace

import numpy as np

from retrieval.app.duplicates.groups import DuplicatePair
from retrieval.app.duplicates.same_photo import (
    MIN_AGREEMENT,
    block_agreement,
    grey_thumbnail,
    same_photograph,
    turned,
)
from retrieval.features.frames import largest

logger = logging.getLogger(__name__)

DUPLICATE_MIN_INLIERS = 12
"""One-to-one inliers a same-scene pair needs: stricter than the query re-ranking's (9), since one false pair joins
two groups; 12 is the smallest with at most 1 false verification in 20,000 unrelated real pairs (docs/results.md,
"Geometric verification"). A near pair needs the preset's own threshold and the same-photograph evidence."""

CHEAP_FEATURES = 200
"""Features (the largest) of each photo in the cheap check that settles most copies before full verification."""

OTHER_VIEW_DEVIATION = 2.0
OTHER_VIEW_RESIDUAL = 2.0
"""A cheap check's inliers show another view, not the same photograph, when the similarity fitted to them turns by
more than this many degrees away from a quarter turn, or leaves a median residual of more than this many pixels of
the smaller photo: the pair is a same-scene pair without the full features (on the labelled set the cheap inliers
of copies the full check confirmed deviate by 0.06 degrees and 0.51 px at most; docs/results.md, "Duplicates")."""


def another_view(evidence) -> bool:
    """Whether :class:`NearEvidence <retrieval.app.duplicates.same_photo.NearEvidence>` of a cheap check rules out the
    same photograph (:data:`OTHER_VIEW_DEVIATION`, :data:`OTHER_VIEW_RESIDUAL`)."""
    return evidence.deviation > OTHER_VIEW_DEVIATION or evidence.residual > OTHER_VIEW_RESIDUAL


def _regions(fa, fb, outcome) -> tuple | None:
    ip = outcome.inlier_pairs
    if len(ip) == 0:
        return None
    pa, pb = np.asarray(fa.frames)[ip[:, 0], :2], np.asarray(fb.frames)[ip[:, 1], :2]
    return (tuple(np.r_[pa.min(0), pa.max(0)]), tuple(np.r_[pb.min(0), pb.max(0)]))


class PairVerifier:
    """The verdict on a pair of photos (module docstring, step 3), with the index's one verifier
    (:attr:`Searcher.verifier <retrieval.app.searcher.Searcher.verifier>`). Settings are fixed; what varies per
    pair is an argument; the described features are kept in a bounded cache of this finder (``cache_mb``)."""

    def __init__(self, searcher, *, min_inliers: int = DUPLICATE_MIN_INLIERS, cache_mb: float = 768):
        from retrieval.core.cache import BytesLRU

        self.searcher = searcher
        self.verifier = searcher.verifier
        self.min_inliers = int(min_inliers)
        self.cache = BytesLRU(int(cache_mb * 2**20))
        self.sides = None

    def prepare(self, ids, *, threads: int = 1, folder=None, progress=None) -> None:
        """Read each photo of ``ids`` once, before any check: its feature count and upright cheap side kept for
        the run (:class:`retrieval.app.duplicates.sides.CheapSides`); call :meth:`close` after the run."""
        from retrieval.app.duplicates.sides import CheapSides

        def make(image_id):
            f = self.features(image_id)
            if len(f) <= CHEAP_FEATURES:
                return len(f), None
            return len(f), self.verifier.described(largest(f, CHEAP_FEATURES), roles=())

        try:
            self.sides = CheapSides(ids, make, size=CHEAP_FEATURES, threads=threads, folder=folder,
                                    progress=progress)
        except OSError as exc:
            logger.warning("the cheap-check features of %d photos cannot be kept for this run (%s): each check "
                           "reads the stored features again, which is slower", len(ids), exc)
            self.sides = None

    def close(self) -> None:
        """Release what :meth:`prepare` kept."""
        if self.sides is not None:
            self.sides.close()

    def features(self, image_id: int):
        """The stored features of an indexed photo (read from the feature store; not kept: the cheap sides are)."""
        return self.searcher.features_of(int(image_id))

    def _count(self, key, features) -> int:
        """Number of features of one side (``features``: LocalFeatures or a callable giving them)."""
        from retrieval.core.cache import cached

        if key is None:
            return len(features() if callable(features) else features)
        kept = None if self.sides is None else self.sides.count(key)
        if kept is not None:
            return kept
        return cached(self.cache, ("n", key), lambda: len(features() if callable(features) else features),
                      lambda v: 32)

    def _side(self, key, features, turn: int, cheap: bool):
        """``(features, described)`` of one side: turned, reduced to the largest for the cheap check; cached under
        ``key`` (None: not cached). ``features``: LocalFeatures or a callable giving them (read only when the side
        is not cached)."""
        from retrieval.core.cache import cached

        def make():
            f = features() if callable(features) else features
            f = turned(f, turn) if turn else f
            f = largest(f, CHEAP_FEATURES) if cheap else f
            return f, self.verifier.described(f, roles=())    # placed in the match cells only when needed

        if key is None:
            return make()
        if cheap and turn == 0 and self.sides is not None:
            side = self.sides.side(key)
            if side is not None:        # frames and image size are all the check and its evidence read
                return side, side
        return cached(self.cache, (key, turn, cheap), make, lambda v: v[1].nbytes + v[0].frames.nbytes)

    def thumbnail(self, path: str):
        """:func:`retrieval.app.duplicates.same_photo.grey_thumbnail` of ``path``, cached (None when undecodable)."""
        from retrieval.core.cache import cached

        def make():
            try:
                return grey_thumbnail(path)
            except (OSError, ValueError):
                return None

        return cached(self.cache, ("thumb", path), make, lambda v: 64 if v is None else v[0].nbytes + 64)

    def pixels_agree(self, pair: DuplicatePair, path_a: str, path_b: str, size_a, size_b) -> bool:
        """Whether a near pair's pixels agree over the overlap (:func:`block_agreement` >= ``MIN_AGREEMENT``);
        records the figure in ``pair.evidence``."""
        ta, tb = self.thumbnail(path_a), self.thumbnail(path_b)
        if ta is None or tb is None or pair.evidence is None:
            return False
        agreement = block_agreement(ta, tb, size_a, size_b, pair.evidence.similarity)
        pair.evidence = _replace(pair.evidence, agreement=agreement)
        return agreement >= MIN_AGREEMENT

    def _placed(self, key, turn: int, side, role: str):
        """``side`` placed in the verifier's match cells for ``role`` ("query" or "database"), cached under ``key``
        (None: not cached)."""
        from retrieval.core.cache import cached

        f, d = side

        def make():
            return f, self.verifier.side(d.frames, d.descriptors, d.image_size, roles=(role,))

        if key is None:
            return make()
        return cached(self.cache, (key, turn, role), make, lambda v: v[1].nbytes)

    def _full_check(self, ka, kb, sa, sb, turn: int):
        """The check of two full sides: placed in the match cells first when the pair is large enough for the
        probed ratio test (:meth:`Verifier.probes_pair <retrieval.rerank.verifier.Verifier.probes_pair>`), so that
        a pair matched exactly pays no placement."""
        if self.verifier.probes_pair(len(sa[1].descriptors), len(sb[1].descriptors)):
            sa, sb = self._placed(ka, turn, sa, "query"), self._placed(kb, 0, sb, "database")
        return self._check(sa, sb)

    def _check(self, a, b):
        (fa, da), (_, db) = a, b
        whole = (0.0, 0.0, float(fa.image_size[0] - 1), float(fa.image_size[1] - 1))
        return self.verifier.check(da, db, whole)

    def check_features(self, fa, fb, turn: int = 0, full: bool = True, keys=(None, None)):
        """``(kind or None, inliers, evidence, regions)`` of photo features ``fa`` turned by ``turn`` quarter turns
        against ``fb``: near, scene, or None (not verified). The cheap check first (the largest features): near when
        its inliers show the same photograph, scene when they clearly show another view (:func:`another_view`);
        the full features when it verified without settling near or scene, or when it did not verify and
        ``full``. ``keys``: cache keys of the two sides."""
        ka, kb = keys
        cheap = self._count(ka, fa) > CHEAP_FEATURES and self._count(kb, fb) > CHEAP_FEATURES
        if cheap:
            sa, sb = self._side(ka, fa, turn, True), self._side(kb, fb, 0, True)
            o = self._check(sa, sb)
            if o.verified:
                ev = same_photograph(sa[0], sb[0], o.inlier_pairs)
                if ev.near:
                    return "near", int(o.inliers), ev, _regions(sa[0], sb[0], o)
                if o.inliers >= self.min_inliers and another_view(ev):
                    return "scene", int(o.inliers), ev, _regions(sa[0], sb[0], o)
            elif not full:
                return None, int(o.inliers), None, None
        sa, sb = self._side(ka, fa, turn, False), self._side(kb, fb, 0, False)
        o = self._full_check(ka, kb, sa, sb, turn)
        if not o.verified:
            return None, int(o.inliers), None, None
        ev = same_photograph(sa[0], sb[0], o.inlier_pairs)
        if ev.near:
            return "near", int(o.inliers), ev, _regions(sa[0], sb[0], o)
        if (full or cheap) and o.inliers >= self.min_inliers:
            return "scene", int(o.inliers), ev, _regions(sa[0], sb[0], o)
        return None, int(o.inliers), ev, None

    def check(self, a: int, b: int, turn: int = 0, features_a=None, full: bool = True):
        """:meth:`check_features` of indexed photos ``a`` (or ``features_a``, not cached) and ``b``, ``a`` turned by
        the turn its code matched with."""
        fa = _Once(lambda: self.features(a)) if features_a is None else features_a
        keys = (None if features_a is not None else int(a), int(b))
        return self.check_features(fa, _Once(lambda: self.features(b)), turn, full, keys)


class _Once:
    """A zero-argument callable giving the same value each time, computed at the first call."""

    def __init__(self, make):
        self.make, self.value = make, None

    def __call__(self):
        if self.value is None:
            self.value = self.make()
        return self.value
