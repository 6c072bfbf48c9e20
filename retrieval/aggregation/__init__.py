"""Local features -> one vector (or sparse histogram) per image: vocabularies, BoW, VLAD, Fisher, normalisations, PCA."""

from retrieval.aggregation.bow import BoW
from retrieval.aggregation.fisher import FisherVector, fisher_vector
from retrieval.aggregation.gmm import GMMVocabulary
from retrieval.aggregation.kmeans import KMeansVocabulary
from retrieval.aggregation.large_vocabulary import ApproximateKMeans
from retrieval.aggregation.normalize import l1_normalize, l2_normalize, power_normalize
from retrieval.aggregation.pca import PCAProjection, random_rotation
from retrieval.aggregation.vlad import VLAD, vlad_vector

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
