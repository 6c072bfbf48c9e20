"""Duplicates of an index, in three kinds that never mix (``retrieval duplicates``, ``--against``,
``retrieval query --exclude-duplicates``).

- **exact**: the same bytes (the catalog's content hash), or the same decoded pixels (a lossless re-encoding);
- **near**: the same photograph, edited: resized, re-encoded, cropped, turned by a quarter turn, lightly
  retouched. A verified pair whose inliers show one frame as a similarity of the other with the same interest
  points (:func:`retrieval.app.duplicates.same_photo.same_photograph`);
- **scene**: the same object or place photographed again: a verified pair (at least ``min_inliers`` one-to-one
  inliers) that is not the same photograph.

How (each step bounded by what it costs):

1. exact copies by content hash, from the catalog;
2. candidates by one compact global code per photo (:mod:`retrieval.app.duplicates.codes`), compared all against
   all in blocks, each photo also turned by 90 and 180 degrees: the ``candidates`` most similar photos with at
   least ``threshold`` similarity;
3. each candidate pair verified by the index's verifier (ratio test and descriptor space of its searches): first a
   cheap check on the :data:`~retrieval.app.duplicates.pair_verifier.CHEAP_FEATURES` largest features of each photo, which settles most copies and most
   other views of a scene, then the full features; a near pair of equal sizes is compared pixel by pixel (exact when equal);
4. groups: exact copies first (one group per set of equal files), near duplicates between the keepers of exact
   groups, same-scene groups between the keepers of near groups. Each group has a suggested keeper
   (:mod:`retrieval.app.photo_facts`: largest resolution, then original format, then oldest; ``keeper_rule``).
"""

from __future__ import annotations

import hashlib

import numpy as np

from retrieval.app.duplicates.groups import (
    KIND_ORDER,
    KINDS,
    Components,
    DuplicateGroup,
    DuplicatePair,
    build_groups,
)
from retrieval.app.duplicates.pair_verifier import DUPLICATE_MIN_INLIERS, PairVerifier
from retrieval.app.photo_facts import KEEPER_RULE

DEFAULT_CANDIDATES = 10
"""Most similar photos (global code) checked for each photo."""

DEFAULT_THRESHOLD = 0.6
"""Least global similarity (codes centred on the collection's mean) of a candidate pair verified with all its
features when the cheap check (the largest features) did not verify it; below it, a pair is reported only when the
cheap check verifies it (docs/results.md and docs/benchmarks.md, "Duplicates")."""

FULL_RANKS = 2
"""Of each photo's candidates, the most similar this many may be verified with all their features when the cheap
check did not verify them (and their similarity is at least the threshold): full verification costs a bounded
number of pairs per photo."""

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
    from retrieval.app.duplicates.candidates import candidate_pairs, search_cells
    from retrieval.app.duplicates.codes import CodeSpace, centred

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
    from retrieval.app.duplicates.candidates import candidate_pairs
    from retrieval.app.duplicates.codes import CodeSpace, centred
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
