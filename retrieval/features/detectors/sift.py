"""DoG-SIFT (Lowe 2004) through OpenCV's ``cv2.SIFT``.

Frames: ``A = r R(angle)`` with ``r = 6 sigma`` the half-width of the descriptor support (4 bins of 3 sigma),
``sigma = KeyPoint.size / 2``, and ``angle = KeyPoint.angle`` in degrees (the convention was verified on a
90-degree rotated image: rotating the image by +90 degrees adds +90 to the angle in image axes x right, y down).
OpenCV's pixel-centre convention (centre of the top-left pixel = (0, 0)) is the library's.
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.detectors import check_params

DEFAULTS = {
    "n_features": 0,  # 0 = all
    "n_octave_layers": 3,
    "contrast_threshold": 0.04,
    "edge_threshold": 10.0,
    "sigma": 1.6,
    "rotation_invariance": True,  # OpenCV/Lowe practice; False = upright descriptors (angle 0)
}


class DoGSift:
    """OpenCV DoG-SIFT detector and descriptor.

    Parameters
    ----------
    n_features : int, default 0 (all)
    n_octave_layers : int, default 3
    contrast_threshold : float, default 0.04
    edge_threshold : float, default 10
    sigma : float, default 1.6
    rotation_invariance : bool, default True
        False computes upright descriptors (angle 0, one per location).
    """

    name = "sift"

    def __init__(self, **params):
        p = check_params(self.name, params, DEFAULTS)
        owner = "DoGSift"
        check_scalar(p["n_features"], "n_features", owner, low=0)
        check_scalar(p["n_octave_layers"], "n_octave_layers", owner, low=1, high=10)
        check_scalar(p["contrast_threshold"], "contrast_threshold", owner, kind=numbers.Real, low=0.0)
        check_scalar(p["edge_threshold"], "edge_threshold", owner, kind=numbers.Real, low=1.0)
        check_scalar(p["sigma"], "sigma", owner, kind=numbers.Real, low=0.0, closed="neither")
        if not isinstance(p["rotation_invariance"], (bool, np.bool_)):
            raise ValueError(f"The 'rotation_invariance' parameter of {owner} must be a bool. "
                             f"Got {p['rotation_invariance']!r} instead.")
        for k in ("contrast_threshold", "edge_threshold", "sigma"):
            p[k] = float(p[k])
        p["rotation_invariance"] = bool(p["rotation_invariance"])
        self.params = p

    def detect(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Detect and describe; see :mod:`retrieval.features.detectors` for shapes (working pixels)."""
        import cv2

        p = self.params
        sift = cv2.SIFT_create(nfeatures=p["n_features"], nOctaveLayers=p["n_octave_layers"],
                               contrastThreshold=p["contrast_threshold"], edgeThreshold=p["edge_threshold"],
                               sigma=p["sigma"])
        kps = sift.detect(pixels, None)
        if not p["rotation_invariance"]:
            seen, upright = set(), []
            for k in kps:
                key = (round(k.pt[0], 3), round(k.pt[1], 3), round(k.size, 3))
                if key not in seen:
                    seen.add(key)
                    upright.append(cv2.KeyPoint(k.pt[0], k.pt[1], k.size, 0.0, k.response, k.octave, k.class_id))
            kps = upright
        if not kps:
            return np.zeros((0, 6), np.float32), np.zeros((0, 128), np.uint8)
        kps, desc = sift.compute(pixels, kps)
        info = np.array([(k.pt[0], k.pt[1], k.size, k.angle) for k in kps], dtype=np.float64).reshape(-1, 4)
        r = 6.0 * info[:, 2] / 2.0
        t = np.deg2rad(info[:, 3])
        c, s = np.cos(t), np.sin(t)
        frames = np.stack([info[:, 0], info[:, 1], r * c, -r * s, r * s, r * c], axis=1).astype(np.float32)
        desc = np.clip(np.rint(np.asarray(desc, dtype=np.float32)), 0, 255).astype(np.uint8).reshape(-1, 128)
        return frames, desc
