"""Pixels -> local features: image loading, detectors, descriptors, RootSIFT, local PCA, matching, feature store."""

from retrieval.features.types import LocalFeatures

__all__ = ["LocalFeatures"]
