"""Dense SIFT on a regular grid (VLFeat ``vl_dsift`` through cyvlfeat), as in ``vl_phow``.

The image is smoothed by a Gaussian of standard deviation ``sqrt((size / magnif)^2 - 0.25)`` (the SIFT scale of a
bin of ``size`` pixels, ``magnif = 3``, as ``vl_phow`` does), then described every ``step`` pixels. Frames are
upright circles of radius ``2 * size`` (half-width of the 4x4-bin support). cyvlfeat returns ``(y, x)`` 0-based
centres, swapped here to ``(x, y)``.
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.detectors import check_params

DEFAULTS = {"step": 8, "size": 8, "magnif": 3.0, "fast": True}


class DenseSift:
    """Dense SIFT.

    Parameters
    ----------
    step : int, default 8
        Grid spacing in working pixels.
    size : int, default 8
        Width of a spatial bin in pixels (the descriptor covers 4 x size).
    magnif : float, default 3
        Bin size / keypoint scale, for the pre-smoothing.
    fast : bool, default True
        VLFeat's flat-window approximation (much faster).
    """

    name = "dense"

    def __init__(self, **params):
        p = check_params(self.name, params, DEFAULTS)
        owner = "DenseSift"
        check_scalar(p["step"], "step", owner, low=1)
        check_scalar(p["size"], "size", owner, low=1)
        check_scalar(p["magnif"], "magnif", owner, kind=numbers.Real, low=0.0, closed="neither")
        p["magnif"] = float(p["magnif"])
        p["fast"] = bool(p["fast"])
        self.params = p

    def detect(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Describe on the grid; see :mod:`retrieval.features.detectors` for shapes (working pixels)."""
        import cv2
        from cyvlfeat.sift import dsift

        p = self.params
        img = pixels.astype(np.float32)
        sigma = np.sqrt(max((p["size"] / p["magnif"]) ** 2 - 0.25, 0.0))
        if sigma > 0:
            img = cv2.GaussianBlur(img, (0, 0), sigmaX=sigma, sigmaY=sigma)
        h, w = img.shape
        if min(h, w) < 4 * p["size"] + 1:
            return np.zeros((0, 6), np.float32), np.zeros((0, 128), np.uint8)
        fr, desc = dsift(np.ascontiguousarray(img), step=p["step"], size=p["size"], fast=p["fast"])
        fr = np.asarray(fr, dtype=np.float64).reshape(-1, 2)
        n = len(fr)
        r = 2.0 * p["size"]
        frames = np.zeros((n, 6), np.float32)
        frames[:, 0], frames[:, 1] = fr[:, 1], fr[:, 0]
        frames[:, 2], frames[:, 5] = r, r
        return frames, np.asarray(desc, dtype=np.uint8).reshape(n, 128)
