"""Boxes ``(x1, y1, x2, y2)`` in pixels of an original image (after EXIF orientation; the centre of the top-left
pixel is ``(0, 0)``, so an image of size ``(w, h)`` spans ``[0, w - 1] x [0, h - 1]``): clipping to an image, the
projection of a query box through a verified transform into a database image, and intersection over union.

:func:`query_region` is the one place a query's box is parsed, checked, clipped to the oriented image and its
features selected. Used by spatial re-ranking (:meth:`retrieval.rerank.verifier.Verifier.rerank`), object search
(:class:`retrieval.engine.object.searcher.ObjectSearcher`) and the box-query benchmark
(:mod:`retrieval.bench.object_eval`).
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

Box = tuple[float, float, float, float]


def clip_box(box, image_size) -> Box | None:
    """``box`` clipped to the image ``image_size = (w, h)``, i.e. to ``[0, w - 1] x [0, h - 1]``.

    Returns
    -------
    tuple of 4 float, or None when nothing of the box is left (``x2 <= x1`` or ``y2 <= y1`` after clipping)
    """
    w, h = image_size
    lo = np.minimum(np.maximum(np.asarray(box[:2], dtype=np.float64), 0.0), [w - 1.0, h - 1.0])
    hi = np.minimum(np.maximum(np.asarray(box[2:4], dtype=np.float64), 0.0), [w - 1.0, h - 1.0])
    return _box_or_none(lo, hi)


def _box_or_none(lo: np.ndarray, hi: np.ndarray) -> Box | None:
    if not np.all(np.isfinite(np.concatenate([lo, hi]))) or hi[0] <= lo[0] or hi[1] <= lo[1]:
        return None
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])


def project_box(box, transform, image_size=None) -> Box | None:
    """Bounding box of the 4 corners of ``box`` mapped by ``transform``, clipped to ``image_size`` when given.

    Parameters
    ----------
    box : (x1, y1, x2, y2)
    transform : ndarray of shape (2, 3) (affine ``[M | t]``) or (3, 3) (homography)
        Maps pixels of the box's image to pixels of the target image.
    image_size : (w, h) or None
        The target image: the result is clipped to ``[0, w - 1] x [0, h - 1]`` (:func:`clip_box`).

    Returns
    -------
    tuple of 4 float, or None when the projection is degenerate: a corner mapped to infinity (homogeneous
    coordinate 0), a box of zero width or height, or, with ``image_size``, a box entirely outside the image.
    """
    T = np.asarray(transform, dtype=np.float64)
    if T.shape == (2, 3):
        T = np.vstack([T, [0.0, 0.0, 1.0]])
    if T.shape != (3, 3):
        raise ValueError(f"transform must have shape (2, 3) or (3, 3); got {T.shape}.")
    x1, y1, x2, y2 = (float(v) for v in box)
    pts = np.array([[x1, y1, 1.0], [x2, y1, 1.0], [x2, y2, 1.0], [x1, y2, 1.0]]) @ T.T
    if np.any(np.abs(pts[:, 2]) < 1e-12):
        return None
    xy = pts[:, :2] / pts[:, 2:3]
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    if image_size is not None:
        w, h = image_size
        lo = np.minimum(np.maximum(lo, 0.0), [w - 1.0, h - 1.0])
        hi = np.minimum(np.maximum(hi, 0.0), [w - 1.0, h - 1.0])
    return _box_or_none(lo, hi)


def project_corners(box, transform) -> np.ndarray | None:
    """The 4 corners of ``box`` (clockwise from the top left) mapped by ``transform`` (2, 3) or (3, 3): the query
    box's outline in a database image; None when a corner goes to infinity."""
    T = np.asarray(transform, dtype=np.float64)
    if T.shape == (2, 3):
        T = np.vstack([T, [0.0, 0.0, 1.0]])
    x1, y1, x2, y2 = (float(v) for v in box)
    pts = np.array([[x1, y1, 1.0], [x2, y1, 1.0], [x2, y2, 1.0], [x1, y2, 1.0]]) @ T.T
    if np.any(np.abs(pts[:, 2]) < 1e-12):
        return None
    xy = pts[:, :2] / pts[:, 2:3]
    return xy if np.isfinite(xy).all() else None


def box_iou(a, b) -> float:
    """Intersection over union of two boxes ``(x1, y1, x2, y2)`` (continuous coordinates; 0 when the union is
    empty)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def query_region(features, bbox):
    """The region of a query: ``(features inside bbox, box)`` for a box query, ``(features, whole image box)``
    without one (``bbox`` None).

    ``bbox``: ``"x1,y1,x2,y2"`` or 4 numbers, in pixels of the original image after EXIF orientation. A box
    reaching outside the image is clipped to it, with a warning; one entirely outside, inverted or empty, or with
    no feature inside, is a ValueError (one line).
    """
    from retrieval.features.frames import parse_box, select_in_box, subset

    w, h = features.image_size
    if bbox is None:
        return features, (0.0, 0.0, float(w - 1), float(h - 1))
    box = parse_box(bbox)
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        raise ValueError(f"box {bbox!r}: needs x2 > x1 and y2 > y1.")
    if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
        clipped = clip_box(box, (w, h))
        if clipped is None:
            raise ValueError(f"box {bbox!r} is outside the query image of size {w}x{h} (boxes are x1,y1,x2,y2 "
                             f"in pixels of the original image after EXIF rotation).")
        logger.warning("box %s reaches outside the query image of size %dx%d: clipped to %s", bbox, w, h,
                       ",".join(f"{v:g}" for v in clipped))
        box = clipped
    mask = select_in_box(features, box)
    if not mask.any():
        raise ValueError(f"no local features inside the box {bbox!r} of the query image: draw a larger box "
                         f"around a textured object.")
    return subset(features, mask), box
