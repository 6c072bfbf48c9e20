"""The record that flows from detectors to descriptors, aggregation, verification and storage."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LocalFeatures:
    """Local features of one image.

    Attributes
    ----------
    frames : ndarray of shape (n, 6), dtype float32
        ``x, y, a11, a12, a21, a22``: the centre and the 2x2 matrix ``A = [[a11, a12], [a21, a22]]``
        mapping the unit circle onto the measurement region (``p = (x, y) + A u`` for ``|u| = 1``), in
        pixels of the original image after EXIF orientation. Pixel-centre convention: the centre of the
        top-left pixel is (0, 0).
    descriptors : ndarray of shape (n, d)
        uint8 SIFT (d = 128) as produced by the detector, or float32 after RootSIFT / PCA.
    image_size : tuple of int
        ``(width, height)`` of the original image after EXIF orientation.
    config : dict
        The extractor configuration that produced them (detector name and parameters).
    """

    frames: np.ndarray
    descriptors: np.ndarray
    image_size: tuple[int, int]
    config: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.frames.ndim != 2 or self.frames.shape[1] != 6:
            raise ValueError(f"frames must have shape (n, 6); got {self.frames.shape}.")
        if self.descriptors.ndim != 2 or self.descriptors.shape[0] != self.frames.shape[0]:
            raise ValueError(
                f"descriptors must have shape (n, d) with n = {self.frames.shape[0]} (the number of frames); "
                f"got {self.descriptors.shape}."
            )

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    @property
    def xy(self) -> np.ndarray:
        """Centres, ndarray of shape (n, 2), dtype float32."""
        return self.frames[:, :2]
