"""Duplicate and same-scene photos of an index (``retrieval duplicates``, ``retrieval query --exclude-duplicates``).

Everything comes from what the index already holds:

1. **exact** copies: indexed files with the same content hash (the catalog's ``hash``);
2. candidate pairs: each distinct image queried against the index by its global code (``Index.search`` without
   re-ranking); its ``candidates`` nearest images (with ``similarity >= threshold`` when a threshold is given)
   are candidates;
3. every candidate pair is checked by the index's one verifier (:class:`retrieval.rerank.verifier.Verifier`: the
   ratio test and descriptor space of its searches, stored features): a pair is reported only when the
   verification vouches for it. A verified pair is a **near** duplicate when its transform maps the frame of one
   photo onto the frame of the other (a resized, re-encoded or lightly edited copy: :func:`maps_frame_onto_frame`;
   ``DEFAULT_MIN_INLIERS`` inliers), else the **scene**
   kind (the same scene or object, photographed again, cropped or rotated; ``DUPLICATE_MIN_INLIERS`` inliers);
4. pairs are joined into groups (connected components); a group's kind is its loosest pair's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from retrieval.rerank.verifier import Described, Outcome

NEAR_CENTRE_TOLERANCE = 0.05
"""A verified pair is a near duplicate when the centre of one photo maps within this fraction of the other
photo's diagonal from its centre (and the local map is a plain resize: :data:`NEAR_LINEAR_TOLERANCE`)."""

NEAR_LINEAR_TOLERANCE = 0.2
"""Relative difference allowed between the transform's local linear map at the centre and the plain resize
(a crop changes the scale by its margins, a rotation adds off-diagonal terms: both are beyond it from about 20 %
of the size or 12 degrees)."""

DUPLICATE_MIN_INLIERS = 12
"""One-to-one inliers a same-scene pair needs: stricter than the query re-ranking's ``DEFAULT_MIN_INLIERS`` (9),
since one false pair joins two groups. 12 is the smallest threshold with at most 1 false verification in 20,000
unrelated real pairs (0.005 %, docs/results.md, "Geometric verification"). A near-duplicate pair (the transform
maps frame onto frame, a much stronger constraint than a few consistent matches) needs ``DEFAULT_MIN_INLIERS``."""

DEFAULT_CANDIDATES = 10
"""Nearest images (global code) checked by verification for each photo."""

KIND_ORDER = {"exact": 0, "near": 1, "scene": 2}


@dataclass
class DuplicatePair:
    """Two indexed images (ids ``a < b``) and why they are reported."""

    a: int
    b: int
    kind: str                       # exact, near or scene
    similarity: float | None = None  # global similarity of the candidate (None for exact copies)
    inliers: int | None = None       # one-to-one verified inliers (None for exact copies)

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "kind": self.kind,
                "similarity": None if self.similarity is None else round(float(self.similarity), 6),
                "inliers": self.inliers}


@dataclass
class DuplicateGroup:
    """Images joined by reported pairs; ``kind`` is the loosest kind among its pairs."""

    group: int
    kind: str
    images: list[dict]
    pairs: list[DuplicatePair] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"group": self.group, "kind": self.kind, "images": self.images,
                "pairs": [p.to_json() for p in self.pairs]}


class PairVerifier:
    """Geometric verification of indexed images by the index's one verifier (:attr:`Searcher.verifier
    <retrieval.app.searcher.Searcher.verifier>`: its ratio test, its descriptor space, the stored features and the
    searcher's cache of described images); the decision threshold is ``min(min_inliers, the index's)`` for a near
    duplicate, ``min_inliers`` for a same-scene pair (:func:`classify`)."""

    def __init__(self, searcher, *, min_inliers: int = DUPLICATE_MIN_INLIERS):
        self.searcher = searcher
        base = searcher.verifier
        self.verifier = replace(base, min_inliers=min(min_inliers, base.min_inliers))
        self.min_inliers = min_inliers

    def described(self, image_id: int) -> Described:
        """The described features of an indexed image (the searcher's cache)."""
        return self.verifier.database(image_id, self.searcher.features_of, self.searcher.cache)

    def check(self, a, b: int, described_a: Described | None = None):
        """``(kind or None, inliers)`` of indexed image ``a`` (or its ``described_a``, e.g. a query file's) against
        indexed image ``b``: ``near`` / ``scene`` when the pair verifies, None otherwise."""
        da = described_a if described_a is not None else self.described(a)
        db = self.described(b)
        w, h = da.image_size
        return classify(self.verifier.check(da, db, (0.0, 0.0, float(w - 1), float(h - 1))), da.image_size,
                        db.image_size, self.min_inliers)


