"""An on-disk index of a photo folder that follows the folder: :class:`Index`, a thin facade.

Index folder layout (format ``retrieval-index``, version 1; docs/formats.md):

``catalog.db``
    the SQLite catalog (:mod:`retrieval.app.catalog`): images, meta (preset, model, committed generation), runs.
``model/``
    the trained model of the preset (estimator ``.npz`` files + ``model.json``), written to a temporary folder
    and renamed when complete.
``gens/<generation>/``
    the searchable state of one committed generation (``state.json`` + ``.npy`` arrays, memory-mapped), written
    to ``gens/<generation>.tmp`` and renamed; the catalog's ``generation`` names the live one.
``features/``
    the :class:`retrieval.features.FeatureStore` (unless another store folder was given), read by re-ranking.

Who does what: :class:`retrieval.app.folder.IndexFolder` owns the layout, the writer lock and the one
``publish`` of a generation; :class:`retrieval.app.index_build.Writer` runs a sync or a remove;
:class:`retrieval.app.searcher.Searcher` is the immutable snapshot of one generation that searches read;
:class:`retrieval.app.query.Query` is a query built once. :class:`Index` ties them together and may be used from
any number of threads: each thread gets its own SQLite connection, and every search runs on the searcher of the
generation committed when it started (it sees the state before or after a concurrent sync, never a mixture).

Crash safety: a sync extracts into the feature store (complete entries only), trains into a temporary model
folder, writes the new generation into a temporary folder, renames it, and only then commits every catalog change
together with the new generation number in ONE SQLite transaction (:meth:`IndexFolder.publish
<retrieval.app.folder.IndexFolder.publish>`). A ``kill -9`` at any moment leaves the previous committed state; the
next sync cleans the leftovers and redoes the missing work (features already extracted are reused).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from retrieval._version import __version__
from retrieval.app import index_roots
from retrieval.app.catalog import Catalog, CatalogRows
from retrieval.app.folder import IndexFolder
from retrieval.app.generic_models import TRAIN_ON
from retrieval.app.index_build import Writer
from retrieval.app.index_support import (  # noqa: F401 (SyncReport, walk_photos are part of this API)
    SyncReport,
    adopt_thresholds,
    walk_photos,
)
from retrieval.app.query import Query, make_query, query_features
from retrieval.app.searcher import Match, Searcher, Searchers, default_verify_threads
from retrieval.app.shards import check_shards, shard_count
from retrieval.app.store_forms import check_compact_features
from retrieval.core.checks import check_scalar
from retrieval.core.threads import single_threaded_blas
from retrieval.engine.backend import default_verification_cache_mb
from retrieval.engine.hits import Hit
from retrieval.engine.presets import check_available, load_preset, preset_config, preset_digest, preset_names
from retrieval.features import FeatureExtractor
from retrieval.features.extractor import DEFAULT_DECODER
from retrieval.features.store import FeatureStore

logger = logging.getLogger(__name__)

INDEX_FORMAT = "retrieval-index"
INDEX_FORMAT_VERSION = 1

ERROR_FILES_SHOWN = 100
"""The unreadable files :meth:`Index.info` lists (the first by id; ``errors`` counts them all)."""


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
        self._local = threading.local()
        self._local.catalog = catalog
        self._catalogs = [catalog]
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
        preset = load_preset(preset)
        check_available(preset)
        if train_on not in TRAIN_ON:
            raise ValueError(f"train_on must be one of {', '.join(TRAIN_ON)}; got {train_on!r}.")
        shards = check_shards(preset, shards)
        compact_features = check_compact_features(compact_features)
        if (path / "catalog.db").exists():
            if not exist_ok:
                raise ValueError(f"{path}: an index already exists here (use Index.open, or another folder).")
            idx = cls.open(path, **options)
            if idx.preset["name"] != preset["name"] or idx.preset["version"] != preset["version"]:
                raise ValueError(f"{path}: this index was built with preset {idx.preset['name']!r} version "
                                 f"{idx.preset['version']}, not {preset['name']!r} version {preset['version']}; "
                                 f"use another --index folder or delete this one.")
            if shards != 1 and shards != shard_count(idx.catalog):
                raise ValueError(f"{path}: this index has {shard_count(idx.catalog)} shard(s); --shards is fixed "
                                 f"when an index is created (got {shards}).")
            if compact_features and compact_features != idx.compact_features:
                raise ValueError(f"{path}: this index keeps compact_features={idx.compact_features} (got "
                                 f"{compact_features}); Index.compact(compact_features=N) changes it.")
            return idx
        if path.exists() and any(not p.name.startswith("catalog.db.tmp") for p in path.iterdir()):
            raise ValueError(f"{path}: folder exists and is not empty; refusing to create an index in it.")
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / "catalog.db.tmp"
        for suffix in ("", "-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)

        cat = Catalog(tmp, create=True)
        cat.set_meta(index_format={"name": INDEX_FORMAT, "version": INDEX_FORMAT_VERSION},
                     preset=preset, preset_name=preset["name"], preset_version=preset["version"],
                     preset_digest=preset_digest(preset), library_version=__version__,
                     feature_store=None if feature_store is None else str(Path(feature_store).resolve()),
                     train_images=None if train_images is None else [os.path.abspath(str(p)) for p in train_images],
                     model=None, train_on=train_on, shards=shards, decoder=DEFAULT_DECODER,
                     compact_features=compact_features)
        cat.db.execute("PRAGMA wal_checkpoint(TRUNCATE);")
        cat.close()
        os.replace(tmp, path / "catalog.db")
        for suffix in ("-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        idx = cls.open(path, **options)
        if model is not None:
            idx.import_model(Path(model))
        return idx

    @classmethod
    def open(cls, path, *, verification_cache_mb: float | None = None,
             verify_threads: int | None = None) -> Index:
        """Open an existing index folder; refuses one made by another version of its preset.

        ``verification_cache_mb``: memory kept for described database images across searches (0: none; None: a
        sixteenth of the machine's memory, 256 to 2,048 MB, :func:`~retrieval.engine.backend.default_verification_cache_mb`);
        ``verify_threads``: images verified side by side in one search (None: up to 4, one per core)."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"index folder {str(path)!r} does not exist (create it with "
                                    f"'retrieval index PHOTO_DIR --index {path}').")
        cat = Catalog(path / "catalog.db")
        fmt = cat.get_meta("index_format")
        if fmt != {"name": INDEX_FORMAT, "version": INDEX_FORMAT_VERSION}:
            raise ValueError(f"{path}: index format {fmt!r}; this library reads {INDEX_FORMAT!r} version "
                             f"{INDEX_FORMAT_VERSION}.")
        preset = cat.get_meta("preset")
        name, version = preset["name"], preset["version"]
        if name in preset_names():
            current = load_preset(name)
            if current["version"] != version:
                raise ValueError(
                    f"{path}: index made with preset {name!r} version {version}, but this library's {name!r} "
                    f"preset is version {current['version']}; rebuild it: delete the folder and run "
                    f"'retrieval index PHOTO_DIR --index {path} --preset {name}'.")
            preset = adopt_thresholds(path, preset, current)
        return cls(path, cat, preset, verification_cache_mb=verification_cache_mb, verify_threads=verify_threads)

    # ------------------------------------------------------------------ shared parts
    @property
    def catalog(self) -> Catalog:
        """This thread's connection to the catalog (SQLite connections belong to the thread that opened them)."""
        cat = getattr(self._local, "catalog", None)
        if cat is None:
            cat = Catalog(self.path / "catalog.db")
            self._local.catalog = cat
            with self._lock:
                self._catalogs.append(cat)
        return cat

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

    def writer_lock(self):
        """The index's writer lock (:meth:`IndexFolder.writer_lock`), held by every sync, remove and repair."""
        return self.folder.writer_lock()

    def writer_active(self) -> bool:
        """True while a writer (this or another process) holds the writer lock."""
        return self.folder.writer_active()

    def import_model(self, src) -> None:
        """Use the trained model of another index (its folder or its ``model/``) instead of training."""
        self.catalog.set_meta(model=self.folder.import_model(Path(src)))
        self.searchers.clear()

    def use_cluster(self, client) -> None:
        """Search a sharded index on the workers of a Dask ``client`` (:mod:`retrieval.app.cluster`): each shard
        is loaded by a worker from the (shared) index folder and kept in its memory; None: in this process."""
        self._search_client = client
        self.searchers.clear()

    @property
    def search_client(self):
        return self._search_client

    # ------------------------------------------------------------------ folders followed (index_roots)
    @property
    def roots(self) -> list[str]:
        """The folders this index follows (absolute paths), in the order they were added."""
        return list(self.catalog.get_meta("roots") or [])

    @property
    def excluded(self) -> list[str]:
        """Paths removed with :meth:`remove`: later syncs leave them out."""
        return list(self.catalog.get_meta("excluded") or [])

    def include(self, paths) -> list[str]:
        """Take removed paths back (the next sync indexes them); returns those that were excluded."""
        wanted = {os.path.abspath(os.path.expanduser(str(p))) for p in paths}
        excluded = self.excluded
        back = [p for p in excluded if p in wanted]
        with self.writer_lock():
            self.catalog.set_meta(excluded=[p for p in excluded if p not in wanted])
        return back

    def exclude(self, paths) -> list[str]:
        """Keep paths out of later syncs without touching the index (the list :meth:`remove` adds to, which
        :meth:`include` takes paths back from): for files that are not indexed, such as duplicates moved into a
        folder the index follows; returns those newly excluded."""
        wanted = {os.path.abspath(os.path.expanduser(str(p))) for p in paths}
        with self.writer_lock():
            excluded = self.excluded
            new = sorted(wanted.difference(excluded))
            if new:
                self.catalog.set_meta(excluded=sorted(set(excluded) | wanted))
        return new

    def folder_files(self, folder, add_root: bool, replace_root: bool, stats: dict | None = None
                     ) -> tuple[list[str], list[str]]:
        """(files, roots) of a sync with ``folder`` (:func:`retrieval.app.index_roots.folder_files`)."""
        return index_roots.folder_files(self.path, self.roots, self.excluded, folder, add_root, replace_root, stats)

    # ------------------------------------------------------------------ writes
    def sync(self, folder_or_paths, workers: int | None = None, skip_errors: bool = False, *,
             progress: bool = False, add_root: bool = False, replace_root: bool = False,
             prune: bool = False, cluster=None, retrain: bool = False) -> SyncReport:
        """Bring the index in line with a photo folder (or an explicit list of image paths).

        New and changed files (size, mtime, then content hash) are extracted and added, deleted files dropped,
        moved files recognised by content hash and renamed in the catalog without re-extraction. Unreadable
        files are recorded with status ``error`` and listed in the report of the run where they fail; unchanged,
        they are not retried (``SyncReport.failed_before``). ``skip_errors`` is accepted and ignored (the report
        says what failed). Everything is committed in one catalog transaction (module docstring); a sync stopped
        by an error commits nothing and its run is marked ``failed``. A folder sync follows the index's folders
        (:mod:`retrieval.app.index_roots`: ``add_root`` / ``replace_root`` for another folder); one that would
        remove more than half of the indexed images needs ``prune``. ``cluster``: a Dask client (:mod:`.cluster`).
        A sync that changes nothing writes no generation (only its run record). ``retrain``: train the IVFADC
        quantiser of the searchable state again (:mod:`retrieval.engine.segments`).
        """
        with self.writer_lock():
            try:
                return Writer(self, client=cluster, retrain=retrain).sync(folder_or_paths, workers, progress, add_root,
                                                         replace_root, prune)
            except Exception:
                self.catalog.end_running_runs("failed")   # nothing was committed; the run must not stay 'running'
                raise

    def add(self, paths: Sequence, *, root=None, workers: int | None = 1, progress: bool = False) -> SyncReport:
        """Index the image files ``paths`` (new or changed) without walking the followed folders: the cost is what
        is added, not the collection (:meth:`Writer.add_files <retrieval.app.index_build.Writer.add_files>`);
        ``root``: a folder to follow from now on (the server's uploads folder)."""
        with self.writer_lock():
            try:
                return Writer(self).add_files(paths, workers, progress, root=root)
            except Exception:
                self.catalog.end_running_runs("failed")
                raise

    def remove(self, paths: Sequence) -> int:
        """Drop images (paths or ids) from the index; returns how many were removed. Files are not touched."""
        with self.writer_lock():
            return Writer(self).remove(paths)

    def compact(self, retrain: bool = False, compact_features: int | None = None) -> dict:
        """Merge the segments of the searchable state into one (``retrieval compact``, :meth:`Writer.compact`);
        ``compact_features``: keep the features in this form from now on, the store converted (``store_forms``)."""
        with self.writer_lock():
            if compact_features is not None:
                self.catalog.set_meta(compact_features=check_compact_features(compact_features))
            try:
                return Writer(self).compact(retrain=retrain)
            except Exception:
                self.catalog.end_running_runs("failed")
                raise

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

    def search(self, image, bbox=None, k: int = 10, method=None, rerank=None, query_expansion=None,
               **options) -> list[Hit]:
        """Ranked results for an image (indexed path or id, or any image file), optionally restricted to a box.

        Parameters
        ----------
        image : str, Path, int or Query
        bbox : "x1,y1,x2,y2" or 4 numbers or None — pixels of the original image after EXIF orientation
        k : int — number of results
        method, rerank : str or None — override the preset's ``search.method`` / ``search.rerank``
        query_expansion : int or None — verified hits averaged into the query (0: off), overriding the preset's
            ``search.query_expansion``; needs spatial re-ranking
        **options : backend options (``alpha`` for the object preset's delta_1 / delta_2)

        The hits are ordered by one key (:func:`retrieval.engine.hits.finish_ranking`): verified first by inliers,
        then by ``similarity``; ``score`` never increases with ``rank`` (docs/formats.md, "Scores"). With the
        preset's ``search.rotation_fallback``, a whole-image query that verifies nothing but copies of itself is
        searched again turned by 90 and 270 degrees (:mod:`retrieval.app.rotations`).
        """
        return self.search_results(image, bbox, k, method, rerank, query_expansion, **options).hits

    def search_results(self, image, bbox=None, k: int = 10, method=None, rerank=None, query_expansion=None,
                       **options) -> Results:
        """:meth:`search`, with the generation that answered."""
        check_scalar(k, "k", "Index.search", low=1)
        with single_threaded_blas():   # small products: threads spinning on a busy machine cost 10-100x
            searcher = self.searcher()
            query = image if isinstance(image, Query) else self.query(image, bbox)
            hits = searcher.search(query, k=k, method=method, rerank=rerank, query_expansion=query_expansion,
                                   options=options)
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
    def state_bytes_on_disk(self) -> int:
        """Bytes of the index's own files: the catalog (and its backup), the model, the generations and their
        segments -- not the feature store, the thumbnail cache or uploaded photos, whose sizes would need a walk of
        one file per photo (``retrieval info`` answers in constant time)."""
        total = 0
        for p in self.path.iterdir():
            if p.name in ("features", "thumbs", "uploads"):
                continue
            files = [p] if p.is_file() else (f for f in p.rglob("*") if f.is_file())
            total += sum(f.stat().st_size for f in files)
        return total

    def info(self) -> dict:
        """Summary: preset, model, counts by status (the catalog's ``counts``, no row read), generation, the first
        :data:`ERROR_FILES_SHOWN` unreadable files, last runs, the index's size (:meth:`state_bytes_on_disk`)."""
        cat = self.catalog
        with cat.reading():
            gen, counts = cat.generation(), cat.counts()
            errors = cat.error_rows(ERROR_FILES_SHOWN)
        size = self.state_bytes_on_disk()
        runs = self.catalog.runs()
        if runs and runs[-1]["status"] == "running" and not self.writer_active():
            runs[-1]["status"] = "interrupted"   # left 'running' by a killed process
        return {
            "index": str(self.path.resolve()),
            "preset": {"name": self.preset["name"], "version": self.preset["version"], "kind": self.preset["kind"]},
            "model": self.catalog.get_meta("model"),
            "generation": gen,
            "images": sum(counts.values()),
            "indexed": counts.get("indexed", 0),
            "errors": counts.get("error", 0),
            "error_files": [{"path": r["path"], "error": r["error"]} for r in errors],
            "roots": self.roots,
            "excluded": self.excluded,
            "bytes_on_disk": int(size), "compact_features": self.compact_features,
            "shards": shard_count(self.catalog), "runs": len(runs), "last_run": runs[-1] if runs else None,
        }

    def close(self) -> None:
        """Close every thread's catalog connection (SQLite lets a connection be closed from another thread only
        when it is idle: call this when no search runs)."""
        with self._lock:
            catalogs, self._catalogs = self._catalogs, []
        for cat in catalogs:
            try:
                cat.close()
            except Exception:  # noqa: BLE001 - a connection of another thread: closed when that thread ends
                pass
        self._local = threading.local()
