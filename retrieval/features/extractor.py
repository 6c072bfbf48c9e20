"""Feature extraction: image file -> :class:`LocalFeatures` in original-image pixels."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.detectors import get_detector
from retrieval.features.image import (
    DEFAULT_MAX_MEGAPIXELS,
    DEFAULT_MAX_SIDE,
    DEFAULT_MIN_SIDE,
    LoadedImage,
    load_image,
)
from retrieval.features.types import LocalFeatures

logger = logging.getLogger(__name__)

FEATURES_VERSION = 1
"""Bumped when the extraction output changes for the same configuration (invalidates every cache)."""

DECODERS = {1: "jpeg", 2: "all"}
"""Decoder version -> what :func:`load_image` decodes reduced (its ``reduce``): 1 = JPEG files only (through
0.1), 2 = JPEG and MPO by DCT scaling, other formats by ``Image.reduce`` (the default since 0.2)."""
DEFAULT_DECODER = 2


def frames_to_original(frames: np.ndarray, scale_xy) -> np.ndarray:
    """Map frames from working pixels to original pixels.

    ``x_o = s_x (x + 0.5) - 0.5``, ``y_o = s_y (y + 0.5) - 0.5`` (pixel-centre convention of
    :mod:`retrieval.features.image`) and ``A_o = diag(s_x, s_y) A``.

    Parameters
    ----------
    frames : ndarray of shape (n, 6), float
    scale_xy : (float, float)

    Returns
    -------
    ndarray of shape (n, 6), dtype float32 (a new array)
    """
    sx, sy = (float(v) for v in scale_xy)
    f = np.array(frames, dtype=np.float64, copy=True).reshape(-1, 6)
    if sx != 1.0 or sy != 1.0:
        f[:, 0] = sx * (f[:, 0] + 0.5) - 0.5
        f[:, 1] = sy * (f[:, 1] + 0.5) - 0.5
        f[:, 2:4] *= sx
        f[:, 4:6] *= sy
    return f.astype(np.float32)


class FeatureExtractor:
    """Load an image, run a detector at the working scale, report frames in original pixels.

    Parameters
    ----------
    detector : str, default "hesaff"
        One of :func:`retrieval.features.detectors.available_detectors` ("hesaff", "sift", "dense").
    max_side : int or None, default 1024
        Working-image size (the Holidays/Oxford practice); None = full resolution.
    upscale_to : int or None, default None
        Smaller images are enlarged to this larger side (:func:`load_image`); part of the configuration key when
        set.
    decoder : {1, 2}, default 2
        How files larger than the working image are decoded (:data:`DECODERS`): 2 decodes every format reduced, 1
        only JPEG files (the features of the indexes made before 0.2, which keep it). The working images differ,
        so the features do: ``"decoder": 2`` enters the configuration when ``max_side`` is set (full-resolution
        extraction decodes in full whatever the decoder, and keeps its key).
    max_megapixels, min_side
        Guards of :func:`load_image` (not part of the configuration key: they only decide which files load).
    **params
        Detector parameters (see the detector's class; unknown names raise ``ValueError``).

    Attributes
    ----------
    config : dict
        JSON-able ``{"detector", "params" (all, defaults filled in), "max_side", "version"}``, plus ``"upscale_to"``
        when set, plus ``"decoder"`` when not 1 and ``max_side`` is set, plus
        ``"detector_version"`` when the detector's output changed for the same parameters (hesaff with
        ``rotation_invariance=True``: 2, since the orientation-sign fix).
    config_key : str
        16 hex digits, SHA-1 of the canonical JSON of ``config``: two extractors share cached features only
        when their keys are equal.
    """

    def __init__(self, detector: str = "hesaff", max_side: int | None = DEFAULT_MAX_SIDE, *,
                 max_megapixels: float = DEFAULT_MAX_MEGAPIXELS, min_side: int = DEFAULT_MIN_SIDE,
                 upscale_to: int | None = None, decoder: int = DEFAULT_DECODER, **params):
        if max_side is not None:
            check_scalar(max_side, "max_side", "FeatureExtractor", low=8)
        if upscale_to is not None:
            check_scalar(upscale_to, "upscale_to", "FeatureExtractor", low=8)
            if max_side is not None and upscale_to > max_side:
                raise ValueError(f"FeatureExtractor: upscale_to ({upscale_to}) must not exceed max_side ({max_side}).")
        if decoder not in DECODERS:
            raise ValueError(f"FeatureExtractor: decoder must be one of {', '.join(map(str, DECODERS))}; "
                             f"got {decoder!r}.")
        self.detector = detector
        self.max_side = max_side
        self.decoder = int(decoder)
        self.max_megapixels = max_megapixels
        self.min_side = min_side
        self.upscale_to = None if upscale_to is None else int(upscale_to)
        self.params = dict(params)
        self._detector = get_detector(detector, **params)
        self.config = {"detector": detector, "params": dict(self._detector.params),
                       "max_side": None if max_side is None else int(max_side), "version": FEATURES_VERSION}
        detector_version = int(getattr(self._detector, "version", 1))
        if detector_version != 1:  # only then, so that existing caches of unchanged detectors stay valid
            self.config["detector_version"] = detector_version
        if self.upscale_to is not None:  # only when set: the keys of existing feature stores stay valid
            self.config["upscale_to"] = self.upscale_to
        if self.decoder != 1 and max_side is not None:  # stores of the first decoder keep their key
            self.config["decoder"] = self.decoder
        self.config_key = config_key(self.config)

    @property
    def detector_impl(self):
        """The detector object (:mod:`retrieval.features.detectors`) this extractor runs."""
        return self._detector

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.params.items())
        up = "" if self.upscale_to is None else f", upscale_to={self.upscale_to!r}"
        up += "" if self.decoder == DEFAULT_DECODER else f", decoder={self.decoder!r}"
        return f"FeatureExtractor(detector={self.detector!r}, max_side={self.max_side!r}{up}{extra})"

    def load(self, path) -> LoadedImage:
        """:func:`load_image` with this extractor's ``max_side``, guards and decoder."""
        return load_image(path, max_side=self.max_side, max_megapixels=self.max_megapixels, min_side=self.min_side,
                          upscale_to=self.upscale_to, reduce=self.reduce)

    @property
    def reduce(self) -> str:
        """The ``reduce`` of :func:`load_image` (and :func:`decode_cost`) this extractor's decoder uses."""
        return DECODERS[self.decoder]

    def __call__(self, image) -> LocalFeatures:
        """Extract the features of ``image`` (a path, a :class:`LoadedImage` or a uint8 array at scale 1).

        Returns
        -------
        LocalFeatures
            ``frames`` (n, 6) float32 in original pixels after EXIF orientation, ``descriptors`` (n, 128) uint8,
            ``image_size`` = original ``(w, h)``, ``config`` = ``self.config``.
        """
        if isinstance(image, (str, Path)):
            image = self.load(image)
        elif isinstance(image, np.ndarray):
            image = LoadedImage.from_array(image)
        elif not isinstance(image, LoadedImage):
            raise ValueError(f"image must be a path, a LoadedImage or a uint8 array; got {type(image).__name__}.")
        frames, desc = self._detector.detect(image.pixels)
        frames = frames_to_original(frames, image.scale_xy)
        logger.debug("%s: %d features", image.path, len(frames))
        return LocalFeatures(frames=frames, descriptors=desc, image_size=tuple(image.original_size),
                             config=self.config)


def config_key(config: dict) -> str:
    """16-hex-digit SHA-1 of the canonical JSON of ``config``."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def extract_features(path, detector: str = "hesaff", **params) -> LocalFeatures:
    """One-shot ``FeatureExtractor(detector, **params)(path)``; see :class:`FeatureExtractor`."""
    return FeatureExtractor(detector, **params)(path)
