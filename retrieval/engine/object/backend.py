"""The ``object`` backend: :class:`retrieval.engine.object.searcher.ObjectSearcher` (Zhu et al. 2013: large-vocabulary
BoW in an inverted file, l1 / l2 / delta_1 / delta_2, exact and spatial re-ranking) adapted to the index folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.engine.backend import Backend
from retrieval.engine.hits import Hit
from retrieval.engine.object.parts import ObjectSegments
from retrieval.engine.object.searcher import OFFER, ObjectSearcher
from retrieval.engine.params import Resolved, SearchContext
from retrieval.engine.presets import record_reduction
from retrieval.rerank.cells import MatchCells, with_probes
from retrieval.rerank.verifier import rootsift_descriptors

CELL_TRAINING_ROWS = 200_000
"""Descriptors the match cells are learnt from (a seeded sample of the training images')."""


def train_cells(features: list, rootsift: bool, seed: int) -> MatchCells | None:
    """The verification's match cells (:mod:`retrieval.rerank.cells`) in the space the verifier compares
    (RootSIFT, or the raw descriptors), learnt on a seeded sample of ``features``' descriptors; None without any."""
    rng = np.random.default_rng(seed)
    descs = [f.descriptors for f in features if len(f)]
    if not descs:
        return None
    X = np.concatenate(descs)
    if len(X) > CELL_TRAINING_ROWS:
        X = X[np.sort(rng.choice(len(X), CELL_TRAINING_ROWS, replace=False))]
    X = rootsift_descriptors(X) if rootsift else np.asarray(X, np.float32)
    return MatchCells.fit(X, seed=seed)


class ObjectBackend(Backend):
    """Adapter of :class:`retrieval.engine.object.searcher.ObjectSearcher` to the backend interface.

    The model is the trained but empty searcher (vocabulary, parameters), saved by ``save_model``; the state is
    made of immutable segments (:mod:`retrieval.engine.object.parts`), each a searcher folder of the images one sync
    added. ``searcher`` is the view that searches them as one collection, rebuilt by the writer's calls only.
    """

    kind = "object"
    offer = OFFER

    def __init__(self, preset: dict, n_shards: int = 1):
        super().__init__(preset)
        self.n_shards = int(n_shards)
        # shards are scored as one collection: with idf, under the weights of all their images (object_parts)
        self.shardable = True
        self.model = None
        self.state = None
        self.searcher = None
        self.cells = None

    def _new(self, n_descriptors: int):
        cfg = self.config
        params = cfg.object_search.searcher_kwargs(cfg.training)
        n_train = min(n_descriptors, params["max_train_descriptors"])
        cap = max(64, n_train // cfg.training.min_descriptors_per_word)
        if params["n_words"] > cap:
            record_reduction(self.effective, self.preset["name"], "object_search.n_words", params["n_words"], cap,
                             f"{n_train} training descriptors support at most {cap} words "
                             f"(training.min_descriptors_per_word)")
            params["n_words"] = cap
        return ObjectSearcher(**params)

    def _use_model(self, model: ObjectSearcher) -> None:
        # an index keeps no frame in its segments: its searches read them from the feature store, the same
        # features in the same order (24 bytes per feature, two thirds of what the forward index held)
        model.keep_frames = False
        self.model = model
        self.state = ObjectSegments(model, self.n_shards)
        self.searcher = self.state.view()

    def train(self, features_of, n_images: int, progress=None) -> None:
        feats = [features_of(i) for i in range(n_images)]
        self._use_model(self._new(sum(len(f) for f in feats)).fit(feats))
        self.cells = train_cells(feats, self.model.rootsift, int(self.config.training.random_state))
        if progress:
            progress(3, 3)
        self._settle()

    def save_model(self, folder: Path) -> dict:
        self.model.save(Path(folder) / "searcher")
        if self.cells is None:
            return {"files": ["searcher"]}
        self.cells.save(Path(folder) / "match_cells.npz")
        return {"files": ["searcher", "match_cells.npz"]}

    def _loaded(self, folder: Path, vocabulary=None, digest=None) -> ObjectSearcher:
        """A saved searcher, verifying at the preset's ``object_search.min_inliers`` (a query-time key: an index
        opened with a raised threshold, :func:`retrieval.app.index_support.adopt_thresholds`, uses it);
        ``vocabulary`` the model's, for a segment (saved without its own), and its ``digest``."""
        searcher = ObjectSearcher.load(folder, vocabulary=vocabulary, digest=digest)
        searcher.min_inliers = self.config.object_search.min_inliers
        return searcher

    def load_model(self, folder: Path, info: dict) -> None:
        self._use_model(self._loaded(Path(folder) / "searcher"))
        # models learnt before the match cells existed verify with the exact ratio test
        self.cells = MatchCells.load(Path(folder) / "match_cells.npz") if "match_cells.npz" in info["files"] else None
        self._settle()

    def _settle(self) -> None:
        """The model is complete (trained or loaded): its verifier is built, once (:attr:`Backend.verifier`):
        RootSIFT ratio-test matches (the matches the decision threshold was measured on), the preset's
        ``search.ratio`` and ``object_search.min_inliers``."""
        s = self.config.search
        self.verifier = self.model.verifier(ratio=s.ratio, cells=with_probes(self.cells, s.match_probes),
                                            query_features=s.verify_query_features)
        self.trained = True

    @property
    def ids(self) -> np.ndarray:
        return self.state.ids if self.state is not None else np.empty(0, np.int64)

    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        step = 64
        for s in range(0, len(features), step):
            self.state.add(ids[s:s + step], list(features[s:s + step]))
            if progress:
                progress(min(s + step, len(features)), len(features))
        self.state.commit()
        self.searcher = self.state.view()

    def encoded(self, features) -> tuple:
        """``(forward entry, (words, signatures) or None)`` of one image as :meth:`add` encodes it (what a bulk
        injection replicates)."""
        one = self.model.empty_like().add(np.array([0]), [features])
        one.commit()
        return one.forward(0), (one.smk_.signatures_of(0) if one.signatures else None)

    def add_encoded(self, ids, entries: dict, signed: list) -> None:
        """Images already encoded (:meth:`ObjectSearcher.add_encoded`), added to what the next save writes."""
        self.state.add_encoded(ids, entries, signed)
        self.searcher = self.state.view()

    def remove(self, ids) -> None:
        self.state.remove(ids)
        self.searcher = self.state.view()

    def save_state(self, folder: Path) -> None:
        self.state.save(Path(folder))
        self.searcher = self.state.view()

    def load_state(self, folder) -> None:
        vocabulary, digest = self.model.vocabulary_, self.state.digest
        self.state.load(None if folder is None else Path(folder), lambda path: self._loaded(path, vocabulary, digest))
        self.searcher = self.state.view()

    def segment_info(self) -> dict:
        return self.state.info()

    def plan_compaction(self, *, merge_all: bool, retrain: bool) -> bool:
        """Merging is planned; ``retrain`` is refused (the vocabulary is the model's: a new model is a new index)."""
        if retrain:
            return False
        self.state.merge_all = self.state.merge_all or bool(merge_all)
        return True

    def search(self, query, box, params: Resolved, context: SearchContext) -> list[Hit]:
        if self.searcher.ntotal == 0:
            return []
        # verified with the stored features (RootSIFT ratio-test matches, the matches the decision threshold was
        # measured on): the preset's search.verify_top first results, or the caller's (the sideways fallback)
        n_verify = self.config.search.verify_top if params.shortlist is None else params.shortlist
        return self.searcher.run(query, box, params, context, verifier=self.verifier, n_verify=n_verify)
