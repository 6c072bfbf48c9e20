"""Spatial verification shared by the application's backends (Philbin et al. 2007): ratio-test tentative matches,
fast affine verification through :func:`retrieval.rerank.verification.verify_affine`, inliers counted one-to-one,
the query box projected into verified images, and the re-ranking of a shortlist by inliers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from retrieval.engine.pipeline import Hit


def tentative_matches(desc_q: np.ndarray, desc_db: np.ndarray, ratio: float = 0.85) -> np.ndarray:
    """Nearest-neighbour matches passing Lowe's ratio test ``d1 < ratio * d2`` (exact, Euclidean).

    One matrix product gives every squared distance ``|q|^2 + |b|^2 - 2 q.b``; the two smallest per query row
    are found with two passes.

    Parameters
    ----------
    desc_q : ndarray of shape (nq, d), float32
    desc_db : ndarray of shape (ndb, d), float32

    Returns
    -------
    ndarray of shape (m, 2), dtype int64 — pairs (query index, database index).
    """
    nq, ndb = len(desc_q), len(desc_db)
    if nq == 0 or ndb < 2:
        return np.empty((0, 2), np.int64)
    q = np.ascontiguousarray(desc_q, dtype=np.float32)
    b = np.ascontiguousarray(desc_db, dtype=np.float32)
    D = q @ b.T
    D *= -2.0
    D += np.einsum("ij,ij->i", b, b)[None, :]  # |q|^2 is constant per row: added after the arg-min
    rows = np.arange(nq)
    j1 = np.argmin(D, axis=1)
    d1 = D[rows, j1].copy()
    D[rows, j1] = np.inf
    d2 = D.min(axis=1)
    qq = np.einsum("ij,ij->i", q, q)
    d1 = np.maximum(d1 + qq, 0.0)
    d2 = np.maximum(d2 + qq, 0.0)
    keep = d1 < (ratio * ratio) * d2
    return np.stack([rows[keep], j1[keep]], axis=1).astype(np.int64)


def project_box(box, transform, size) -> tuple[float, float, float, float] | None:
    """Bounding box of the 4 corners of ``box`` mapped by ``transform`` (2x3 affine or 3x3 homography),
    clipped to the image ``size = (w, h)``; None when it falls outside."""
    T = np.asarray(transform, dtype=np.float64)
    if T.shape == (2, 3):
        T = np.vstack([T, [0.0, 0.0, 1.0]])
    x1, y1, x2, y2 = box
    pts = np.array([[x1, y1, 1], [x2, y1, 1], [x2, y2, 1], [x1, y2, 1]], dtype=np.float64)
    q = pts @ T.T
    if np.any(np.abs(q[:, 2]) < 1e-12):
        return None
    q = q[:, :2] / q[:, 2:3]
    w, h = size
    bx1, by1 = np.clip(q.min(axis=0), 0, [w - 1, h - 1])
    bx2, by2 = np.clip(q.max(axis=0), 0, [w - 1, h - 1])
    if bx2 <= bx1 or by2 <= by1:
        return None
    return float(bx1), float(by1), float(bx2), float(by2)


def distinct_inliers(matches: np.ndarray, mask: np.ndarray) -> int:
    """Inliers counted once per query feature and once per database feature: ``min`` of the numbers of distinct
    query and database indices among the inlier matches (many-to-one matches on repeated texture count once)."""
    inl = np.asarray(matches)[np.asarray(mask, bool)]
    if len(inl) == 0:
        return 0
    return int(min(len(np.unique(inl[:, 0])), len(np.unique(inl[:, 1]))))


def plausible_transform(transform, max_scale_change: float = 10.0) -> bool:
    """False for a degenerate query -> database transform: its linear part changes areas by more than
    ``max_scale_change**2`` or less than its inverse (e.g. everything collapsed onto one spot)."""
    T = np.asarray(transform, dtype=np.float64)
    det = abs(float(np.linalg.det(T[:2, :2])))
    return bool(np.isfinite(det) and max_scale_change ** -2 <= det <= max_scale_change ** 2)


def spatial_rerank(hits: list[Hit], query, query_box, get_features: Callable, *, shortlist: int,
                   min_inliers: int, ratio: float, describe: Callable | None = None) -> list[Hit]:
    """Re-rank the first ``shortlist`` hits by the number of spatially verified inliers.

    Tentative matches by a ratio test on RootSIFT, then :func:`retrieval.rerank.verify_affine` (fast affine
    hypotheses from single frame correspondences, Philbin et al. 2007). Hits with at least ``min_inliers``
    come first, by decreasing inliers (ties by first-stage score), then the rest in their first-stage order.

    Parameters
    ----------
    hits : list of Hit, best first
    query : LocalFeatures — the query's features (already restricted to the box)
    query_box : (x1, y1, x2, y2) — the query region, projected into each verified image to give its box
    get_features : callable(id) -> LocalFeatures — the stored features of a database image
    describe : callable(uint8 SIFT (n, 128)) -> float32 (n, d) or None — descriptors compared by the ratio test
        (default RootSIFT; the global backends pass RootSIFT reduced by their local PCA to 64-d, twice as fast)
    """
    try:
        from retrieval.features import root_sift
        from retrieval.rerank.verification import verify_affine
    except ImportError as exc:
        raise ValueError(f"spatial re-ranking needs retrieval.rerank.verify_affine, which is not "
                         f"available: {exc}. Use --rerank none.") from None
    if len(query) == 0 or not hits:
        return hits
    describe = describe or root_sift
    dq = describe(query.descriptors)
    head, tail = hits[:shortlist], hits[shortlist:]
    verified, unverified = [], []
    for hit in head:
        db = get_features(hit.id)
        matches = tentative_matches(dq, describe(db.descriptors), ratio) if len(db) else np.empty((0, 2), int)
        n_in, transform = 0, None
        if len(matches) >= 3:
            mask, transform = verify_affine(query.frames, db.frames, matches)
            n_in = distinct_inliers(matches, mask)
            if transform is not None and not plausible_transform(transform):
                n_in, transform = 0, None
        hit.inliers = n_in
        if n_in >= min_inliers and transform is not None:
            hit.box = project_box(query_box, transform, db.image_size)
            verified.append(hit)
        else:
            unverified.append(hit)
    verified.sort(key=lambda h: (-h.inliers, -h.score))
    return verified + unverified + tail


def spatial_available() -> bool:
    """True when :func:`retrieval.rerank.verify_affine` is installed."""
    try:
        from retrieval.rerank.verification import verify_affine  # noqa: F401
    except ImportError:
        return False
    return True
