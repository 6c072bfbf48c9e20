"""An on-disk index of a photo folder that follows the folder: :class:`Index`.

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

Crash safety: a sync extracts into the feature store (complete entries only), trains into a temporary model
folder, writes the new generation into a temporary folder, renames it, and only then commits every catalog change
together with the new generation number in ONE SQLite transaction. A ``kill -9`` at any moment leaves the previous
committed state; the next sync cleans the leftovers and redoes the missing work (features already extracted are
reused). A query reads the generation and the rows in one read transaction and opens that generation's arrays,
so it sees either the state before or the state after a concurrent sync.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from retrieval._version import __version__
from retrieval.app.catalog import Catalog
from retrieval.app.generations import GenerationsMixin
from retrieval.app.generic_models import TRAIN_ON
from retrieval.app.index_build import IndexBuildMixin
from retrieval.app.index_query import QueryMixin
from retrieval.app.index_roots import RootsMixin
from retrieval.app.index_support import (  # noqa: F401 (SyncReport, walk_photos are part of this API)
    LazyFeatures,
    SyncReport,
    adopt_thresholds,
    file_stat,
    image_meta,
    progress_callback,
    walk_photos,
)
from retrieval.app.integrity import CATALOG_BACKUP, write_manifest
from retrieval.app.rotations import with_rotations
from retrieval.app.shards import check_shards, shard_count
from retrieval.core.checks import check_scalar
from retrieval.core.persistence import crash_point, fsync_dir
from retrieval.core.threads import single_threaded_blas
from retrieval.engine.hits import Hit
from retrieval.engine.presets import check_available, load_preset, preset_config, preset_digest, preset_names
from retrieval.features import FeatureExtractor
from retrieval.features.image import IMAGE_EXTENSIONS
from retrieval.features.store import FeatureStore, file_hash

logger = logging.getLogger(__name__)

INDEX_FORMAT = "retrieval-index"
INDEX_FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------- the index

class Index(GenerationsMixin, IndexBuildMixin, QueryMixin, RootsMixin):
    """A searchable index of a photo folder, stored in an index folder (see the module docstring).

    Use :meth:`create` or :meth:`open`, then :meth:`sync`, :meth:`search`, :meth:`remove`, :meth:`info`.
    """

    def __init__(self, path, catalog: Catalog, preset: dict):
        self.path = Path(path)
        self.catalog = catalog
        self.preset = preset
        self._backend = None
        self._backend_gen = None
        self._extractor = None
        self._client = None   # a dask.distributed Client during a sync (retrieval.app.cluster)
        self._snapshot, self._by_id = None, {}   # the catalog rows of the last search's generation (read-only)

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, path, preset="default", model=None, train_images=None, *, feature_store=None,
               exist_ok: bool = False, train_on: str = "auto", shards: int = 1) -> Index:
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
            (:mod:`retrieval.app.generic_models`; auto: the generic model below 100 images)
        shards : int — shards of the searchable state (:mod:`retrieval.app.shards`), fixed at creation
        """
        path = Path(path)
        preset = load_preset(preset)
        check_available(preset)
        if train_on not in TRAIN_ON:
            raise ValueError(f"train_on must be one of {', '.join(TRAIN_ON)}; got {train_on!r}.")
        shards = check_shards(preset, shards)
        if (path / "catalog.db").exists():
            if not exist_ok:
                raise ValueError(f"{path}: an index already exists here (use Index.open, or another folder).")
            idx = cls.open(path)
            if idx.preset["name"] != preset["name"] or idx.preset["version"] != preset["version"]:
                raise ValueError(f"{path}: this index was built with preset {idx.preset['name']!r} version "
                                 f"{idx.preset['version']}, not {preset['name']!r} version {preset['version']}; "
                                 f"use another --index folder or delete this one.")
            if shards != 1 and shards != shard_count(idx.catalog):
                raise ValueError(f"{path}: this index has {shard_count(idx.catalog)} shard(s); --shards is fixed "
                                 f"when an index is created (got {shards}).")
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
                     model=None, train_on=train_on, shards=shards)
        cat.db.execute("PRAGMA wal_checkpoint(TRUNCATE);")
        cat.close()
        os.replace(tmp, path / "catalog.db")
        for suffix in ("-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        idx = cls.open(path)
        if model is not None:
            idx._import_model(Path(model))
        return idx

    @classmethod
    def open(cls, path) -> Index:
        """Open an existing index folder; refuses one made by another version of its preset."""
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
        return cls(path, cat, preset)

    # ------------------------------------------------------------------ helpers
    @property
    def extractor(self):
        if self._extractor is None:
            self._extractor = FeatureExtractor(**preset_config(self.preset).features.extractor_kwargs())
        return self._extractor

    @property
    def store(self):
        folder = self.catalog.get_meta("feature_store") or (self.path / "features")
        return FeatureStore(folder)

    # ------------------------------------------------------------------ sync
    def sync(self, folder_or_paths, workers: int | None = None, skip_errors: bool = False, *,
             progress: bool = False, add_root: bool = False, replace_root: bool = False,
             prune: bool = False, cluster=None) -> SyncReport:
        """Bring the index in line with a photo folder (or an explicit list of image paths).

        New and changed files (size, mtime, then content hash) are extracted and added, deleted files dropped,
        moved files recognised by content hash and renamed in the catalog without re-extraction. Unreadable
        files are recorded with status ``error`` and listed in the report of the run where they fail; unchanged,
        they are not retried (``SyncReport.failed_before``). ``skip_errors`` is accepted and ignored (the report
        says what failed). Everything is committed in one catalog transaction (module docstring); a sync stopped
        by an error commits nothing and its run is marked ``failed``. A folder sync follows the index's folders
        (:mod:`retrieval.app.index_roots`: ``add_root`` / ``replace_root`` for another folder); one that would
        remove more than half of the indexed images needs ``prune``. ``cluster``: a Dask client (:mod:`.cluster`).
        """
        with self._writer_lock():
            self._client = cluster
            try:
                return self._sync(folder_or_paths, workers, progress, add_root, replace_root, prune)
            except Exception:
                self.catalog.end_running_runs("failed")   # nothing was committed; the run must not stay 'running'
                raise
            finally:
                self._client = None

    def _sync(self, folder_or_paths, workers, progress, add_root, replace_root, prune) -> SyncReport:
        t0 = t_stage = time.perf_counter()
        roots = None
        if isinstance(folder_or_paths, (str, os.PathLike)):
            files, roots = self._folder_files(folder_or_paths, add_root, replace_root)
            source = str(Path(folder_or_paths).resolve())
            if not files:
                raise ValueError(f"photo folder {source!r} holds no images "
                                 f"({'/'.join(e[1:] for e in IMAGE_EXTENSIONS)}, hidden files skipped).")
        else:
            files = sorted({os.path.abspath(os.path.expanduser(str(p))) for p in folder_or_paths})
            source = f"{len(files)} paths"
            for p in files:
                if not os.path.isfile(p):
                    raise FileNotFoundError(f"image {p!r} does not exist.")
        report = SyncReport()
        run_id = self.catalog.start_run(source)
        gen, rows = self.catalog.snapshot()
        self._cleanup(keep=[gen])
        next_id = int(self.catalog.get_meta("next_id", 0))
        by_path = {r["path"]: r for r in rows}
        fileset = set(files)

        # 1. what changed: size + mtime first, the content hash only for candidates
        stats = {}
        candidates = []
        for p in files:
            try:
                stats[p] = file_stat(p)
            except OSError as exc:
                report.errors.append((p, f"cannot stat: {exc}"))
                continue
            r = by_path.get(p)
            same = r is not None and r["size"] == stats[p][0] and r["mtime"] == stats[p][1]
            if same and r["status"] == "indexed":
                report.unchanged += 1
            elif same and r["status"] == "error":
                report.failed_before += 1   # reported when it failed; listed by 'retrieval info'; not retried
            else:
                candidates.append(p)

        hashes = {}
        cb, close = progress_callback(progress and len(candidates) > 0, "hashing", len(candidates))
        for j, p in enumerate(candidates):
            try:
                hashes[p] = file_hash(p)
            except OSError as exc:
                report.errors.append((p, f"cannot read: {exc}"))
            if cb:
                cb(j + 1, len(candidates))
        close()
        gone = [r for r in rows if r["path"] not in fileset]
        gone_by_hash = {}
        for r in gone:
            if r["status"] == "indexed":
                gone_by_hash.setdefault(r["hash"], []).append(r)
        deletes, moves, to_add, touched, changed = [], [], [], [], set()
        for p in candidates:
            if p not in hashes:
                continue
            r = by_path.get(p)
            h = hashes[p]
            if r is not None and r["status"] == "indexed" and r["hash"] == h:
                touched.append((r["id"], p, stats[p][1]))  # same content, new mtime
                report.unchanged += 1
                continue
            if r is not None:
                deletes.append(r["id"])
                if r["status"] == "indexed":
                    changed.add(p)
            elif gone_by_hash.get(h):
                old = gone_by_hash[h].pop()
                moves.append((old["id"], p, stats[p][1]))
                report.moved += 1
                continue
            to_add.append(p)
        moved_ids = {m[0] for m in moves}
        for r in gone:
            if r["id"] not in moved_ids:
                deletes.append(r["id"])
                if r["status"] == "indexed":
                    report.removed += 1
        n_before = sum(r["status"] == "indexed" for r in rows)
        if report.removed > n_before / 2 and not prune:
            raise ValueError(f"this sync would remove {report.removed} of the {n_before} indexed images (their files "
                             f"are gone); nothing was changed: run again with --prune to confirm.")

        report.stage_seconds["scan"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 2. features (feature store: complete entries only; resumable)
        store, extractor = self.store, self.extractor
        key = extractor.config_key
        need = [p for p in to_add if (hashes[p], key) not in store]
        self._extract(need, hashes, store, extractor, workers, progress, report)
        failed = {p for p, _ in report.errors}
        report.changed = len(changed - failed)   # counted once indexed: an unreadable file is neither
        report.added = sum(p not in failed and p not in changed for p in to_add)

        report.stage_seconds["extract"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 3. the model
        backend = self._backend_for(gen, fallback=False)
        if not backend.trained and not self._use_generic_model(rows, to_add, failed, gen):
            self._train(backend, self._training_paths(rows, to_add, failed, hashes), progress, workers, report)
        backend = self._backend_for(gen, fallback=False)
        if self._backend is backend:
            self._backend = None  # the cached backend is about to be modified
        backend.remove(deletes)

        report.stage_seconds["train"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 4. encode and add
        new_rows, add_ids, add_paths = [], [], []
        for p in to_add:
            size, mtime = stats[p]
            row = {"id": next_id, "path": p, "hash": hashes[p], "size": size, "mtime": mtime}
            next_id += 1
            if p in failed:
                row.update(status="error", error=dict(report.errors)[p], n_features=None)
            else:
                row.update(status="indexed", error=None)
                add_ids.append(row["id"])
                add_paths.append(p)
            new_rows.append(row)
        feats = LazyFeatures(store, key, [hashes[p] for p in add_paths])
        cb, close = progress_callback(progress and len(add_ids) > 0, "encoding", len(add_ids))
        self._add(backend, np.asarray(add_ids, np.int64), feats, cb)
        close()
        for j, (row, p) in enumerate(zip([r for r in new_rows if r["status"] == "indexed"], add_paths, strict=True)):
            n_feat, (width, height) = feats.meta(j)
            try:
                orientation = image_meta(p)[2]
            except Exception:  # noqa: BLE001 - the header was readable at extraction; keep the default
                orientation = 1
            row.update(n_features=n_feat, width=width, height=height, orientation=orientation)

        report.stage_seconds["encode"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 5. the new generation, then ONE catalog transaction
        new_gen = gen + 1
        tmp = self.path / "gens" / f"{new_gen:08d}.tmp"
        final = self._gen_dir(new_gen)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        tmp.mkdir(parents=True)
        backend.save_state(tmp)
        write_manifest(tmp)
        fsync_dir(tmp)
        os.replace(tmp, final)
        fsync_dir(final.parent)
        crash_point("publish")  # the new generation exists but is not committed: it must be ignored
        stats_row = {"added": report.added, "changed": report.changed, "moved": report.moved,
                     "removed": report.removed, "errors": len(report.errors)}
        self.catalog.commit_sync(run_id=run_id, generation=new_gen, next_id=next_id, upserts=new_rows,
                                 deletes=deletes, moves=moves + touched, stats=stats_row,
                                 extra_meta=None if roots is None else {"roots": roots})
        crash_point("commit")
        self._backend, self._backend_gen = backend, new_gen
        self._cleanup(keep=[gen, new_gen])
        self.catalog.backup_to(self.path / CATALOG_BACKUP)
        report.generation = new_gen
        report.stage_seconds["commit"] = round(time.perf_counter() - t_stage, 3)
        report.seconds = time.perf_counter() - t0
        logger.info("sync: %d added, %d changed, %d moved, %d removed, %d unchanged, %d errors (%.1f s)",
                    report.added, report.changed, report.moved, report.removed, report.unchanged,
                    len(report.errors), report.seconds)
        return report

    # ------------------------------------------------------------------ remove
    def remove(self, paths: Sequence) -> int:
        """Drop images (paths or ids) from the index; returns how many were removed. Files are not touched."""
        with self._writer_lock():
            return self._remove(paths)

    def _remove(self, paths: Sequence) -> int:
        gen, rows = self.catalog.snapshot()
        by_path = {r["path"]: r for r in rows}
        by_id = {r["id"]: r for r in rows}
        ids = []
        for p in paths:
            r = by_id.get(int(p)) if (isinstance(p, int) or str(p).isdigit()) and int(p) in by_id else None
            r = r or by_path.get(os.path.abspath(os.path.expanduser(str(p))))
            if r is None:
                raise ValueError(f"{p!r} is not in the index (give an indexed path or id; see 'retrieval info').")
            ids.append(r["id"])
        if not ids:
            return 0
        run_id = self.catalog.start_run(f"remove {len(ids)}")
        backend = self._backend_for(gen, fallback=False)
        self._backend = None
        backend.remove(ids)
        new_gen = gen + 1
        tmp = self.path / "gens" / f"{new_gen:08d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(self._gen_dir(new_gen), ignore_errors=True)
        tmp.mkdir(parents=True)
        if backend.trained:
            backend.save_state(tmp)
        write_manifest(tmp)
        os.replace(tmp, self._gen_dir(new_gen))
        gone = [by_id[i]["path"] for i in ids]
        self.catalog.commit_sync(run_id=run_id, generation=new_gen,
                                 next_id=int(self.catalog.get_meta("next_id", 0)), upserts=[], deletes=ids,
                                 moves=[], stats={"removed": len(ids)},
                                 extra_meta={"excluded": sorted(set(self.excluded) | set(gone))})
        self._cleanup(keep=[gen, new_gen])
        self.catalog.backup_to(self.path / CATALOG_BACKUP)
        return len(ids)

    # ------------------------------------------------------------------ search
    def search(self, image, bbox=None, k: int = 10, method=None, rerank=None, query_expansion=None,
               **options) -> list[Hit]:
        """Ranked results for an image (indexed path or id, or any image file), optionally restricted to a box.

        Parameters
        ----------
        image : str, Path or int
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
        check_scalar(k, "k", "Index.search", low=1)
        with single_threaded_blas():   # small products: threads spinning on a busy machine cost 10-100x
            return self._search(image, bbox, k, method, rerank, query_expansion, options)

    def _search(self, image, bbox, k, method, rerank, query_expansion, options) -> list[Hit]:
        for attempt in range(5):
            snap = self.catalog.snapshot(reuse=self._snapshot)
            if snap is not self._snapshot:
                self._snapshot, self._by_id = snap, {r["id"]: r for r in snap[1]}
            gen = snap[0]
            try:
                backend = self._backend_for(gen) if gen else None
                break
            except FileNotFoundError:  # two syncs committed since our snapshot: take a fresh one
                if attempt == 4:
                    raise
                time.sleep(0.1)
        if gen == 0 and self._writer_active():
            raise ValueError(f"index {self.path} is being built by a running 'retrieval index': nothing is searchable "
                             f"before its first commit; query again when it has finished.")
        if gen == 0:
            raise ValueError(f"index {self.path} is empty: run 'retrieval index PHOTO_DIR --index {self.path}' first.")
        feats, qrow = self.query_features(image)
        feats, box = self._restrict_to_box(feats, bbox)
        by_id = self._by_id
        store, key = self.store, self.extractor.config_key

        def get_features(image_id):
            r = by_id[int(image_id)]
            f = store.get(r["hash"], key)
            if f is None:
                f = self.extractor(r["path"])
            return f

        def search(f, query_box=box, expansion=query_expansion, shortlist=None, n=k):
            return backend.search(f, k=n, query_box=query_box, method=method, rerank=rerank,
                                  get_features=get_features, query_expansion=expansion, shortlist=shortlist,
                                  **options)

        hits: list[Hit] = search(feats)
        s = backend.config.search
        if s.rotation_fallback and bbox is None and (rerank or s.rerank) == "spatial":
            hits = with_rotations(self, hits, image, qrow, by_id, k,
                                  lambda f, n: search(f, self._restrict_to_box(f, None)[1], 0, n, n))
        out = []
        for hit in hits:   # the backends build new hits for every search: completed in place
            r = by_id.get(hit.id)
            if r is None:  # not in this snapshot (cannot happen with a consistent generation)
                continue
            hit.rank, hit.path = len(out) + 1, r["path"]
            out.append(hit)
        return out

    def close(self) -> None:
        self.catalog.close()
