"""An on-disk index of a photo folder that follows the folder: :class:`Index`, a thin facade.

The index folder's layout (format ``retrieval-index``, version 1) is described in docs/formats.md and
:mod:`retrieval.app.index_setup`.

Who does what: :class:`retrieval.app.folder.IndexFolder` owns the layout, the writer lock and the one
``publish`` of a generation; :class:`retrieval.app.index_build.Writer` makes every write (sync, add, remove, merge,
repair, imported models, followed and excluded paths), from the parts :meth:`Index.writer` gives it;
:class:`retrieval.app.searcher.Searcher` is the immutable snapshot of one generation that searches read;
:class:`retrieval.app.query.Query` is a query built once. :class:`Index` ties them together and may be used from
any number of threads: each thread gets its own SQLite connection, and every search runs on the searcher of the
generation committed when it started (it sees the state before or after a concurrent sync, never a mixture).

Crash safety: every write is the :class:`~retrieval.app.index_build.Writer`'s, and a generation becomes current
only by :meth:`IndexFolder.publish <retrieval.app.folder.IndexFolder.publish>` (one SQLite transaction): a
``kill -9`` at any moment leaves the previous committed state, and the next sync redoes the missing work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from retrieval.app.catalog import Catalog, CatalogRows
from retrieval.app.catalog_rows import ThreadCatalogs
from retrieval.app.folder import IndexFolder
from retrieval.app.index_build import Writer
from retrieval.app.index_setup import (
    check_same_index,
    checked_creation,
    index_info,
    open_catalog,
    write_new_catalog,
)
from retrieval.app.index_support import (  # noqa: F401 (SyncReport, walk_photos are part of this API)
    SyncReport,
    adopt_thresholds,
    walk_photos,
)
from retrieval.app.query import Query, make_query, query_features
from retrieval.app.searcher import Match, Searcher, Searchers, default_verify_threads
from retrieval.app.shards import shard_count
from retrieval.core.threads import single_threaded_blas
from retrieval.engine.backend import default_verification_cache_mb
from retrieval.engine.hits import Hit
from retrieval.engine.params import SearchParams
from retrieval.engine.presets import preset_config
from retrieval.features import FeatureExtractor
from retrieval.features.store import FeatureStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Results:
    """The answer of :meth:`Index.search_results`: the ``generation`` searched and its ranked ``hits``."""

    generation: int
    hits: list[Hit]


class Index:
    """A searchable index of a photo folder, stored in an index folder (see the module docstring).

    Use :meth:`create` or :meth:`open`, then :meth:`sync`, :meth:`search`, :meth:`remove`, :meth:`info`. Safe to
    share between threads.
    """

    def __init__(self, path, catalog: Catalog, preset: dict, *, verification_cache_mb: float | None = None,
                 verify_threads: int | None = None):
        if verification_cache_mb is None:
            verification_cache_mb = default_verification_cache_mb()
        if not float(verification_cache_mb) >= 0:
            raise ValueError(f"verification_cache_mb must be >= 0; got {verification_cache_mb!r}.")
        self.path = Path(path)
        self.preset = preset
        self.folder = IndexFolder(self.path, preset, shard_count(catalog))
        self._catalogs = ThreadCatalogs(lambda: Catalog(self.path / "catalog.db"), first=catalog)
        self._lock = threading.Lock()
        self._extractor = None
        self._store = None
        self._search_client = None   # a dask.distributed Client searching a sharded index (use_cluster)
        self.verify_threads = int(verify_threads or default_verify_threads(preset["kind"]))
        self.searchers = Searchers(self._load_searcher, int(float(verification_cache_mb) * (1 << 20)))

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, path, preset="default", model=None, train_images=None, *, feature_store=None,
               exist_ok: bool = False, train_on: str = "auto", shards: int = 1, compact_features: int = 0,
               **options) -> Index:
        """Create an empty index folder for ``preset``.

        Parameters
        ----------
        path : str or Path — the index folder (created)
        preset : str, Path or dict — a bundled preset name, a JSON file or a dict (:func:`load_preset`)
        model : str or Path or None — a trained model folder (an index's ``model/`` or an index folder) to
            reuse instead of training on the collection
        train_images : list of paths or None — train on these images instead of a sample of the collection
        feature_store : str or Path or None — feature-store folder (default ``<path>/features``); several
            indexes may share one
        exist_ok : bool — open an existing index built with the same preset instead of failing
        train_on : {"auto", "collection", "generic"} — the model's source without ``model`` or ``train_images``
            (:mod:`retrieval.app.generic_models`; auto: the generic model up to the preset's ``GENERIC_UP_TO`` images)
        shards : int — shards of the searchable state (:mod:`retrieval.app.shards`), fixed at creation
        compact_features : {0, 16, 32} — keep the features in compact form with codes of this many bytes a
            descriptor (:mod:`retrieval.app.store_forms`); 0: in full
        **options : ``verification_cache_mb``, ``verify_threads`` (:meth:`open`)
        """
        path = Path(path)
        preset, shards, compact_features = checked_creation(preset, train_on, shards, compact_features)
        if (path / "catalog.db").exists():
            if not exist_ok:
                raise ValueError(f"{path}: an index already exists here (use Index.open, or another folder).")
            idx = cls.open(path, **options)
            check_same_index(idx, preset, shards, compact_features)
            return idx
        write_new_catalog(path, preset, feature_store=feature_store, train_images=train_images, train_on=train_on,
                          shards=shards, compact_features=compact_features)
        idx = cls.open(path, **options)
        if model is not None:
            idx.writer().import_model(Path(model))
        return idx

    @classmethod
    def open(cls, path, *, verification_cache_mb: float | None = None,
             verify_threads: int | None = None) -> Index:
        """Open an existing index folder; refuses one made by another version of its preset.

        ``verification_cache_mb``: memory kept for described database images across searches (0: none; None: a
        sixteenth of the machine's memory, 256 to 2,048 MB, :func:`~retrieval.engine.backend.default_verification_cache_mb`);
        ``verify_threads``: images verified side by side in one search (None: up to 4, one per core)."""
        path = Path(path)
        cat, preset = open_catalog(path)
        return cls(path, cat, preset, verification_cache_mb=verification_cache_mb, verify_threads=verify_threads)

    # ------------------------------------------------------------------ shared parts
    @property
    def catalog(self) -> Catalog:
        """This thread's connection to the catalog (SQLite connections belong to the thread that opened them)."""
        return self._catalogs.get()

    @property
    def extractor(self) -> FeatureExtractor:
        if self._extractor is not None:
            return self._extractor
        # an index made before the decoder was recorded keeps the first one: its stored features stay valid (read
        # before taking the lock: this thread's first catalog connection takes it too)
        decoder = int(self.catalog.get_meta("decoder", 1) or 1)
        with self._lock:
            if self._extractor is None:
                self._extractor = FeatureExtractor(**preset_config(self.preset).features.extractor_kwargs(),
                                                   decoder=decoder)
            return self._extractor

    @property
    def store(self) -> FeatureStore:
        """The feature store (its folder is fixed when the index is created)."""
        with self._lock:
            store = self._store
        if store is None:
            store = FeatureStore(self.catalog.get_meta("feature_store") or (self.path / "features"))
            with self._lock:
                self._store = store
        return store

    @property
    def owns_store(self) -> bool:
        """Whether the feature store is the index's own (``<path>/features``; :mod:`retrieval.app.store_forms`)."""
        return not self.catalog.get_meta("feature_store")

    @property
    def compact_features(self) -> int:
        """Bytes of a stored descriptor's codes when the index keeps its features in compact form, else 0."""
        return int(self.catalog.get_meta("compact_features") or 0)

    def writer_active(self) -> bool:
        """True while a writer (this or another process) holds the writer lock."""
        return self.folder.writer_active()

    def writer(self) -> Writer:
        """The :class:`~retrieval.app.index_build.Writer` of this index for the calling thread: every write goes
        through it (each operation takes the writer lock). :meth:`sync`, :meth:`add`, :meth:`remove` and
        :meth:`compact` are its shorthands."""
        return Writer(self.folder, self.catalog, self.store, self.extractor, owns_store=self.owns_store,
                      on_change=self.searchers.clear)

    def use_cluster(self, client) -> None:
        """Search a sharded index on the workers of a Dask ``client`` (:mod:`retrieval.app.cluster`): each shard
        is loaded by a worker from the (shared) index folder and kept in its memory; None: in this process."""
        self._search_client = client
        self.searchers.clear()

    @property
    def search_client(self):
        return self._search_client

    @property
    def roots(self) -> list[str]:
        """The folders this index follows (absolute paths), in the order they were added."""
        return list(self.catalog.get_meta("roots") or [])

    @property
    def excluded(self) -> list[str]:
        """Paths removed with :meth:`remove`: later syncs leave them out."""
        return list(self.catalog.get_meta("excluded") or [])

    # ------------------------------------------------------------------ writes (Writer's shorthands)
    def sync(self, folder_or_paths, workers: int | None = None, skip_errors: bool = False, *,
             progress: bool = False, add_root: bool = False, replace_root: bool = False,
             prune: bool = False, cluster=None, retrain: bool = False) -> SyncReport:
        """Bring the index in line with a photo folder (or an explicit list of image paths): :meth:`Writer.sync
        <retrieval.app.index_build.Writer.sync>`. ``skip_errors`` is accepted and ignored (the report says what
        failed)."""
        return self.writer().sync(folder_or_paths, workers, progress=progress, add_root=add_root,
                                  replace_root=replace_root, prune=prune, cluster=cluster, retrain=retrain)

    def add(self, paths: Sequence, *, root=None, workers: int | None = 1, progress: bool = False) -> SyncReport:
        """Index the image files ``paths`` (new or changed) without walking the followed folders
        (:meth:`Writer.add <retrieval.app.index_build.Writer.add>`); ``root``: a folder to follow from now on."""
        return self.writer().add(paths, root=root, workers=workers, progress=progress)

    def remove(self, paths: Sequence) -> int:
        """Drop images (paths or ids) from the index; returns how many were removed. Files are not touched."""
        return self.writer().remove(paths)

    def compact(self, retrain: bool = False, compact_features: int | None = None) -> dict:
        """Merge the segments of the searchable state into one (``retrieval compact``,
        :meth:`Writer.compact <retrieval.app.index_build.Writer.compact>`)."""
        return self.writer().compact(retrain=retrain, compact_features=compact_features)

    # ------------------------------------------------------------------ search
    def searcher(self) -> Searcher:
        """The :class:`Searcher` of the committed generation (loaded once per generation, shared by threads)."""
        for attempt in range(5):
            gen = self.catalog.generation()
            if gen == 0:
                if self.writer_active():
                    raise ValueError(f"index {self.path} is being built by a running 'retrieval index': nothing is "
                                     f"searchable before its first commit; query again when it has finished.")
                raise ValueError(f"index {self.path} is empty: run 'retrieval index PHOTO_DIR --index {self.path}' "
                                 f"first.")
            try:
                return self.searchers.get(gen)
            except FileNotFoundError:  # two syncs committed since we read the generation: read it again
                if attempt == 4:
                    raise
                time.sleep(0.1)
        raise AssertionError("unreachable")

    def _load_searcher(self, gen: int, newest: Searcher | None) -> Searcher:
        gen = self.catalog.generation()   # the generation committed now (>= gen)
        backend = self.folder.load_backend(gen, fallback=True)
        if self._search_client is not None:
            backend.use_remote(self._search_client)   # a sharded index searched on a cluster's workers
        signature = self.folder.model_signature()
        rows = CatalogRows(lambda: self.catalog)   # each thread reads through its own connection
        return Searcher(generation=gen, backend=backend, rows=rows, store=self.store,
                        extractor=self.extractor, cache=self.searchers.new_cache(newest, signature),
                        verify_threads=self.verify_threads, signature=signature,
                        features_form="compact" if self.compact_features else "full")

    def query(self, image, bbox=None) -> Query:
        """The :class:`Query` of an indexed image (path or id), any image file or :class:`LocalFeatures`,
        optionally restricted to ``bbox`` (:mod:`retrieval.app.query`)."""
        return make_query(image, bbox, catalog=self.catalog, store=self.store, extractor=self.extractor,
                          index_path=self.path)

    def query_features(self, image):
        """(LocalFeatures, catalog row or None) of a query (:func:`retrieval.app.query.query_features`)."""
        return query_features(image, catalog=self.catalog, store=self.store, extractor=self.extractor,
                              index_path=self.path)

    def search(self, image, bbox=None, params: SearchParams | None = None, **fields) -> list[Hit]:
        """Ranked results for an image (indexed path or id, or any image file), optionally restricted to a box.

        Parameters
        ----------
        image : str, Path, int or Query
        bbox : "x1,y1,x2,y2" or 4 numbers or None — pixels of the original image after EXIF orientation
        params : SearchParams or None — the search's parameters (:class:`retrieval.engine.params.SearchParams`:
            ``k``, ``method``, ``rerank``, ``query_expansion``, ``alpha``, ``shortlist``; None: the preset's)
        **fields : fields of :class:`SearchParams` given by name (``idx.search(image, k=5, rerank="none")``),
            replacing those of ``params``

        The hits are ordered by one key (:func:`retrieval.engine.hits.finish_ranking`): verified first by inliers,
        then by ``similarity``; ``score`` never increases with ``rank`` (docs/formats.md, "Scores"). With the
        preset's ``search.rotation_fallback``, a whole-image query that verifies nothing but copies of itself is
        searched again turned by 90 and 270 degrees (:mod:`retrieval.app.rotations`). A refused parameter is a
        :class:`retrieval.engine.params.ParamError` naming it.
        """
        return self.search_results(image, bbox, params, **fields).hits

    def search_results(self, image, bbox=None, params: SearchParams | None = None, **fields) -> Results:
        """:meth:`search`, with the generation that answered."""
        params = SearchParams.of(params, **fields)
        with single_threaded_blas():   # small products: threads spinning on a busy machine cost 10-100x
            searcher = self.searcher()
            query = image if isinstance(image, Query) else self.query(image, bbox)
            hits = searcher.search(query, params)
        return Results(searcher.generation, hits)

    def match(self, image, image_id: int, bbox=None) -> Match:
        """The verdict of the index's verifier on a query (an indexed image, a file, or a :class:`Query`) against the
        indexed image ``image_id``: the verified flag, inliers and box its ranked list gives that image."""
        with single_threaded_blas():
            searcher = self.searcher()
            row = searcher.rows.get(int(image_id))
            if row is None or row["status"] != "indexed":
                raise ValueError(f"no indexed image with id {image_id} in the index {self.path}.")
            query = image if isinstance(image, Query) else self.query(image, bbox)
            return searcher.match(query, int(image_id))

    # ------------------------------------------------------------------ info
    def info(self) -> dict:
        """Summary: preset, model, counts by status, generation, the first unreadable files, last runs, the index's
        size (:func:`retrieval.app.index_setup.index_info`)."""
        return index_info(self)

    def close(self) -> None:
        """Close every thread's catalog connection (SQLite lets a connection be closed from another thread only
        when it is idle: call this when no search runs)."""
        self._catalogs.close_all()
