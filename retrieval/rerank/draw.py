"""Pictures of matches: the two images side by side, inlier lines, and the outline of A projected into B."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write
from retrieval.features.image import load_image
from retrieval.rerank.matching import apply_homography


def draw_matches(path_a, path_b, xy_a, xy_b, *, homography=None, out=None, max_side: int = 1024,
                 max_lines: int = 500) -> np.ndarray:
    """Side-by-side picture (gray images, EXIF applied) with lines between matched points.

    Parameters
    ----------
    path_a, path_b : image files
    xy_a, xy_b : ndarray of shape (k, 2)
        Matched points in original pixels of A and B (usually the inliers).
    homography : ndarray of shape (3, 3) or None
        A -> B; when given, A's border is projected into B and drawn.
    out : path or None
        Written atomically (format from the suffix, PNG or JPEG) when given.
    max_side : int
        Each image is shown with its larger side at most this.
    max_lines : int
        At most this many lines (evenly chosen) are drawn.

    Returns
    -------
    ndarray of shape (h, w, 3), dtype uint8 (BGR)
    """
    import cv2

    ia, ib = load_image(path_a, max_side=max_side), load_image(path_b, max_side=max_side)
    ha, wa = ia.pixels.shape
    hb, wb = ib.pixels.shape
    canvas = np.full((max(ha, hb), wa + wb, 3), 255, np.uint8)
    canvas[:ha, :wa] = ia.pixels[:, :, None]
    canvas[:hb, wa:] = ib.pixels[:, :, None]

    def to_a(p):
        return (np.asarray(p, np.float64) + 0.5) / np.asarray(ia.scale_xy) - 0.5

    def to_b(p):
        return (np.asarray(p, np.float64) + 0.5) / np.asarray(ib.scale_xy) - 0.5 + [wa, 0]

    xy_a = np.asarray(xy_a, np.float64).reshape(-1, 2)
    xy_b = np.asarray(xy_b, np.float64).reshape(-1, 2)
    sel = np.arange(len(xy_a))
    if len(sel) > max_lines:
        sel = np.linspace(0, len(sel) - 1, max_lines).astype(int)
    pa, pb = to_a(xy_a[sel]), to_b(xy_b[sel])
    for (x1, y1), (x2, y2) in zip(pa, pb, strict=True):
        cv2.line(canvas, (round(x1), round(y1)), (round(x2), round(y2)), (0, 200, 0), 1, cv2.LINE_AA)
        cv2.circle(canvas, (round(x1), round(y1)), 2, (0, 0, 255), -1, cv2.LINE_AA)
        cv2.circle(canvas, (round(x2), round(y2)), 2, (0, 0, 255), -1, cv2.LINE_AA)
    if homography is not None:
        W, H = ia.original_size
        corners = np.array([[-0.5, -0.5], [W - 0.5, -0.5], [W - 0.5, H - 0.5], [-0.5, H - 0.5]])
        proj = apply_homography(homography, corners)
        if np.isfinite(proj).all():
            poly = np.rint(to_b(proj)).astype(np.int32).reshape(-1, 1, 2)
            cv2.polylines(canvas, [poly], True, (255, 0, 0), 2, cv2.LINE_AA)
    if out is not None:
        out = Path(out)
        ext = out.suffix.lower() if out.suffix.lower() in (".png", ".jpg", ".jpeg") else ".png"
        ok, buf = cv2.imencode(ext, canvas)
        if not ok:
            raise OSError(f"could not encode the picture for {out}")
        with atomic_write(out) as fh:
            fh.write(buf.tobytes())
    return canvas
