"""Operations on affine frames ``(x, y, a11, a12, a21, a22)`` (see :class:`LocalFeatures`)."""

from __future__ import annotations

import re

import numpy as np

from retrieval.features.types import LocalFeatures

BOX_EXPECTED = ("box must be 4 finite numbers x1,y1,x2,y2 (left, top, right, bottom, in pixels) separated by "
                "commas or spaces, e.g. '90,160,285,300' or '90 160 285 300'")
"""What :func:`parse_box` expects, as its errors say it."""


def parse_box(box) -> tuple[float, float, float, float]:
    """Parse ``x1,y1,x2,y2`` (a string of 4 numbers separated by commas and/or spaces -- ``"90,160,285,300"``,
    ``"90 160 285 300"``, ``"90, 160, 285, 300"`` -- or 4 numbers; original pixels) into floats with x1 <= x2,
    y1 <= y2."""
    if isinstance(box, str):
        parts = re.split(r"\s*,\s*|\s+", box.strip())
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"{BOX_EXPECTED}; got {box!r}.") from None
    else:
        vals = [float(v) for v in np.asarray(box, dtype=np.float64).ravel()]
    if len(vals) != 4 or not np.all(np.isfinite(vals)):
        raise ValueError(f"{BOX_EXPECTED}; got {box!r}.")
    x1, y1, x2, y2 = vals
    if x2 < x1 or y2 < y1:
        raise ValueError(f"box must satisfy x1 <= x2 and y1 <= y2 (left, top, right, bottom); got {box!r}.")
    return x1, y1, x2, y2


def select_in_box(features, box) -> np.ndarray:
    """Mask of the features whose centre lies in the box (bounds included), for object queries.

    Parameters
    ----------
    features : LocalFeatures or ndarray of shape (n, 6) or (n, 2)
    box : ``x1,y1,x2,y2`` string or sequence, original pixels after EXIF orientation

    Returns
    -------
    ndarray of shape (n,), dtype bool
    """
    x1, y1, x2, y2 = parse_box(box)
    xy = features.xy if isinstance(features, LocalFeatures) else np.asarray(features)[:, :2]
    x, y = xy[:, 0], xy[:, 1]
    return (x >= x1) & (x <= x2) & (y >= y1) & (y <= y2)


def subset(features: LocalFeatures, mask) -> LocalFeatures:
    """The features selected by a bool mask or an index array (a new record)."""
    return LocalFeatures(frames=features.frames[mask], descriptors=features.descriptors[mask],
                         image_size=features.image_size, config=features.config)


def frame_matrices(frames) -> np.ndarray:
    """The 3x3 affine matrices ``[[A, t], [0, 0, 1]]`` mapping the unit-circle frame to the image.

    Parameters
    ----------
    frames : ndarray of shape (n, 6)

    Returns
    -------
    ndarray of shape (n, 3, 3), dtype float64
    """
    f = np.asarray(frames, dtype=np.float64).reshape(-1, 6)
    M = np.zeros((len(f), 3, 3))
    M[:, 0, 0], M[:, 0, 1], M[:, 1, 0], M[:, 1, 1] = f[:, 2], f[:, 3], f[:, 4], f[:, 5]
    M[:, 0, 2], M[:, 1, 2] = f[:, 0], f[:, 1]
    M[:, 2, 2] = 1.0
    return M


def frame_scales(frames) -> np.ndarray:
    """Geometric-mean radius ``sqrt(|det A|)`` of each frame, ndarray of shape (n,), float64."""
    f = np.asarray(frames, dtype=np.float64).reshape(-1, 6)
    return np.sqrt(np.abs(f[:, 2] * f[:, 5] - f[:, 3] * f[:, 4]))


def largest(features: LocalFeatures, n: int) -> LocalFeatures:
    """The ``n`` features of largest scale (``|det A|``), in their order; all of them when there are at most ``n``
    (or ``n`` is 0)."""
    if n <= 0 or len(features) <= n:
        return features
    f = np.asarray(features.frames, np.float64)
    scale = np.abs(f[:, 2] * f[:, 5] - f[:, 3] * f[:, 4])
    keep = np.sort(np.argsort(-scale, kind="stable")[:n])
    return subset(features, keep)