def classify(outcome: Outcome, size_a, size_b, min_inliers: int = DUPLICATE_MIN_INLIERS):
    """``(kind or None, inliers)`` of a verified pair: ``near`` when the verifier vouches and the transform maps frame
    onto frame, ``scene`` when it vouches with at least ``min_inliers`` inliers, else None."""
    if not outcome.verified:
        return None, int(outcome.inliers)
    if maps_frame_onto_frame(outcome.verification.transform, size_a, size_b):
        return "near", int(outcome.inliers)
    return ("scene" if outcome.inliers >= min_inliers else None), int(outcome.inliers)


def maps_frame_onto_frame(T, size_a, size_b, tolerance: float = NEAR_CENTRE_TOLERANCE,
                          linear_tolerance: float = NEAR_LINEAR_TOLERANCE) -> bool:
    """Whether ``T`` (A pixels -> B pixels) maps A's frame onto B's: A's centre lands within ``tolerance`` of B's
    diagonal from B's centre, and the local linear map there (the Jacobian of ``T``) is the plain resize
    ``diag(wb / wa, hb / ha)`` within ``linear_tolerance`` (relative Frobenius norm). Read at the centre, where the
    inliers constrain the model best, rather than at the corners, where a homography fitted on a dozen matches
    extrapolates."""
    (wa, ha), (wb, hb) = size_a, size_b
    T = np.asarray(T, np.float64)

    def at(x, y):
        p = T @ np.array([x, y, 1.0])
        return None if abs(p[2]) < 1e-12 else p[:2] / p[2]

    ca, cb = np.array([(wa - 1) / 2, (ha - 1) / 2]), np.array([(wb - 1) / 2, (hb - 1) / 2])
    p, px, py = at(*ca), at(ca[0] + 1, ca[1]), at(ca[0], ca[1] + 1)
    if p is None or px is None or py is None:
        return False
    J = np.c_[px - p, py - p]
    S = np.diag([wb / wa, hb / ha])
    return bool(np.linalg.norm(p - cb) <= tolerance * np.hypot(wb, hb)
                and np.linalg.norm(J - S) <= linear_tolerance * np.linalg.norm(S))


def find_duplicates(idx, *, threshold: float | None = None, candidates: int = DEFAULT_CANDIDATES,
                    min_inliers: int = DUPLICATE_MIN_INLIERS, progress=None) -> list[DuplicateGroup]:
    """Groups of exact copies, near duplicates and same-scene photos of an index (module doc).

    Parameters
    ----------
    idx : :class:`retrieval.app.index.Index`
    threshold : float or None
        Candidates need at least this global similarity (None: the ``candidates`` nearest, whatever their
        similarity). Exact copies are reported whatever it is.
    candidates : int
        Nearest images checked for each photo.
    min_inliers : int
        One-to-one inliers a same-scene pair needs (near duplicates: ``min(min_inliers, DEFAULT_MIN_INLIERS)``).
    progress : callable(done, total) or None

    Returns
    -------
    list of :class:`DuplicateGroup`, largest first (then by smallest id); ``images`` of each group ordered by
    id, each ``{id, path, size, kind}`` (``kind``: the tightest kind among the image's pairs).
    """
    _, rows = idx.catalog.snapshot()
    rows = [r for r in rows if r["status"] == "indexed"]
    by_id = {r["id"]: r for r in rows}
    by_hash: dict = {}
    for r in rows:
        by_hash.setdefault(r["hash"], []).append(r["id"])
    pairs: dict = {}
    for ids in by_hash.values():
        for other in ids[1:]:
            pairs[(ids[0], other)] = DuplicatePair(ids[0], other, "exact")
    reps = sorted(ids[0] for ids in by_hash.values())
    rep_of = {i: ids[0] for ids in by_hash.values() for i in ids}
    verifier = PairVerifier(idx.searcher(), min_inliers=min_inliers)
    checked = set()
    for n, rep in enumerate(reps):
        hits = idx.search(rep, k=min(len(rows), candidates + len(by_hash[by_id[rep]["hash"]])), rerank="none",
                          query_expansion=0)
        own = None
        for h in hits:
            other = rep_of.get(h.id)
            if other is None or other == rep:
                continue
            key = (min(rep, other), max(rep, other))
            if key in checked:
                continue
            if threshold is not None and h.similarity is not None and h.similarity < threshold:
                continue
            checked.add(key)
            own = own or verifier.described(rep)
            kind, inliers = verifier.check(rep, other, own)
            if kind is not None:
                pairs[key] = DuplicatePair(key[0], key[1], kind, h.similarity, inliers)
        if progress is not None:
            progress(n + 1, len(reps))
    return _groups(pairs, by_id, by_hash)


