"""The ``global`` and ``binary`` backends: one global vector per image, composed of four parts.

:class:`GlobalBackend` = an encoder (:class:`retrieval.engine.encoder.GlobalEncoder`: RootSIFT, local PCA to 64-d,
a Fisher vector or VLAD (Jegou et al. 2012, eq. 6 / eq. 18, power + L2 normalisation eq. 7) or a BoW, optional PCA
of the aggregated vector) + a first stage (:mod:`retrieval.engine.first_stages`: the vectors searched exhaustively
or through IVFADC, PQ codes ranked by ADC, or binary codes) + a verifier (:class:`retrieval.rerank.verifier.Verifier`,
spatial re-ranking of a shortlist, Philbin et al. 2007) + average query expansion from verified hits
(:func:`retrieval.engine.query_expansion.average_query_expansion`, Chum et al. 2007). Results are ordered by
:func:`retrieval.engine.hits.finish_ranking` (verified first by inliers, then by similarity).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retrieval.core.checks import check_random_state
from retrieval.engine.backend import Backend
from retrieval.engine.encoder import GlobalEncoder, sample_descriptors
from retrieval.engine.first_stages import FirstStage, VectorStage
from retrieval.engine.hits import Hit, finish_ranking
from retrieval.engine.params import Offer, Resolved, SearchContext
from retrieval.engine.presets import preset_config
from retrieval.engine.query_expansion import average_query_expansion
from retrieval.rerank.cells import with_probes
from retrieval.rerank.verifier import Verifier

__all__ = ["GlobalBackend", "make_stage", "sample_descriptors"]


def make_stage(preset: dict, effective: dict) -> FirstStage:
    """The first stage of a ``global`` or ``binary`` preset (its ``index.type``), stored as immutable segments
    (:class:`retrieval.engine.segments.SegmentedStage`); the code stages are imported only when used (their numba
    kernels stay unloaded for the default preset)."""
    from retrieval.engine.segments import SegmentedStage

    cfg = preset_config(preset)
    if cfg.kind == "binary":
        from retrieval.engine.code_stages import BinaryStage

        base = BinaryStage(preset, effective)
    elif cfg.index.type in ("adc", "ivfadc_adc"):
        from retrieval.engine.code_stages import CodesStage

        base = CodesStage(preset, effective)
    else:
        base = VectorStage(preset, effective)
    return SegmentedStage(preset, effective, base)


class GlobalBackend(Backend):
    """Encoder + first stage + verifier + query expansion (module docstring).

    Parameters
    ----------
    preset : dict — a ``global`` or ``binary`` preset
    stage : callable(preset, effective) -> FirstStage, or None — the first stage (default:
        :func:`retrieval.engine.first_stages.make_stage`, from ``index.type``; a sharded index passes its own)
    """

    def __init__(self, preset: dict, stage: Callable[[dict, dict], FirstStage] | None = None):
        super().__init__(preset)
        self.encoder = GlobalEncoder(preset, self.effective)
        self.stage = (stage or make_stage)(preset, self.effective)
        self.kind = self.stage.kind
        self.encodes_vectors = self.stage.stores_vectors
        self.shardable = self.stage.shardable
        self.offer = Offer(methods=self.stage.methods, reranks=("none", "spatial"))

    # ------------------------------------------------------------------ model
    def train(self, features_of, n_images: int, progress=None) -> None:
        """Learn the encoder (local PCA, vocabulary, global PCA), then the first stage's codes when they are
        trained with the model, from ``n_images`` training images (``features_of(i)``: their LocalFeatures)."""
        rng = check_random_state(self.config.training.random_state)
        self.encoder.fit(features_of, n_images, rng, progress)
        self.stage.fit(self.encoder, features_of, n_images, rng)
        if progress:
            progress(3, 3)
        self._settle()

    def save_model(self, folder: Path) -> dict:
        info = {"files": self.encoder.save(folder), "dim": int(self.encoder.dim)}
        self.stage.save_model(folder, info)
        return info

    def load_model(self, folder: Path, info: dict) -> None:
        self.encoder.load(folder, info)
        self.stage.load_model(folder, info)
        self._settle()

    def _settle(self) -> None:
        """The model is complete (trained or loaded): its verifier is built, once (:attr:`Backend.verifier`):
        ratio-test matches of RootSIFT reduced by the local PCA (64-d: twice as fast as 128-d), the preset's
        ``search.ratio`` and ``search.min_inliers``."""
        s = self.config.search
        self.verifier = Verifier(ratio=s.ratio, min_inliers=s.min_inliers, describe=self.encoder.describe,
                                 cells=with_probes(self.encoder.match_cells, s.match_probes),
                                 query_features=s.verify_query_features, evidence=self.encoder.evidence)
        self.trained = True

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def encode(self, features: Sequence) -> np.ndarray:
        """Global vectors of images, ndarray of shape (n, D'), float32, unit rows (zero for no features)."""
        return self.encoder.encode(features)

    # ------------------------------------------------------------------ state
    @property
    def ids(self) -> np.ndarray:
        return self.stage.ids

    @property
    def ivf(self):
        """The first stage's IVFADC, when it searches through one (None: exhaustive, or codes without lists)."""
        return getattr(self.stage, "ivf", None)

    @property
    def vectors(self):
        """The stored global vectors in the order of :attr:`ids` (None when the stage keeps only codes)."""
        return getattr(self.stage, "vectors", None)

    def _encoded_chunks(self, features: Sequence, progress, step: int = 64):
        """Global vectors of ``features`` by chunks of ``step`` images: yields ``(start, V (m, D'))``, then
        reports ``progress(done, total)``."""
        for s in range(0, len(features), step):
            yield s, self.encode(features[s:s + step])
            if progress:
                progress(min(s + step, len(features)), len(features))

    def add(self, ids, features, progress=None) -> None:
        self.stage.add(np.asarray(ids, dtype=np.int64), self._encoded_chunks(features, progress))

    def add_vectors(self, ids, vectors) -> None:
        """Append vectors already encoded by :meth:`encode` with this model (e.g. by the workers of a cluster)."""
        self.stage.add_vectors(ids, vectors)

    def remove(self, ids) -> None:
        self.stage.remove(ids)

    def save_state(self, folder: Path) -> None:
        self.stage.save_state(Path(folder), lambda: self.encoder.dim)

    def load_state(self, folder: Path | None) -> None:
        self.stage.load_state(None if folder is None else Path(folder))

    def segment_info(self) -> dict | None:
        return self.stage.segment_info()

    def plan_compaction(self, *, merge_all: bool, retrain: bool) -> bool:
        return self.stage.plan_compaction(merge_all=merge_all, retrain=retrain)

    def use_remote(self, client) -> bool:
        """Search the first stage on the workers of a Dask ``client`` when it can (a sharded index)."""
        return self.stage.use_remote(client)

    # ------------------------------------------------------------------ search
    def first_stage(self, q: np.ndarray, k: int, **options) -> list[Hit]:
        """The first stage's top ``k`` for the vector ``q`` (``options``: the stage's own, and ``reference``, the
        vector whose stored form scores similarity 1, default ``q``: :meth:`FirstStage.search
        <retrieval.engine.first_stages.FirstStage.search>`)."""
        return self.stage.search(q, k, **options)

    def vectors_of(self, ids, get_features) -> np.ndarray:
        """Global vectors (m, D') of indexed images: the stored rows, or re-encoded from their features (stages
        that keep only codes)."""
        V = self.stage.vectors_of(ids)
        return V if V is not None else self.encode([get_features(int(i)) for i in ids])

    def search(self, query, box, params: Resolved, context: SearchContext) -> list[Hit]:
        stage_options = self.stage.method_options(params.method)
        s = self.config.search
        k, rerank, n_qe = params.k, params.rerank, params.query_expansion
        q = self.encode([query])[0]
        shortlist = s.shortlist if params.shortlist is None else params.shortlist
        depth = max(k, shortlist) if rerank == "spatial" else k
        hits = self.first_stage(q, depth, **stage_options)
        if rerank != "spatial":
            return finish_ranking(hits, reranked=False)[:k]

        verifier = self.verifier

        def verify(candidates):
            return verifier.rerank(candidates, query, box, context.get_features, shortlist=len(candidates),
                                   cache=context.cache, threads=context.threads, patience=s.verify_patience,
                                   enough=s.verify_enough)

        checked = verify(hits[:shortlist])
        hits = finish_ranking(checked + hits[shortlist:], reranked=True)
        if n_qe:
            hits = average_query_expansion(
                q, hits, {h.id: h for h in checked}, n_qe, depth=depth, shortlist=shortlist, verify=verify,
                first_stage=lambda v, n, **kw: self.first_stage(v, n, **kw, **stage_options),
                vectors_of=lambda ids: self.vectors_of(ids, context.local_features))
        return hits[:k]
