"""The JSON record of one verified pair (:meth:`retrieval.app.index.Index.match`): what ``POST /api/match``, the web
page's match view and ``retrieval match --index`` show. Its ``verified``, ``inliers`` and ``box`` are those the
pair gets in a ranked list, since both come from the index's one verifier."""

from __future__ import annotations

import numpy as np

from retrieval.app.searcher import Match
from retrieval.rerank.boxes import project_corners

__all__ = ["match_record"]


def _rounded(corners):
    return None if corners is None else np.round(corners, 1).tolist()


def match_record(m: Match, *, a_id=None, b_id: int, b_path: str, box_given: bool, max_points: int = 300) -> dict:
    """``{verified, reason, n_features, tentative, inliers, box, homography (query -> result), a: {id, size, box},
    b: {id, path, size}, points_a, points_b (inliers, at most ``max_points``), box_in_b (the query box's corners in
    b)}``. ``box`` is the query region's bounding box in b, as a hit's ``box`` (only when verified)."""
    o, q, fb = m.outcome, m.query, m.features_b
    v = o.verification
    pairs = o.inlier_pairs if o.verified else np.zeros((0, 2), np.int64)
    sel = np.arange(len(pairs))
    if len(sel) > max_points:
        sel = np.linspace(0, len(sel) - 1, max_points).astype(int)
    ia, ib = pairs[sel, 0], pairs[sel, 1]
    transform = v.transform if o.verified else None
    if transform is not None and np.asarray(transform).shape == (2, 3):
        transform = np.vstack([transform, [0.0, 0.0, 1.0]])
    return {
        "verified": bool(o.verified),
        "reason": None if o.verified else (v.reason or "the query box falls outside the image"),
        "n_features": [int(len(q.features)), int(len(fb))],
        "tentative": int(len(o.matches)),
        "inliers": int(o.inliers),
        "box": None if o.box is None else [round(float(x), 1) for x in o.box],
        "homography": None if transform is None else [[float(x) for x in r] for r in transform],
        "a": {"id": a_id, "size": [int(s) for s in q.all_features.image_size],
              "box": [float(x) for x in q.box] if box_given else None},
        "b": {"id": int(b_id), "path": b_path, "size": [int(s) for s in fb.image_size]},
        "points_a": np.round(np.asarray(q.features.xy)[ia], 1).tolist(),
        "points_b": np.round(np.asarray(fb.xy)[ib], 1).tolist(),
        "box_in_b": None if transform is None else _rounded(project_corners(q.box, transform)),
    }