def _groups(pairs: dict, by_id: dict, by_hash: dict) -> list[DuplicateGroup]:
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict = {}
    for x in list(parent):
        members.setdefault(find(x), set()).add(x)
    out = []
    for root, ids in members.items():
        ps = sorted((p for k, p in pairs.items() if find(k[0]) == root), key=lambda p: (p.a, p.b))
        kind = max((p.kind for p in ps), key=KIND_ORDER.__getitem__)
        tightest = {}
        for p in ps:
            for i in (p.a, p.b):
                if i not in tightest or KIND_ORDER[p.kind] < KIND_ORDER[tightest[i]]:
                    tightest[i] = p.kind
        images = [{"id": i, "path": by_id[i]["path"], "size": by_id[i]["size"], "kind": tightest[i]}
                  for i in sorted(ids)]
        out.append(DuplicateGroup(0, kind, images, ps))
    out.sort(key=lambda g: (-len(g.images), g.images[0]["id"]))
    for n, g in enumerate(out, 1):
        g.group = n
    return out


def exclude_duplicates(idx, query, hits: list, k: int) -> tuple[list, list]:
    """``(kept, dropped)``: ``hits`` without those that are exact copies or near duplicates (module doc) of the
    query or of a better-ranked kept hit; at most ``k`` kept, ranks renumbered. Same-scene photos are kept."""
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
    described_q = verifier.verifier.described(feats)
    kept, dropped = [], []
    for h in hits:
        r = by_id.get(h.id)
        dup = r is not None and r["hash"] == q_hash
        if not dup and r is not None:
            dup = verifier.check(None, h.id, described_q)[0] == "near"
            for better in kept:
                if dup:
                    break
                rb = by_id.get(better.id)
                dup = rb is not None and (rb["hash"] == r["hash"] or verifier.check(better.id, h.id)[0] == "near")
        (dropped if dup else kept).append(h)
    kept = [replace(h, rank=i + 1) for i, h in enumerate(kept[:k])]
    return kept, dropped


def render_duplicates_html(groups: list[DuplicateGroup], *, title: str = "duplicates", thumb_side: int = 240) -> str:
    """A self-contained HTML page: one row per group, its photos side by side (thumbnails of
    :func:`retrieval.app.gallery.thumbnail_data_uri`), each with its id, size and path."""
    import html

    from retrieval.app.gallery import _CSS, thumbnail_data_uri

    labels = {"exact": "exact copies", "near": "near duplicates (resized, re-encoded)",
              "scene": "same scene or object"}
    parts = []
    for g in groups:
        figs = []
        for im in g.images:
            try:
                uri, _ = thumbnail_data_uri(im["path"], thumb_side)
            except OSError:
                uri = "data:image/gif;base64,R0lGODlhAQABAAAAACw="
            figs.append(f'<figure class="result"><div class="frame"><img class="thumb" src="{uri}" '
                        f'alt="{html.escape(im["path"].rsplit("/", 1)[-1])}"></div><figcaption>'
                        f'<span class="rank">id {im["id"]}</span> &middot; {im["size"]} bytes<br>'
                        f'{html.escape(im["path"])}</figcaption></figure>')
        inl = [p.inliers for p in g.pairs if p.inliers is not None]
        extra = f" &middot; {min(inl)}-{max(inl)} verified inliers" if inl else ""
        parts.append(f'<section class="group" data-kind="{g.kind}"><h2>group {g.group}: {len(g.images)} photos, '
                     f'{labels[g.kind]}{extra}</h2><div class="grid">{"".join(figs)}</div></section>')
    n_photos = sum(len(g.images) for g in groups)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS} h2{{font-size:1em;margin:1.2em 0 .4em}}</style>"
            f"</head>\n<body data-groups=\"{len(groups)}\"><h1>{html.escape(title)}</h1>"
            f"<p class=\"meta\">{len(groups)} groups, {n_photos} photos</p>{''.join(parts)}</body></html>\n")
