"""Duplicates of an index, in three kinds that never mix (``retrieval duplicates``, ``--against``,
``retrieval query --exclude-duplicates``).

- **exact**: the same bytes (the catalog's content hash), or the same decoded pixels (a lossless re-encoding);
- **near**: the same photograph, edited: resized, re-encoded, cropped, turned by a quarter turn, lightly
  retouched. A verified pair whose inliers show one frame as a similarity of the other with the same interest
  points (:func:`retrieval.app.near_duplicates.same_photograph`);
- **scene**: the same object or place photographed again: a verified pair (at least ``min_inliers`` one-to-one
  inliers) that is not the same photograph.

How (each step bounded by what it costs):

1. exact copies by content hash, from the catalog;
2. candidates by one compact global code per photo (:mod:`retrieval.app.duplicate_codes`), compared all against
   all in blocks, each photo also turned by 90 and 180 degrees: the ``candidates`` most similar photos with at
   least ``threshold`` similarity;
3. each candidate pair verified by the index's verifier (ratio test and descriptor space of its searches): first a
   cheap check on the :data:`CHEAP_FEATURES` largest features of each photo, which settles most copies and most
   other views of a scene, then the full features; a near pair of equal sizes is compared pixel by pixel (exact when equal);
4. groups: exact copies first (one group per set of equal files), near duplicates between the keepers of exact
   groups, same-scene groups between the keepers of near groups. Each group has a suggested keeper
   (:mod:`retrieval.app.photo_facts`: largest resolution, then original format, then oldest; ``keeper_rule``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace as _replace

import numpy as np

from retrieval.app.duplicate_groups import (
    KIND_ORDER,
    KINDS,
    Components,
    DuplicateGroup,
    DuplicatePair,
    build_groups,
)
from retrieval.app.near_duplicates import (
    MIN_AGREEMENT,
    block_agreement,
    grey_thumbnail,
    same_photograph,
    turned,
)
from retrieval.app.photo_facts import KEEPER_RULE

logger = logging.getLogger(__name__)

DEFAULT_CANDIDATES = 10
"""Most similar photos (global code) checked for each photo."""

DEFAULT_THRESHOLD = 0.6
"""Least global similarity (codes centred on the collection's mean) of a candidate pair verified with all its
features when the cheap check (the largest features) did not verify it; below it, a pair is reported only when the
cheap check verifies it (docs/results.md and docs/benchmarks.md, "Duplicates")."""

DUPLICATE_MIN_INLIERS = 12
"""One-to-one inliers a same-scene pair needs: stricter than the query re-ranking's (9), since one false pair joins
two groups; 12 is the smallest with at most 1 false verification in 20,000 unrelated real pairs (docs/results.md,
"Geometric verification"). A near pair needs the preset's own threshold and the same-photograph evidence."""

FULL_RANKS = 2
"""Of each photo's candidates, the most similar this many may be verified with all their features when the cheap
check did not verify them (and their similarity is at least the threshold): full verification costs a bounded
number of pairs per photo."""

CHEAP_FEATURES = 200
"""Features (the largest) of each photo in the cheap check that settles most copies before full verification."""

OTHER_VIEW_DEVIATION = 2.0
OTHER_VIEW_RESIDUAL = 2.0
"""A cheap check's inliers show another view, not the same photograph, when the similarity fitted to them turns by
more than this many degrees away from a quarter turn, or leaves a median residual of more than this many pixels of
the smaller photo: the pair is a same-scene pair without the full features (on the labelled set the cheap inliers
of copies the full check confirmed deviate by 0.06 degrees and 0.51 px at most; docs/results.md, "Duplicates")."""

ALL_TURNS = (0, 1, 2, 3)
"""Quarter turns of a new photo compared with the indexed photos (``--against``: one side only, so all four)."""

__all__ = ["KINDS", "DuplicateGroup", "DuplicatePair", "PairVerifier", "build_groups", "exclude_duplicates",
           "find_against", "find_duplicates", "pixel_digest"]


def pixel_digest(path) -> str | None:
    """Digest of the decoded pixels of an image file (RGB, with its size, after EXIF orientation): equal for byte
    copies and lossless re-encodings; None when the file cannot be decoded."""
    from retrieval.features.image import ImageReadError, open_image

    try:
        rgb = open_image(path).convert("RGB")
    except (OSError, ImageReadError):
        return None
    return hashlib.blake2b(repr(rgb.size).encode() + rgb.tobytes(), digest_size=16).hexdigest()


def _largest(features, n: int):
    """The ``n`` largest-scale features (all when there are fewer)."""
    if len(features) <= n:
        return features
    f = np.asarray(features.frames, np.float64)
    scale = np.abs(f[:, 2] * f[:, 5] - f[:, 3] * f[:, 4])
    keep = np.sort(np.argpartition(-scale, n - 1)[:n])
    return type(features)(frames=features.frames[keep], descriptors=features.descriptors[keep],
                          image_size=features.image_size, config=features.config)


def another_view(evidence) -> bool:
    """Whether :class:`NearEvidence <retrieval.app.near_duplicates.NearEvidence>` of a cheap check rules out the
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
        the run (:class:`retrieval.app.duplicate_sides.CheapSides`); call :meth:`close` after the run."""
        from retrieval.app.duplicate_sides import CheapSides

        def make(image_id):
            f = self.features(image_id)
            if len(f) <= CHEAP_FEATURES:
                return len(f), None
            return len(f), self.verifier.described(_largest(f, CHEAP_FEATURES), roles=())

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
        if self.sides is not None and self.sides.count(key) is not None:
            return self.sides.count(key)
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
            if cheap:       # 200 x 200 comparisons: always the exact ratio test, no match cells to place
                f = _largest(f, CHEAP_FEATURES)
                return f, self.verifier.described(f, roles=())
            return f, self.verifier.described(f)

        if key is None:
            return make()
        if cheap and turn == 0 and self.sides is not None:
            side = self.sides.side(key)
            if side is not None:        # frames and image size are all the check and its evidence read
                return side, side
        return cached(self.cache, (key, turn, cheap), make, lambda v: v[1].nbytes + v[0].frames.nbytes)

    def thumbnail(self, path: str):
        """:func:`retrieval.app.near_duplicates.grey_thumbnail` of ``path``, cached (None when undecodable)."""
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
        o = self._check(sa, sb)
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


def _same_pixels(path_a: str, path_b: str, pair: DuplicatePair, fa, fb) -> bool:
    """Whether a near pair has the same decoded pixels: only possible when their features are identical (the
    extraction is deterministic), then confirmed by decoding both."""
    if pair.turn or len(fa) != len(fb) or tuple(fa.image_size) != tuple(fb.image_size):
        return False
    if not (np.array_equal(fa.frames, fb.frames) and np.array_equal(fa.descriptors, fb.descriptors)):
        return False
    da = pixel_digest(path_a)
    return da is not None and da == pixel_digest(path_b)


VERIFY_CHUNK = 32
"""Candidate pairs verified side by side between two updates of the known groups."""


def verify_candidates(verifier: PairVerifier, candidates, ids, paths, *, threshold: float, threads: int = 1,
                      progress=None, features_a=None) -> list[DuplicatePair]:
    """The reported pairs among ``candidates`` (``(i, j, similarity, turn, rank)`` positions into ``ids``/``paths``, by
    decreasing similarity): near (exact when the pixels are equal), scene (only for candidates of similarity
    ``threshold`` or more); unverified pairs dropped. A pair whose photos are already joined as the same
    photograph by the pairs reported before it is not checked again (it would change no group); with
    ``features_a``, the query side is a new photo ``features_a[i]`` and every pair is checked."""
    from retrieval.core.threads import parallel_map, single_threaded_blas

    joined = Components()

    def one(c):
        i, j, sim, turn, rank = c
        fa = None if features_a is None else features_a[i]
        kind, inliers, ev, regions = verifier.check(ids[i] if fa is None else -1, ids[j], turn, fa,
                                                    full=sim >= threshold and rank < FULL_RANKS)
        if kind is None:
            return None
        pair = DuplicatePair(ids[i] if fa is None else -1, ids[j], kind, sim, inliers, turn, ev, regions)
        if kind == "near":
            f1 = verifier.features(ids[i]) if fa is None else fa
            f2 = verifier.features(ids[j])
            if _same_pixels(paths[i], paths[j], pair, f1, f2):
                pair.kind = "exact"
            elif not verifier.pixels_agree(pair, paths[i], paths[j], f1.image_size, f2.image_size):
                if sim >= threshold and rank < FULL_RANKS and inliers >= verifier.min_inliers:
                    pair.kind = "scene"
                else:
                    return None
        return pair

    out, done = [], 0
    candidates = list(candidates)
    for s in range(0, len(candidates), VERIFY_CHUNK):
        chunk = [c for c in candidates[s:s + VERIFY_CHUNK]
                 if features_a is not None or joined.find(c[0]) != joined.find(c[1])]
        with single_threaded_blas():       # small products: one BLAS thread each (retrieval.core.threads)
            verdicts = parallel_map(one, chunk, threads)
        for p, c in zip(verdicts, chunk, strict=True):
            if p is not None:
                out.append(p)
                if p.kind in ("exact", "near") and features_a is None:
                    joined.join(c[0], c[1])
        done = min(s + VERIFY_CHUNK, len(candidates))
        if progress is not None:
            progress(done, len(candidates))
    return out


def find_duplicates(idx, *, threshold: float = DEFAULT_THRESHOLD, candidates: int = DEFAULT_CANDIDATES,
                    min_inliers: int = DUPLICATE_MIN_INLIERS, keeper_rule=KEEPER_RULE, threads: int = 1,
                    progress=None) -> list[DuplicateGroup]:
    """Groups of exact copies, near duplicates and same-scene photos of an index (module docstring).

    Parameters
    ----------
    idx : :class:`retrieval.app.index.Index`
    threshold : least global similarity of a candidate pair (exact copies by hash whatever it is)
    candidates : most similar photos checked for each photo
    min_inliers : one-to-one inliers of a same-scene pair
    keeper_rule : criteria of the suggested keeper (:func:`retrieval.app.photo_facts.parse_keeper_rule`)
    threads : pairs verified side by side
    progress : callable(done, total) or None — called while encoding, then while verifying

    Returns
    -------
    list of :class:`DuplicateGroup`: exact groups, then near, then scene; in each kind the largest first.
    """
    from retrieval.app.duplicate_candidates import candidate_pairs, search_cells
    from retrieval.app.duplicate_codes import CodeSpace, centred

    _, rows = idx.catalog.snapshot()
    rows = [r for r in rows if r["status"] == "indexed"]
    by_id = {r["id"]: r for r in rows}
    by_hash: dict = {}
    for r in sorted(rows, key=lambda r: r["id"]):
        by_hash.setdefault(r["hash"], []).append(r["id"])
    pairs = [DuplicatePair(ids[0], other, "exact") for ids in by_hash.values() for other in ids[1:]]
    reps = sorted(ids[0] for ids in by_hash.values())
    searcher = idx.searcher()
    space = CodeSpace(searcher, idx.path)
    verifier = PairVerifier(searcher, min_inliers=min_inliers)
    Q = centred(space.codes(reps, [by_id[i]["hash"] for i in reps], progress=progress))
    if reps:
        C = np.ascontiguousarray(Q[:, 0])
        found = candidate_pairs(Q, C, k=candidates, threshold=-1.0, cells=search_cells(C))
        paths = [by_id[i]["path"] for i in reps]
        verifier.prepare(sorted({reps[p[0]] for p in found} | {reps[p[1]] for p in found}), threads=threads,
                         folder=idx.path, progress=progress)
        try:
            pairs += verify_candidates(verifier, found, reps, paths, threshold=threshold, threads=threads,
                                       progress=progress)
        finally:
            verifier.close()
    return build_groups(pairs, by_id, keeper_rule)


def exclude_duplicates(idx, query, hits: list, k: int) -> tuple[list, list]:
    """``(kept, dropped)``: ``hits`` without those that are exact copies or near duplicates of the query or of a
    better-ranked kept hit; at most ``k`` kept, ranks renumbered. Same-scene photos are kept."""
    from dataclasses import replace

    from retrieval.features.store import file_hash

    q = idx.query(query)
    feats, row = q.all_features, q.row
    searcher = idx.searcher()
    by_id = searcher.rows
    if row is not None:
        q_hash = row["hash"]
    else:
        try:
            q_hash = file_hash(query)
        except OSError:
            q_hash = None
    verifier = PairVerifier(searcher)
    kept, dropped = [], []
    for h in hits:
        r = by_id.get(h.id)
        dup = r is not None and r["hash"] == q_hash
        if not dup and r is not None:
            dup = verifier.check(-1, h.id, features_a=feats)[0] in ("near", "exact")
            for better in kept:
                if dup:
                    break
                rb = by_id.get(better.id)
                dup = rb is not None and (rb["hash"] == r["hash"]
                                          or verifier.check(better.id, h.id, full=False)[0] == "near")
        (dropped if dup else kept).append(h)
    kept = [replace(h, rank=i + 1) for i, h in enumerate(kept[:k])]
    return kept, dropped


def find_against(idx, paths, *, threshold: float = DEFAULT_THRESHOLD, candidates: int = DEFAULT_CANDIDATES,
                 min_inliers: int = DUPLICATE_MIN_INLIERS, threads: int = 1, progress=None) -> list[dict]:
    """For each photo of ``paths`` (not indexed, and not added), the indexed photos it duplicates: exact copies
    (same bytes or pixels), near duplicates, same scene (module docstring; the same candidates and checks as
    :func:`find_duplicates`, the new photo's code compared with the index's kept codes).

    Returns
    -------
    list of ``{"path", "kind", "matches": [{"id", "path", "kind", "inliers"}], "error"}`` in the order of
    ``paths``: ``kind`` the tightest among the matches, None when nothing matches (``error``: one line when the file
    could not be read, else None).
    """
    from retrieval.app.duplicate_candidates import candidate_pairs
    from retrieval.app.duplicate_codes import CodeSpace, centred
    from retrieval.features.store import file_hash

    _, rows = idx.catalog.snapshot()
    rows = sorted((r for r in rows if r["status"] == "indexed"), key=lambda r: r["id"])
    by_hash: dict = {}
    for r in rows:
        by_hash.setdefault(r["hash"], []).append(r)
    reps = [v[0] for v in by_hash.values()]
    searcher = idx.searcher()
    space = CodeSpace(searcher, idx.path)
    verifier = PairVerifier(searcher, min_inliers=min_inliers)
    C = space.codes([r["id"] for r in reps], [r["hash"] for r in reps])
    mean = C[:, 0].mean(axis=0) if len(C) else None
    C = centred(C, mean)[:, 0] if len(C) else C
    out = []
    for n, path in enumerate(paths):
        path = str(path)
        entry = {"path": path, "kind": None, "matches": [], "error": None}
        out.append(entry)
        try:
            h = file_hash(path)
        except OSError as exc:
            entry["error"] = f"{path}: cannot be read ({exc.strerror or exc})"
            continue
        matches: dict = {}
        for r in by_hash.get(h, []):
            matches[r["id"]] = {"id": r["id"], "path": r["path"], "kind": "exact", "inliers": None}
        if not matches and len(C):
            try:
                f = idx.extractor(path)
            except (OSError, ValueError) as exc:
                entry["error"] = str(exc).splitlines()[0] if str(exc) else f"{path}: unreadable image"
                continue
            q = centred(space.turned_codes(f, ALL_TURNS)[None], mean)
            found = candidate_pairs(q, C, k=candidates, threshold=-1.0, exclude_self=False)
            ids = [-1] + [r["id"] for r in reps]
            cand = [(0, j + 1, sim, turn, rank) for _, j, sim, turn, rank in found]
            paths_ = [path] + [r["path"] for r in reps]
            for p in verify_candidates(verifier, cand, ids, paths_, threshold=threshold, threads=threads,
                                       features_a=[f]):
                for r in by_hash[searcher.rows.get(p.b)["hash"]] if searcher.rows.get(p.b) else []:
                    matches[r["id"]] = {"id": r["id"], "path": r["path"], "kind": p.kind, "inliers": p.inliers}
        entry["matches"] = sorted(matches.values(), key=lambda m: (KIND_ORDER[m["kind"]], -(m["inliers"] or 10**9),
                                                                   m["id"]))
        entry["kind"] = entry["matches"][0]["kind"] if entry["matches"] else None
        if progress is not None:
            progress(n + 1, len(paths))
    return out
