"""Pixels -> local features: image loading, detectors, descriptors, RootSIFT, local PCA, feature store.

Heavy dependencies (OpenCV, pyhesaff, cyvlfeat) are imported inside the functions that need them.
"""

from retrieval.features.detectors import available_detectors, register_detector
from retrieval.features.extractor import FeatureExtractor, extract_features, frames_to_original
from retrieval.features.frames import parse_box, select_in_box, subset
from retrieval.features.image import ImageReadError, LoadedImage, load_image
from retrieval.features.parallel import ExtractionPool, extract_many
from retrieval.features.pca import LocalPCA
from retrieval.features.rootsift import root_sift
from retrieval.features.store import FeatureStore, file_hash, load_features, save_features
from retrieval.features.types import LocalFeatures

__all__ = [
    "ExtractionPool",
    "FeatureExtractor",
    "FeatureStore",
    "LocalPCA",
    "extract_many",
    "file_hash",
    "load_features",
    "save_features",
    "ImageReadError",
    "LoadedImage",
    "LocalFeatures",
    "available_detectors",
    "extract_features",
    "frames_to_original",
    "load_image",
    "parse_box",
    "register_detector",
    "root_sift",
    "select_in_box",
    "subset",
]
