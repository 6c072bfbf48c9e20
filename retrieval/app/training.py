"""Training a visual vocabulary from image files (what ``retrieval train vocab`` runs).

Local features (Hessian-affine + SIFT by default) -> RootSIFT -> optional local PCA -> k-means or diagonal GMM
(Jegou et al. 2012, section III).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from retrieval.aggregation import GMMVocabulary, KMeansVocabulary
from retrieval.features import root_sift
from retrieval.features.parallel import extract_many
from retrieval.features.pca import LocalPCA

logger = logging.getLogger(__name__)


class UnreadableImageError(ValueError):
    """An image could not be read or described; ``path`` names it."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)


def image_descriptors(paths, extractor, *, rootsift: bool = True, workers=None, store=None,
                      skip_errors: bool = False, progress=None) -> tuple[np.ndarray, list[str]]:
    """Local descriptors of every image, stacked.

    Returns ``(X, failed)``: ``X`` ndarray of shape (n, 128), dtype float32 (RootSIFT unless ``rootsift`` is
    False), ``failed`` the paths skipped as unreadable (only with ``skip_errors``; otherwise the first one
    raises :class:`UnreadableImageError`). Raises ValueError when no image has any feature.
    """
    paths = list(paths)
    descs, failed = [], []
    for i, res in extract_many(paths, extractor, workers=workers, progress=progress, store=store):
        if isinstance(res, Exception):
            if not skip_errors:
                raise UnreadableImageError(paths[i], res)
            failed.append(str(paths[i]))
            logger.warning("skipped %s: %s", paths[i], getattr(res, "reason", None) or res)
            continue
        d = res.descriptors
        if len(d):
            descs.append(root_sift(d) if rootsift else np.asarray(d, np.float32))
    if not descs:
        raise ValueError("no local features found in the given images.")
    return np.concatenate(descs), failed


@dataclass
class TrainedVocabulary:
    """The result of :func:`train_vocabulary`: the vocabulary, the local PCA applied first (or None), the
    dimension the vocabulary was trained in, and the training time in seconds (PCA excluded)."""

    model: KMeansVocabulary | GMMVocabulary
    pca: LocalPCA | None
    dimension: int
    seconds: float


def train_vocabulary(X, *, kind: str = "gmm", k: int = 64, pca_dim: int = 64, max_samples: int = 1_000_000,
                     seed: int = 0, progress=None) -> TrainedVocabulary:
    """Learn a local PCA to ``pca_dim`` dimensions (0: none), then a ``kind`` vocabulary of ``k`` words.

    ``X`` : ndarray of shape (n, d), float32. ``kind`` is "kmeans" (BoW, VLAD) or "gmm" (Fisher vectors);
    ``progress(done, total)`` follows the EM iterations of a GMM.
    """
    if kind not in ("kmeans", "gmm"):
        raise ValueError(f"kind must be 'kmeans' or 'gmm'; got {kind!r}.")
    pca = None
    if pca_dim:
        pca = LocalPCA(pca_dim, random_state=seed).fit(X)
        X = pca.transform(X).astype(np.float32)
    t0 = time.time()
    if kind == "kmeans":
        model = KMeansVocabulary(k, max_samples=max_samples, random_state=seed).fit(X)
    else:
        model = GMMVocabulary(k, max_samples=max_samples, random_state=seed).fit(X, progress=progress)
    return TrainedVocabulary(model, pca, int(X.shape[1]), time.time() - t0)
