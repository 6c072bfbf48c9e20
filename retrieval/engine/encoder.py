"""The encoder of the global presets: :class:`GlobalEncoder`, local features -> one global vector per image.

RootSIFT, local PCA to 64-d, a Fisher vector or VLAD (Jegou et al. 2012, eq. 6 / eq. 18, power + L2
normalisation eq. 7) or a BoW, optional PCA of the aggregated vector, L2 normalisation. It also gives the
descriptor space of the global presets' verification (RootSIFT reduced by the local PCA, :meth:`describe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from retrieval import aggregation as A
from retrieval.core.persistence import load_estimator
from retrieval.core.threads import single_threaded_blas
from retrieval.engine.config import AGGREGATION_METHODS
from retrieval.engine.presets import preset_config, record_reduction, vocabulary_cap
from retrieval.features.pca import LocalPCA
from retrieval.features.rootsift import root_sift
from retrieval.rerank.cells import MatchCells

_MAX_DENSE_BATCH_BYTES = 4 << 30  # sparse BoW batches converted to dense float32 rows (no projection)

MODEL_FILES = ("local_pca.npz", "aggregator.npz", "projection.npz")
"""Files of the encoder in a model folder (``projection.npz`` only with a global PCA)."""


def sample_descriptors(descriptor_arrays: Sequence[np.ndarray], max_total: int, rng) -> np.ndarray:
    """Draw at most ``max_total`` rows, evenly over images, from a list of (n_i, d) arrays; returns (m, d)."""
    arrays = [a for a in descriptor_arrays if len(a)]
    if not arrays:
        raise ValueError("no local features in the training images: cannot train a model (are the images "
                         "blank or too small?).")
    per = max(1, max_total // len(arrays))
    out = []
    for a in arrays:
        if len(a) > per:
            a = a[np.sort(rng.choice(len(a), per, replace=False))]
        out.append(a)
    return np.concatenate(out, axis=0)


EVIDENCE_DESCRIPTORS = 1_000_000
"""Training descriptors sampled for the evidence vocabulary and its medians (more than the local PCA's: 50 a word
at 20,000 words)."""
EVIDENCE_PER_WORD = 20
"""Small collections: the evidence vocabulary is capped at its training descriptors / this."""


class GlobalEncoder:
    """RootSIFT -> LocalPCA -> Fisher/VLAD/BoW -> (PCA) -> L2 (module docstring).

    Parameters
    ----------
    preset : dict — the preset (its ``local_pca``, ``aggregation``, ``projection``, ``training`` sections)
    effective : dict — where reductions of the preset's parameters are recorded (:func:`record_reduction`)
    """

    def __init__(self, preset: dict, effective: dict):
        self.preset = preset
        self.config = preset_config(preset)   # the typed view, parsed once (the dict stays the source of truth)
        self.effective = effective
        self.local_pca = None
        self.aggregator = None
        self.projection = None
        self.match_cells = None
        self.evidence = None   # the verification's evidence model (search.verify_on evidence)

    # ------------------------------------------------------------------ training
    def _fit_vocabulary(self, X: np.ndarray, rng):
        agg = self.config.aggregation
        seed = int(rng.integers(2**31 - 1))
        K = agg.n_components
        cap = vocabulary_cap(self.preset, len(X))
        if K > cap:
            record_reduction(self.effective, self.preset["name"], "aggregation.n_components", K, cap,
                             f"{len(X)} training descriptors support at most {cap} words/Gaussians "
                             f"(training.min_descriptors_per_word)")
            K = cap
        if agg.method == "fisher":
            model = A.FisherVector(n_components=K, alpha=agg.alpha, random_state=seed)
        elif agg.method == "vlad":
            model = A.VLAD(n_clusters=K, alpha=agg.alpha, random_state=seed)
        elif agg.method == "bow":
            params = dict(alpha=agg.alpha, idf=agg.idf, norm="l2", random_state=seed)
            if K > 1000:  # VLFeat's k-means: 447 s for 3 iterations at K = 20,000 (docs/differences.md)
                return A.BoW.from_vocabulary(A.ApproximateKMeans(K, random_state=seed).fit(X), **params)
            model = A.BoW(n_clusters=K, **params)
        else:
            raise ValueError(f"preset {self.preset['name']!r}: aggregation.method must be one of "
                             f"{', '.join(AGGREGATION_METHODS)}; got {agg.method!r}.")
        return model.fit(X)

    def fit(self, features_of, n_images: int, rng, progress=None) -> None:
        """Learn the local PCA, the vocabulary and the global PCA from ``n_images`` training images
        (``features_of(i)``: the :class:`LocalFeatures` of training image ``i``), drawing seeds from ``rng``."""
        cfg = self.config
        # the sample drawn from the stored descriptors, then RootSIFT (row by row: the same rows as RootSIFT
        # first, without a float32 copy of every training descriptor)
        descs = [np.asarray(features_of(i).descriptors) for i in range(n_images)]
        X = np.asarray(root_sift(sample_descriptors(descs, cfg.training.max_descriptors, rng)), np.float32)
        self.evidence = self._fit_evidence(descs) if cfg.search.verify_on == "evidence" else None
        del descs
        lp = cfg.local_pca
        n_comp = min(lp.n_components, X.shape[1])
        if len(X) < n_comp:
            raise ValueError(f"only {len(X)} local features in the training images; the local PCA needs at "
                             f"least {n_comp}.")
        self.local_pca = LocalPCA(n_components=n_comp, whiten=lp.whiten,
                                  random_state=int(rng.integers(2**31 - 1))).fit(X)
        if progress:
            progress(1, 3)
        Xp = self.local_pca.transform(X)
        # the verification's match cells (retrieval.rerank.cells), seeded apart: the model's other parts unchanged
        self.match_cells = MatchCells.fit(Xp, seed=int(cfg.training.random_state))
        self.aggregator = self._fit_vocabulary(Xp, rng)
        if cfg.aggregation.method == "bow" and getattr(self.aggregator, "idf", False):
            self.aggregator.fit_idf([self.local(features_of(i)) for i in range(n_images)])
        if progress:
            progress(2, 3)
        self.projection = None
        proj = cfg.projection
        rotate = cfg.index.rotation or (proj is not None and proj.rotation)
        if proj is not None:
            n_out = proj.n_components
            if n_images >= 2 * n_out:
                V = self._aggregate_chunks(features_of, n_images)
                self.projection = A.PCAProjection(n_components=n_out, whiten=proj.whiten, renormalize=proj.renormalize,
                                                rotation=rotate, random_state=int(rng.integers(2**31 - 1))).fit(V)
            else:
                record_reduction(self.effective, self.preset["name"], "projection.n_components", n_out, None,
                                 f"the PCA to {n_out} dimensions needs {2 * n_out} training images, got "
                                 f"{n_images}: the aggregated vectors keep their full dimension D")

    def _fit_evidence(self, descs):
        """The evidence model (:mod:`retrieval.rerank.evidence`) of ``search.evidence_words`` words, learnt on a
        sample of the training descriptors (RootSIFT) of at most :data:`EVIDENCE_DESCRIPTORS`, seeded apart (the
        model's other parts unchanged)."""
        from retrieval.rerank.evidence import EvidenceModel

        cfg = self.config
        seed = int(cfg.training.random_state)
        X = np.asarray(root_sift(sample_descriptors(descs, EVIDENCE_DESCRIPTORS, np.random.default_rng(seed))),
                       np.float32)
        words = min(int(cfg.search.evidence_words), max(2, len(X) // EVIDENCE_PER_WORD))
        if words < cfg.search.evidence_words:
            record_reduction(self.effective, self.preset["name"], "search.evidence_words", cfg.search.evidence_words,
                             words, f"{len(X)} training descriptors support at most {words} evidence words "
                             f"({EVIDENCE_PER_WORD} a word)")
        return EvidenceModel.learn(X, n_words=words, bits=64, random_state=seed)

    def _aggregate_chunks(self, features_of, n_images: int, chunk: int = 64):
        """The aggregated vectors (before the global PCA) of the training images, ``chunk`` images at a time (the
        features of one chunk in memory, not of every training image)."""
        from retrieval.aggregation.normalize import issparse

        parts = [self.aggregate([features_of(i) for i in range(s, min(s + chunk, n_images))], project=False,
                                dense=False) for s in range(0, n_images, chunk)]
        if parts and issparse(parts[0]):
            import scipy.sparse as sp

            return sp.vstack(parts).tocsr()
        return np.concatenate(parts, axis=0)

    def save(self, folder: Path) -> list[str]:
        """Save into a model folder; returns the files written."""
        folder = Path(folder)
        self.local_pca.save(folder / "local_pca.npz")
        self.aggregator.save(folder / "aggregator.npz")
        files = ["local_pca.npz", "aggregator.npz"]
        if self.match_cells is not None:
            self.match_cells.save(folder / "match_cells.npz")
            files.append("match_cells.npz")
        if self.projection is not None:
            self.projection.save(folder / "projection.npz")
            files.append("projection.npz")
        if self.evidence is not None:
            files += self.evidence.save(folder)
        return files

    def load(self, folder: Path, info: dict) -> None:
        folder = Path(folder)
        self.local_pca = load_estimator(folder / "local_pca.npz")
        self.aggregator = load_estimator(folder / "aggregator.npz")
        self.projection = load_estimator(folder / "projection.npz") if "projection.npz" in info["files"] else None
        # models learnt before the match cells existed verify with the exact ratio test
        self.match_cells = MatchCells.load(folder / "match_cells.npz") if "match_cells.npz" in info["files"] else None
        self.evidence = None
        if "evidence.npz" in info["files"]:
            from retrieval.rerank.evidence import EvidenceModel

            self.evidence = EvidenceModel.load(folder)

    @property
    def dim(self) -> int:
        """D', the dimension of the global vectors."""
        if self.projection is not None:
            return int(self.projection.n_components)
        agg = self.config.aggregation
        K = int(getattr(self.aggregator, "n_components", getattr(self.aggregator, "n_clusters", 0)) or
                agg.n_components)
        if agg.method == "bow":
            return K
        return K * int(self.local_pca.n_components)

    # ------------------------------------------------------------------ encoding
    def describe(self, descriptors) -> np.ndarray:
        """RootSIFT then local PCA of raw SIFT descriptors, (n, d) float32 (the verification's ratio test)."""
        return np.asarray(self.local_pca.transform(root_sift(descriptors)), dtype=np.float32)

    def local(self, f) -> np.ndarray:
        """RootSIFT then local PCA of one image's descriptors, (n, d) float32."""
        if len(f) == 0:
            return np.zeros((0, self.local_pca.n_components), np.float32)
        return np.asarray(self.local_pca.transform(root_sift(f.descriptors)), dtype=np.float32)

    def aggregate(self, features: Sequence, project: bool = True, dense: bool = True):
        """Aggregated vectors (n, D) — projected to D' and L2-normalised when ``project``; a sparse BoW stays
        sparse when ``dense`` is False (PCA training)."""
        from retrieval.aggregation.normalize import issparse  # scipy.sparse is imported only by a sparse BoW

        # one BLAS thread: the same floats wherever an image is encoded (a sync, a cluster's worker, whose Dask
        # nanny sets one thread, a server's thread), since a multi-threaded BLAS sums small products in another order
        with single_threaded_blas():
            V = self.aggregator.transform([self.local(f) for f in features])
            if project and self.projection is not None:
                V = self.projection.transform(V)
        if issparse(V):
            if not dense:
                return V.astype(np.float32)
            if V.shape[0] * V.shape[1] * 4 > _MAX_DENSE_BATCH_BYTES:
                raise ValueError(f"preset {self.preset['name']!r}: {V.shape[0]} sparse vectors of {V.shape[1]} "
                                 f"dimensions do not fit the global backend's dense batches (at most "
                                 f"{_MAX_DENSE_BATCH_BYTES >> 20} MB; set 'projection' or a smaller vocabulary).")
            V = V.toarray()
        return np.asarray(A.l2_normalize(np.asarray(V, dtype=np.float32)), dtype=np.float32)

    def encode(self, features: Sequence) -> np.ndarray:
        """Global vectors of images, ndarray of shape (n, D'), float32, unit rows (zero for no features)."""
        return self.aggregate(features)
