"""The searchable snapshot of one published generation: :class:`Searcher`, and the cache of them, :class:`Searchers`.

A :class:`Searcher` is loaded once per generation (the model, the memory-mapped search arrays, and a lookup of
the catalog rows, :class:`retrieval.app.catalog.CatalogRows`: rows are queried by id when a search needs them,
never all loaded) and never changes afterwards: any number of threads search it at once, without locks. What
varies per search (the query, ``k``, the method, the verification depth, the threads) is an argument; the only
shared mutable parts are the verification cache, a thread-safe :class:`retrieval.core.cache.BytesLRU` keyed by
image id (an id always names the same content), the row lookup's bounded cache (thread-safe too), and, for the
object presets, the inverted file's BoW postings, derived once from the forward index under a lock when a BoW
scoring first asks (:meth:`retrieval.search.invfile.InvertedFile.postings_from`; never changed afterwards).

Rows and generations: the lookup reads the committed catalog, which may already be of a newer generation when a
sync committed during the search. A hit keeps its id and takes the row's current path; a hit whose row was
deleted since is dropped from the results (and, verified, it is verified against no features). A new generation is a new :class:`Searcher`; :class:`Searchers` keeps the
last two and hands the verification cache on when the model is the same.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import threading
from dataclasses import dataclass

import numpy as np

from retrieval.app.query import Query
from retrieval.app.rotations import with_rotations
from retrieval.app.store_forms import stored_evidence
from retrieval.core.cache import BytesLRU
from retrieval.core.compiled import numba_loaded
from retrieval.engine.backend import Backend
from retrieval.engine.hits import Hit
from retrieval.engine.params import SearchContext, SearchParams
from retrieval.rerank.verifier import Outcome

logger = logging.getLogger("retrieval.app.index")

__all__ = ["Match", "Searcher", "Searchers", "default_verify_threads", "load_search_kernels"]

# The compiled kernels of a global preset's first stage. A process's first search scans without them (NumPy, the
# same lists bit for bit: retrieval.core.compiled), so that a new `retrieval query` process does not wait for
# numba's start-up (about half a second); from its second search on, a process loads them (they are about three
# times faster on a large index).
SEARCH_KERNELS = ("retrieval.search._ivfadc_kernels", "retrieval.codes._pq_kernels")
_searches = itertools.count()


def load_search_kernels() -> None:
    """Import the first stage's compiled kernels (numba) in this process: later single-query searches use them."""
    for name in SEARCH_KERNELS:
        importlib.import_module(name)


def default_verify_threads(kind: str) -> int:
    """Images verified side by side in one search when the caller does not say: up to 4 cores, for every kind
    (verification is most of a query on real photos: on the Oxford photos, 1,024 px, two threads take a
    ``default`` query from 440 to 240 ms, docs/benchmarks.md)."""
    return min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class Match:
    """The verdict of :meth:`Searcher.match`: the :class:`Outcome` of the one verifier, and both sides' features."""

    outcome: Outcome
    query: Query
    features_b: object


