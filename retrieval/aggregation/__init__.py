"""Local features -> one vector (or sparse histogram) per image: vocabularies, BoW, VLAD, Fisher, normalisations, PCA."""

from retrieval.aggregation.normalize import l1_normalize, l2_normalize, power_normalize
from retrieval.aggregation.pca import PCAProjection, random_rotation

__all__ = [
    "PCAProjection",
    "l1_normalize",
    "l2_normalize",
    "power_normalize",
    "random_rotation",
]
