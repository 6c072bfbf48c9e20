"""The ``object`` backend: :class:`retrieval.engine.object_search.ObjectSearcher` (Zhu et al. 2013: large-vocabulary
BoW in an inverted file, l1 / l2 / delta_1 / delta_2, exact and spatial re-ranking) adapted to the index folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write
from retrieval.engine.backend import (
    STATE_FORMAT,
    STATE_FORMAT_VERSION,
    Backend,
    check_state_header,
    query_expansion_count,
    read_npy,
    write_npy,
)
from retrieval.engine.config import METHOD_ALPHA, OBJECT_METHODS
from retrieval.engine.hits import Hit
from retrieval.engine.object_search import ObjectSearcher
from retrieval.engine.presets import record_reduction
from retrieval.rerank.verifier import Verifier


class ObjectBackend(Backend):
    """Adapter of :class:`retrieval.engine.object_search.ObjectSearcher` to the backend interface.

    The searcher keeps its own model (vocabulary, idf) and inverted file; ``save_model`` stores the trained but
    empty searcher, ``save_state`` the searcher with its postings (its own folder format, docs/formats.md).
    """

    kind = "object"

    def __init__(self, preset: dict):
        super().__init__(preset)
        self.searcher = None
        self._ids = np.empty(0, np.int64)

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

    def train(self, features_of, n_images: int, progress=None) -> None:
        feats = [features_of(i) for i in range(n_images)]
        self.searcher = self._new(sum(len(f) for f in feats)).fit(feats)
        if progress:
            progress(3, 3)
        self.trained = True

    def save_model(self, folder: Path) -> dict:
        self.searcher.save(Path(folder) / "searcher")
        return {"files": ["searcher"]}

    def _loaded(self, folder: Path, vocabulary=None) -> ObjectSearcher:
        """The saved searcher, verifying at the preset's ``object_search.min_inliers`` (a query-time key: an index
        opened with a raised threshold, :func:`retrieval.app.index_support.adopt_thresholds`, uses it);
        ``vocabulary`` the model's, for a generation's searcher (saved without its own)."""
        searcher = ObjectSearcher.load(folder, vocabulary=vocabulary)
        searcher.min_inliers = self.config.object_search.min_inliers
        return searcher

    def load_model(self, folder: Path, info: dict) -> None:
        self._model_folder = Path(folder) / "searcher"
        self.searcher = self._loaded(self._model_folder)
        self.trained = True

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        step = 64
        for s in range(0, len(features), step):
            self.searcher.add(ids[s:s + step], list(features[s:s + step]))
            if progress:
                progress(min(s + step, len(features)), len(features))
        self.searcher.commit()
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        ids = np.asarray(list(ids), dtype=np.int64)
        present = ids[np.isin(ids, self._ids)]
        if len(present):
            self.searcher.remove(present)
            self._ids = self._ids[~np.isin(self._ids, present)]

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        write_npy(folder / "ids.npy", self._ids)
        # the vocabulary stays in the model folder (8.5 MB for `accurate`): a generation holds what it indexes
        self.searcher.save(folder / "searcher", with_vocabulary=False)
        header = {"format": STATE_FORMAT, "format_version": STATE_FORMAT_VERSION, "kind": self.kind,
                  "ntotal": int(len(self._ids))}
        with atomic_write(folder / "state.json", "w") as fh:
            json.dump(header, fh, indent=2, sort_keys=True)

    def load_state(self, folder) -> None:
        if folder is None:
            self._ids = np.empty(0, np.int64)
            return
        folder = Path(folder)
        check_state_header(folder, self.kind)
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        self.searcher = self._loaded(folder / "searcher", vocabulary=getattr(self.searcher, "vocabulary_", None))

    @property
    def verifier(self) -> Verifier:
        """RootSIFT ratio-test matches (the matches the decision threshold was measured on), the preset's
        ``search.ratio`` and ``object_search.min_inliers``."""
        return self.searcher.verifier(ratio=self.config.search.ratio)

    def search(self, query, *, k, query_box, method=None, rerank=None, get_features=None, query_expansion=None,
               shortlist=None, cache=None, threads: int = 1, **options) -> list[Hit]:
        s = self.config.search
        method = method or s.method
        if method not in OBJECT_METHODS:
            raise ValueError(f"--method must be one of {', '.join(OBJECT_METHODS)} for preset "
                             f"{self.preset['name']!r}; got {method!r}.")
        rerank = rerank or s.rerank
        if rerank not in ("none", "exact", "spatial"):
            raise ValueError(f"--rerank must be none, exact or spatial for preset {self.preset['name']!r}; "
                             f"got {rerank!r}.")
        # the preset's alpha belongs to its method; another method chosen at query time gets that method's default
        alpha = float(options.pop("alpha", s.alpha if method == s.method else METHOD_ALPHA.get(method, 1.0)))
        if options:
            raise ValueError(f"preset {self.preset['name']!r} (kind object) takes no option(s) "
                             f"{', '.join(sorted(options))}.")
        n_qe = query_expansion_count(s.query_expansion, query_expansion, rerank)
        if len(self._ids) == 0:
            return []
        # with the stored features the searcher verifies on RootSIFT ratio-test matches (the matches the decision
        # threshold was measured on); its hits carry the dissimilarity as ``distance``, its normalisation as
        # ``similarity`` and the ranking key as ``score``
        extra = {"query_expansion": n_qe} if n_qe else {}
        # images verified: the preset's search.verify_top, or the caller's (the sideways fallback's turned searches)
        extra["verify_top"] = int(s.verify_top if shortlist is None else shortlist)
        return self.searcher.search(query, bbox=query_box, k=k, method=method, alpha=alpha, rerank=rerank,
                                    get_features=get_features, verifier=self.verifier, cache=cache,
                                    threads=threads, **extra)