class Searcher:
    """An immutable, thread-safe snapshot of one published generation (module docstring).

    Parameters
    ----------
    generation : int
    backend : Backend — loaded with the model and the generation's state; only read from now on
    rows : :class:`retrieval.app.catalog.CatalogRows` (or a mapping id -> catalog row) — the catalog rows, looked
        up by id (``get``, ``[]``, ``in``; ``get_many`` when it has one); see the module docstring for which
        generation they show
    store : FeatureStore — the index's feature store (features verified)
    extractor : FeatureExtractor — features of a database image missing from the store, and turned queries
    cache : BytesLRU — described database images kept across searches
    verify_threads : int — images verified side by side in one search
    signature : str or None — the model's manifest hash (:meth:`IndexFolder.model_signature`)
    features_form : {"full", "compact"} — the form of the stored features verified (:mod:`retrieval.app.store_forms`)
    """

    def __init__(self, *, generation: int, backend: Backend, rows, store, extractor,
                 cache: BytesLRU, verify_threads: int, signature: str | None = None, features_form: str = "full"):
        self.generation = int(generation)
        self.backend = backend
        self.rows = rows
        self.store = store
        self.extractor = extractor
        self.cache = cache
        self.verify_threads = int(verify_threads)
        self.signature = signature
        self.features_form = features_form
        self.config = backend.config
        self.verifier = backend.verifier   # built once with the model: the same object for every search
        self._context = SearchContext(self.features_of, cache, self.verify_threads, self.local_features_of)

    def features_of(self, image_id: int):
        """The stored features of an indexed image of this generation (extracted again when the store lost them);
        no features (zero frames) when its row was deleted by a sync committed since (its hit is then dropped)."""
        r = self.rows.get(int(image_id))
        if r is None:
            return _no_features(self.extractor)
        model = getattr(self.verifier, "evidence", None)
        if model is not None:   # search.verify_on evidence: the photo's evidence when it has some
            ev = stored_evidence(self.store, self.extractor.config_key, model, r["hash"])
            if ev is not None:
                return ev
        return self._local(r)

    def local_features_of(self, image_id: int):
        """The stored local features of an indexed image (what an encoder reads; :meth:`features_of` gives its
        evidence instead when the index verifies on evidence)."""
        r = self.rows.get(int(image_id))
        return _no_features(self.extractor) if r is None else self._local(r)

    def _local(self, r):
        f = self.store.get(r["hash"], self.extractor.config_key, prefer=self.features_form)
        return self.extractor(r["path"]) if f is None else f

    # ------------------------------------------------------------------ search
    def search(self, query: Query, params: SearchParams | None = None) -> list[Hit]:
        """Ranked hits of ``query`` (new records, with ``rank`` and ``path``); ``params`` (None: the defaults)
        checked once against this index (:meth:`SearchParams.resolve
        <retrieval.engine.params.SearchParams.resolve>`). With the preset's ``search.rotation_fallback``, a
        whole-image query that verifies nothing but copies of itself is searched again turned sideways."""
        if next(_searches) and not numba_loaded():
            load_search_kernels()
        resolved = (params or SearchParams()).resolve(self.backend.offer, self.config.search)
        hits = self.backend.search(query.features, query.box, resolved, self._context)
        s = self.config.search
        if s.rotation_fallback and query.whole and resolved.rerank == "spatial":
            turned = resolved.turned(s.rotation_verify_top)

            def turned_search(features):
                return self.backend.search(features, query_region_of(features), turned, self._context)

            hits = with_rotations(hits, query, self.rows, resolved.k, self.extractor, turned_search)
        hits = resolved.kept(hits)
        rows = self._rows_of([hit.id for hit in hits])
        out = []
        for hit in hits:   # the backends build new hits for every search: completed in place
            r = rows.get(hit.id)
            if r is None:  # deleted by a sync committed since this generation (module docstring)
                continue
            hit.rank, hit.path = len(out) + 1, r["path"]
            out.append(hit)
        return out

    def _rows_of(self, ids) -> dict:
        """``{id: row}`` of ``ids`` (one query when the lookup has ``get_many``)."""
        get_many = getattr(self.rows, "get_many", None)
        if get_many is not None:
            return get_many(ids)
        return {i: r for i in ids if (r := self.rows.get(i)) is not None}

    # ------------------------------------------------------------------ one pair
    def match(self, query: Query, image_id: int) -> Match:
        """The verdict of this searcher's verifier on ``query`` against indexed image ``image_id``: the same
        verified flag, inliers and box as that image gets in ``query``'s ranked list."""
        verifier = self.verifier
        features_b = self.features_of(image_id)   # read once: described (or taken from the cache) and returned
        outcome = verifier.check_many(verifier.query_side(query.features), [image_id], query.box,
                                      lambda _: features_b, cache=self.cache)[0]
        return Match(outcome, query, features_b)


def _no_features(extractor):
    """Zero local features (what a deleted image is verified against)."""
    from retrieval.features.types import LocalFeatures

    return LocalFeatures(np.zeros((0, 6), np.float32), np.zeros((0, 128), np.uint8), (1, 1),
                         dict(getattr(extractor, "config", None) or {}))


def query_region_of(features):
    w, h = features.image_size
    return (0.0, 0.0, float(w - 1), float(h - 1))


class Searchers:
    """The :class:`Searcher` of the latest generations (at most two: the published one and, briefly, the one
    before), loaded once each and shared by every thread.

    ``load(generation) -> Searcher`` loads one (with a lookup of the catalog rows); a searcher of the
    same model signature as the newest cached one gets that one's verification cache."""

    def __init__(self, load, cache_bytes: int):
        self._load = load
        self._cache_bytes = int(cache_bytes)
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._by_gen: dict[int, Searcher] = {}
        self.loads = 0

    def get(self, generation: int) -> Searcher:
        with self._lock:
            s = self._by_gen.get(generation)
        if s is not None:
            return s
        with self._load_lock:   # one load at a time; searches of a cached generation go on meanwhile
            with self._lock:
                s = self._by_gen.get(generation)
            if s is not None:
                return s
            with self._lock:
                newest = self._by_gen[max(self._by_gen)] if self._by_gen else None
            s = self._load(generation, newest)
            with self._lock:
                self._by_gen[s.generation] = s
                for old in sorted(self._by_gen)[:-2]:
                    del self._by_gen[old]
            self.loads += 1
            return s

    def loaded(self) -> dict[int, Searcher]:
        """The searchers loaded now, by generation."""
        with self._lock:
            return dict(self._by_gen)

    def new_cache(self, newest: Searcher | None, signature: str | None) -> BytesLRU:
        """The verification cache of a new searcher: the newest one's when the model is the same."""
        if newest is not None and signature is not None and newest.signature == signature:
            return newest.cache
        return BytesLRU(self._cache_bytes)

    def clear(self) -> None:
        with self._lock:
            self._by_gen.clear()

