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

The photos are taken in :func:`content_order` (content hash, then path), so the groups depend on the photos'
content and paths only, not on their catalog ids (a move and its undo give the same groups).

``--exclude-duplicates`` (:func:`exclude_duplicates`) makes the same checks on a few pairs of a search's hits.
"""

from __future__ import annotations

import hashlib
import os

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


def content_order(row: dict) -> tuple:
    """The order of indexed photos in a run: by content hash, then path. Every choice that depends on an order
    follows it: the photo standing for a set of equal files (the first path), which photo of a pair is verified as
    the query (the verifier's ratio test is not symmetric: the first), ties between equal similarities, the order
    pairs are checked in. So the groups are a function of the photos' content and paths, never of their catalog
    ids, which change when a file leaves the index and comes back (a move and its undo)."""
    return row["hash"], row["path"]


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
    rows = sorted((r for r in rows if r["status"] == "indexed"), key=content_order)
    by_id = {r["id"]: r for r in rows}
    by_hash: dict = {}
    for r in rows:
        by_hash.setdefault(r["hash"], []).append(r["id"])
    pairs = [DuplicatePair(ids[0], other, "exact") for ids in by_hash.values() for other in ids[1:]]
    reps = [ids[0] for ids in by_hash.values()]        # in content order (content_order)
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


EXCLUDE_CANDIDATES = 2
"""Of the hits ranked before a hit (and the query), the most similar by their codes that
:func:`exclude_duplicates` verifies it with."""


def _code_similarities(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(S, turn)`` of unit codes (n, T, D): ``S[i, j]`` the similarity of photos ``i`` and ``j``, the best over
    the turns of either (symmetric), ``turn[i, j]`` the quarter turns of ``i`` that give it."""
    A = np.einsum("itd,jd->ijt", codes, codes[:, 0])        # i turned by t against j upright
    turn = A.argmax(axis=2)
    best = A.max(axis=2)
    other = best.T > best                                   # better: j turned against i upright
    S = np.where(other, best.T, best)
    turn = np.where(other, (4 - turn.T) % 4, turn)
    return S, turn


def exclude_duplicates(idx, query, hits: list, k: int, *, candidates: int = EXCLUDE_CANDIDATES) -> tuple[list, list]:
    """``(kept, dropped)``: the first ``k`` of ``hits`` that are not exact copies or near duplicates of the query or
    of a better-ranked kept hit, ranks renumbered, and the hits dropped before the last of them. The query's own
    photo (a query by an indexed photo) is never dropped and comes first (its exact copies, which can rank with it,
    are dropped); same-scene photos are kept.

    Exact copies are decided by the catalog's content hashes. Near duplicates by the checks of
    :func:`find_duplicates` (:func:`verify_candidates`: the cheap check on the largest features, the full features
    only when it verified without settling, the pixels of a near pair), made only where a copy is likely: each hit
    against the ``candidates`` hits ranked before it (or the query) that are most similar to it by their kept codes
    (:mod:`retrieval.app.duplicates.codes`: a copy's code is nearly its original's), unless the two are already
    joined. A hit joined to the query or to a kept hit, directly or through dropped copies, is dropped. A few checks
    a query, where every hit was once checked against the query with all its features and against every kept hit.
    Nothing is written (the codes an older index did not keep are encoded, not kept).
    """
    from dataclasses import replace

    from retrieval.app.duplicates.codes import CodeSpace, centred
    from retrieval.features.store import file_hash

    q = idx.query(query)
    row = q.row
    searcher = idx.searcher()
    own = None if row is None else row["id"]
    if row is not None:
        q_hash = row["hash"]
    else:
        try:
            q_hash = file_hash(query)
        except (OSError, TypeError):
            q_hash = None
    rows = [searcher.rows.get(h.id) for h in hits]
    at = [n for n, r in enumerate(rows) if r is not None]           # the hits still indexed, in rank order
    ids, paths = [hits[n].id for n in at], [rows[n]["path"] for n in at]
    own_at = ids.index(own) if own in ids else None
    QUERY = len(ids)                # the query's position when its own photo is not among the hits
    n = len(ids)
    S, turn = np.ones((n + 1, n + 1), np.float32), np.zeros((n + 1, n + 1), np.int64)
    try:
        space = CodeSpace(searcher, idx.path)
        codes, mean = space.lookup(ids, [rows[i]["hash"] for i in at])
    except ValueError:              # no generic model, no codes: every hit seen before is verified with it
        space = None
    if space is not None and n:
        codes = centred(codes, mean)
        S[:n, :n], turn[:n, :n] = _code_similarities(codes)
        if own_at is None:          # the query's own features, turned by every quarter turn, against the hits
            qc = centred(space.turned_codes(q.all_features, ALL_TURNS)[None], mean)[0]
            A = qc @ codes[:, 0].T
            S[QUERY, :n], turn[QUERY, :n] = A.max(axis=0), A.argmax(axis=0)
    verifier = PairVerifier(searcher)

    def same_photo(a: int, b: int) -> bool:
        """Whether ``a`` (a hit's position, or ``QUERY``) and the hit at ``b`` are the same photograph (exact or
        near); a pair the cheap check does not verify is not a copy here (checking every such pair with all its
        features is what made this cost seconds)."""
        if a == QUERY:
            found = verify_candidates(verifier, [(0, 1, S[a, b], turn[a, b], FULL_RANKS)], [-1, ids[b]],
                                      [q.path, paths[b]], threshold=DEFAULT_THRESHOLD, features_a=[q.all_features])
        else:
            found = verify_candidates(verifier, [(a, b, S[a, b], turn[a, b], FULL_RANKS)], ids, paths,
                                      threshold=DEFAULT_THRESHOLD)
        return bool(found) and found[0].kind in ("exact", "near")

    joined = Components()            # positions joined as the same photograph
    first = QUERY if own_at is None else own_at
    firsts = {first}                 # the query and the kept hits
    by_hash = {} if q_hash is None else {q_hash: first}
    kept, dropped = [], []
    position = {i: m for m, i in enumerate(at)}
    order = sorted(range(len(hits)), key=lambda i: position.get(i) != own_at)      # the query's own photo first
    for i in order:
        h = hits[i]
        if len(kept) == k:
            break
        m = position.get(i)
        if m is None or m == own_at:            # a hit no longer indexed, or the query's own photo: kept
            kept.append(h)
            continue
        joined.join(by_hash.setdefault(rows[i]["hash"], m), m)
        before = [o for o in range(m) if o != own_at] + [first]         # the hits seen already, and the query
        likely = sorted(before, key=lambda o: -S[o, m])[:candidates] if space is not None else before
        for o in likely:
            if joined.find(o) != joined.find(m) and same_photo(o, m):
                joined.join(o, m)
        root = joined.find(m)
        if any(joined.find(f) == root for f in firsts):
            dropped.append(h)
        else:
            kept.append(h)
            firsts.add(m)
    return [replace(h, rank=i + 1) for i, h in enumerate(kept)], dropped


def find_against(idx, paths, *, threshold: float = DEFAULT_THRESHOLD, candidates: int = DEFAULT_CANDIDATES,
                 min_inliers: int = DUPLICATE_MIN_INLIERS, threads: int = 1, progress=None) -> list[dict]:
    """For each photo of ``paths`` (not indexed, and not added), the indexed photos it duplicates: exact copies
    (same bytes or pixels), near duplicates, same scene (module docstring; the same candidates and checks as
    :func:`find_duplicates`, the new photo's code compared with the index's kept codes).

    Returns
    -------
    list of ``{"path", "kind", "matches": [{"id", "path", "kind", "inliers"}], "error"}`` in the order of
    ``paths``: ``kind`` the tightest among the matches, None when nothing matches (``error``: one line when the file
    could not be read, else None); the matches by kind, then most inliers, then path. A photo of ``paths`` that is
    itself indexed (a folder inside the indexed one) is not its own match.
    """
    from retrieval.app.duplicates.candidates import candidate_pairs
    from retrieval.app.duplicates.codes import CodeSpace, centred
    from retrieval.features.store import file_hash

    _, rows = idx.catalog.snapshot()
    rows = sorted((r for r in rows if r["status"] == "indexed"), key=content_order)
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
        itself = {r["id"] for r in by_hash.get(h, []) if os.path.realpath(r["path"]) == os.path.realpath(path)}
        matches: dict = {}
        for r in by_hash.get(h, []):
            if r["id"] not in itself:          # an indexed photo checked against the index is not its own copy
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
                    if r["id"] not in itself:
                        matches[r["id"]] = {"id": r["id"], "path": r["path"], "kind": p.kind, "inliers": p.inliers}
        entry["matches"] = sorted(matches.values(), key=lambda m: (KIND_ORDER[m["kind"]], -(m["inliers"] or 10**9),
                                                                   m["path"]))
        entry["kind"] = entry["matches"][0]["kind"] if entry["matches"] else None
        if progress is not None:
            progress(n + 1, len(paths))
    return out
