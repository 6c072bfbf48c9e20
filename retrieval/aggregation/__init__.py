"""Local features -> one vector (or sparse histogram) per image: vocabularies, BoW, VLAD, Fisher, normalisations, PCA."""

from retrieval.core.lazy import lazy_exports

_EXPORTS = {
    "BoW": "bow",
    "FisherVector": "fisher",
    "fisher_vector": "fisher",
    "GMMVocabulary": "gmm",
    "KMeansVocabulary": "kmeans",
    "ApproximateKMeans": "large_vocabulary",
    "l1_normalize": "normalize",
    "l2_normalize": "normalize",
    "power_normalize": "normalize",
    "PCAProjection": "pca",
    "random_rotation": "pca",
    "VLAD": "vlad",
    "vlad_vector": "vlad",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "ApproximateKMeans",
    "BoW",
    "FisherVector",
    "GMMVocabulary",
    "KMeansVocabulary",
    "PCAProjection",
    "VLAD",
    "fisher_vector",
    "l1_normalize",
    "l2_normalize",
    "power_normalize",
    "random_rotation",
    "vlad_vector",
]
