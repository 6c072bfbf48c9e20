"""Detector registry: a detector is one module exposing a class with the :class:`Detector` interface.

A detector turns a gray working image into frames and descriptors **in working-image pixels** (the extractor maps
them back to original pixels). Adding one = writing a module with a class like :class:`Detector` and one entry
in ``_BUILTIN`` (or calling :func:`register_detector` at run time).

Interface
---------
``cls(**params)``
    validates and stores the parameters (unknown names raise ``ValueError``).
``cls.name : str``; ``obj.params : dict``
    the full JSON-able parameter set (defaults filled in); it enters the extractor's config key.
``obj.detect(pixels) -> (frames, descriptors)``
    ``pixels`` (h, w) uint8 C-contiguous; ``frames`` (n, 6) float32 ``x, y, a11, a12, a21, a22`` (centre and the
    2x2 matrix mapping the unit circle onto the measurement region, pixel-centre convention of
    :mod:`retrieval.features.image`); ``descriptors`` (n, 128) uint8.
"""

from __future__ import annotations

import importlib
from typing import Protocol

import numpy as np

_BUILTIN = {
    "hesaff": "retrieval.features.detectors.hesaff:HessianAffine",
    "sift": "retrieval.features.detectors.sift:DoGSift",
    "dense": "retrieval.features.detectors.dense:DenseSift",
}
_REGISTERED: dict[str, type] = {}


class Detector(Protocol):
    name: str
    params: dict

    def detect(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


def register_detector(name: str, cls: type) -> None:
    """Register ``cls`` (implementing the :class:`Detector` interface) under ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"detector name must be a non-empty string; got {name!r}.")
    _REGISTERED[name] = cls


def available_detectors() -> list[str]:
    """Names accepted by :func:`get_detector`."""
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def get_detector_class(name: str) -> type:
    """The detector class registered under ``name``."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        opts = ", ".join(repr(n) for n in available_detectors())
        raise ValueError(f"The 'detector' parameter must be one of {opts}. Got {name!r} instead.")
    module, cls = _BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get_detector(name: str, **params):
    """Instantiate the detector ``name`` with ``params``."""
    return get_detector_class(name)(**params)


def check_params(owner: str, given: dict, defaults: dict) -> dict:
    """Merge ``given`` into ``defaults`` refusing unknown names (typos never pass silently)."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"Unknown parameter(s) {', '.join(map(repr, unknown))} for detector {owner!r}; "
                         f"expected some of {', '.join(sorted(defaults))}.")
    out = dict(defaults)
    out.update(given)
    return out


def frames_from_ellipse_cholesky(x, y, a, c, d, ori=None) -> np.ndarray:
    """Frames from the lower-triangular shape ``L = [[a, 0], [c, d]]`` and an orientation ``ori`` (radians).

    ``A = L @ R(ori)`` with ``R(t) = [[cos t, -sin t], [sin t, cos t]]`` (image axes: x right, y down).
    This is pyhesaff's ``(x, y, a, c, d, ori)`` convention, verified on a synthetic ellipse and on a 90-degree
    rotated image (tests/test_features_detectors.py).

    Returns
    -------
    ndarray of shape (n, 6), dtype float32
    """
    x, y, a, c, d = (np.asarray(v, dtype=np.float64) for v in (x, y, a, c, d))
    ori = np.zeros_like(x) if ori is None else np.asarray(ori, dtype=np.float64)
    co, si = np.cos(ori), np.sin(ori)
    a11 = a * co
    a12 = -a * si
    a21 = c * co + d * si
    a22 = -c * si + d * co
    return np.stack([x, y, a11, a12, a21, a22], axis=1).astype(np.float32)
