"""Local features -> one vector (or sparse histogram) per image: vocabularies, BoW, VLAD, Fisher, normalisations, PCA."""

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


def __getattr__(name):
    """Import a submodule only when one of its names is first used (a query loads what it needs, no more)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))


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
