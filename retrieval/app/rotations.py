"""Rotated whole-image queries (the preset key ``search.rotation_fallback``).

The Hessian-affine features of the presets are upright (the gravity assumption of Philbin et al. 2007): they do
not match a photo turned by 90 degrees, the common case of a camera or phone held sideways whose file carries no
EXIF orientation. Holidays has many such pairs, and a query rotated against its matches finds nothing.

The fallback: when a whole-image query verifies nothing but copies of itself, the query image is rotated by 90 and
by 270 degrees, its features are extracted again and searched with the same settings but no query expansion; the
hits those searches verify (other than copies of the query) come first, by inliers, then the upright query's
ranking. Only queries that verify nothing pay for it (two extractions, run side by side, and two searches); a query that verified a
match is answered as before. This goes beyond the papers, which assume upright images (docs/differences.md).
"""

from __future__ import annotations

import os

import numpy as np

from retrieval.engine.hits import Hit, finish_ranking
from retrieval.features.image import LoadedImage
from retrieval.features.types import LocalFeatures

QUARTER_TURNS = (1, 3)
"""The rotations tried, in quarter turns counter-clockwise (90 and 270 degrees)."""

def rotated_features(extractor, image, quarter_turns: int) -> LocalFeatures:
    """The features of ``image`` (a file, or a :class:`LoadedImage` from ``extractor.load``) turned by
    ``quarter_turns`` x 90 degrees counter-clockwise (after EXIF orientation), in the pixels of the turned image."""
    img = image if isinstance(image, LoadedImage) else extractor.load(image)
    pixels = np.ascontiguousarray(np.rot90(img.pixels, k=quarter_turns))
    (w, h), (sx, sy) = img.original_size, img.scale_xy
    if quarter_turns % 2:
        w, h, sx, sy = h, w, sy, sx
    turned = LoadedImage(pixels=pixels, scale=img.scale, original_size=(int(w), int(h)),
                         orientation=img.orientation, path=img.path, scale_xy=(sx, sy))
    return extractor(turned)


def merge_rotated(upright: list[Hit], rotated: list[list[Hit]], is_copy, k: int) -> list[Hit]:
    """The upright ranking with the hits that a rotated search verified (copies of the query left out) put first
    by inliers (one per image: the rotation with most inliers); ``upright`` unchanged when there are none."""
    best: dict[int, Hit] = {}
    for hits in rotated:
        for h in hits:
            if h.verified and not is_copy(h.id) and (h.id not in best or h.inliers > best[h.id].inliers):
                best[h.id] = h
    if not best:
        return upright
    merged = list(best.values()) + [h for h in upright if h.id not in best]
    return finish_ranking(merged, reranked=True)[:k]


def needs_rotation(hits: list[Hit], is_copy) -> bool:
    """True when no hit is verified but copies of the query."""
    return not any(h.verified and not is_copy(h.id) for h in hits)


def with_rotations(hits: list[Hit], query, rows, k: int, extractor, search) -> list[Hit]:
    """``hits`` of a whole-image :class:`retrieval.app.query.Query`, completed by the rotated searches when they
    verify nothing but copies of the query (module docstring). ``rows``: id -> catalog row of the searched
    generation; ``search(features) -> hits`` runs the query's search on other features, verifying the first
    ``search.rotation_verify_top`` results of its first stage (only verified hits are used)."""
    from retrieval.features.store import file_hash

    row = query.row
    if row is None and query.image_id is not None:
        row = rows.get(int(query.image_id))
    path = row["path"] if row is not None else query.path
    if path is None or not os.path.isfile(path):
        return hits
    query_hash = [row["hash"]] if row is not None else []   # a file that is not indexed: hashed when needed

    def is_copy(image_id) -> bool:
        r = rows.get(int(image_id))
        if r is None:
            return False
        if not query_hash:
            query_hash.append(file_hash(path))
        return r["hash"] == query_hash[0]

    if not needs_rotation(hits, is_copy):
        return hits
    loaded = getattr(query, "loaded", None)   # an upload's working image, decoded once
    turned = turned_features(extractor, loaded if loaded is not None else extractor.load(path))
    return merge_rotated(hits, [search(f) for f in turned], is_copy, k)


def turned_features(extractor, loaded: LoadedImage) -> list[LocalFeatures]:
    """The features of ``loaded`` turned by each of :data:`QUARTER_TURNS`, extracted side by side on one thread
    per turn (the detector runs in native code without the GIL, so the two extractions take the time of one on 2
    cores). Own threads, not :func:`retrieval.core.threads.shared_pool`: the searches that follow use that pool."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(QUARTER_TURNS), thread_name_prefix="retrieval-turn") as pool:
        return list(pool.map(lambda t: rotated_features(extractor, loaded, t), QUARTER_TURNS))
