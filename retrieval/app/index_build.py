"""The one writer of an index: :class:`Writer` makes every change to an index folder.

Every write goes through a :class:`Writer`: a sync of the followed folders, an add of given files (the server's
upload), a remove, a merge of segments (``retrieval compact``), the repair of a damaged generation (``check
--repair``), a model imported from another index, and the lists of followed and excluded paths. Each operation
takes the index's writer lock (:meth:`IndexFolder.writer_lock <retrieval.app.folder.IndexFolder.writer_lock>`)
for its whole duration, and a new generation is made durable only by the one :meth:`IndexFolder.publish
<retrieval.app.folder.IndexFolder.publish>`, called from here alone.

A writer is built from the parts it needs (the index folder, a catalog connection, the feature store, the
extractor), never from :class:`retrieval.app.index.Index`; ``on_change`` is told when the model changes under the
searchers (an imported model, a repair), so that the next search loads them again.

Crash safety, step by step: the committed generation is loaded (a damaged one is refused before anything is
written) and only then are the leftovers of an interrupted writer removed; features go to the feature store one
complete entry at a time (crash point ``extract``), the model is trained and written to ``model.tmp/`` then
installed as ``model/`` with its verified copy ``model.backup/`` (``train``: trained, not yet saved; ``model``: the
copy in place, not the model), the new images are encoded (``encode``: half of them), and the new generation is
made durable by the publish. What a write changes is found first by reading only (:mod:`retrieval.app.write_plan`);
the model of a first sync is the generic one or trained (:mod:`retrieval.app.write_model`).

Faults: a write either completes or leaves nothing. Before the commit, an error (a full disk, a read-only file
system, no permission, an I/O error) is raised after the publish has removed what it wrote; the catalog rows and
the generation are untouched (the model a failed first sync installed is taken back). After the commit nothing is
raised: the removal of old generations, the catalog copy, the duplicate codes and the compacted features are logged
when they fail. A read-only index refuses every write at once (:class:`retrieval.app.read_only.IndexReadOnly`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from retrieval.app import index_roots, model_repair
from retrieval.app.catalog import CatalogChanges
from retrieval.app.duplicates.codes import keep_codes
from retrieval.app.index_support import (
    LazyFeatures,
    SyncReport,
    image_meta,
    progress_callback,
    skipped_summary,
)
from retrieval.app.store_forms import check_compact_features, compact_added, convert_store, evidence_added
from retrieval.app.write_model import (
    model_record,
    train_model,
    training_paths,
    training_record,
    use_generic_model,
)
from retrieval.app.write_plan import Plan, given_files, plan_add, plan_sync
from retrieval.core.checks import ParamError
from retrieval.core.persistence import crash_point
from retrieval.features.image import IMAGE_EXTENSIONS
from retrieval.features.parallel import extract_many

logger = logging.getLogger("retrieval.app.index")


class Writer:
    """Every change to one index folder (module docstring).

    Parameters
    ----------
    folder : IndexFolder — the layout, the writer lock, the model and the generations (and the preset)
    catalog : Catalog — the catalog connection of the calling thread
    store : FeatureStore — the feature store
    extractor : FeatureExtractor — the index's extractor (its ``config_key`` names the stored features)
    owns_store : bool — the store is the index's own (``<index>/features``): features it no longer needs in full
        are dropped from it (:mod:`retrieval.app.store_forms`)
    on_change : callable or None — called after the model or a generation was replaced outside a sync (the
        searchers loaded before are dropped)
    """

    def __init__(self, folder, catalog, store, extractor, *, owns_store: bool, on_change: Callable | None = None):
        self.folder = folder
        self.catalog = catalog
        self.store = store
        self.extractor = extractor
        self.owns_store = bool(owns_store)
        self.on_change = on_change or (lambda: None)
        self.preset = folder.preset

    # ------------------------------------------------------------------ what the catalog says
    @property
    def compact_features(self) -> int:
        """Bytes of a stored descriptor's codes when the index keeps its features in compact form, else 0."""
        return int(self.catalog.get_meta("compact_features") or 0)

    @property
    def roots(self) -> list[str]:
        """The folders this index follows (absolute paths), in the order they were added."""
        return list(self.catalog.get_meta("roots") or [])

    @property
    def excluded(self) -> list[str]:
        """Paths removed with :meth:`remove`: later syncs leave them out."""
        return list(self.catalog.get_meta("excluded") or [])

    @contextmanager
    def _locked_run(self):
        """The writer lock for one operation that records a run; a failure marks the run ``failed`` (nothing was
        committed: the run must not stay ``running``) and is raised again -- itself, even when the run cannot be
        marked (a full disk: the next run marks it ``interrupted``)."""
        with self.folder.writer_lock(), self.catalog.failed_on_error(self.folder.path):
            yield

    # ------------------------------------------------------------------ followed and excluded paths
    def include(self, paths) -> list[str]:
        """Take removed paths back (the next sync indexes them); returns those that were excluded."""
        wanted = {os.path.abspath(os.path.expanduser(str(p))) for p in paths}
        with self.folder.writer_lock():
            excluded = self.excluded
            back = [p for p in excluded if p in wanted]
            self.catalog.set_meta(excluded=[p for p in excluded if p not in wanted])
        return back

    def exclude(self, paths) -> list[str]:
        """Keep paths out of later syncs without touching the index (the list :meth:`remove` adds to, which
        :meth:`include` takes paths back from): for files that are not indexed, such as duplicates moved into a
        folder the index follows; returns those newly excluded."""
        wanted = {os.path.abspath(os.path.expanduser(str(p))) for p in paths}
        with self.folder.writer_lock():
            excluded = self.excluded
            new = sorted(wanted.difference(excluded))
            if new:
                self.catalog.set_meta(excluded=sorted(set(excluded) | wanted))
        return new

    def import_model(self, src) -> None:
        """Use the trained model of another index (its folder or its ``model/``) instead of training: only before
        the first generation (a generation is encoded with the model it was published with). The model and its
        verified copy are installed, then the catalog records it; when the record cannot be written, the model is
        taken back (nothing is kept)."""
        with self.folder.writer_lock():
            if self.catalog.generation():
                raise ValueError(f"{self.folder.path}: the index has generations encoded with its own model; "
                                 f"index the photos into a new folder with '--model {src}'.")
            meta = self.folder.import_model(Path(src))
            try:
                self.catalog.set_meta(model=meta)
            except BaseException:
                self.folder.remove_model()
                raise
        self.on_change()

    # ------------------------------------------------------------------ sync and add
    def sync(self, folder_or_paths, workers: int | None = None, *, progress: bool = False, add_root: bool = False,
             replace_root: bool = False, prune: bool = False, cluster=None, retrain: bool = False) -> SyncReport:
        """Bring the index in line with a photo folder (or an explicit list of image paths).

        New and changed files (size, mtime, then content hash) are extracted and added, deleted files dropped,
        moved files recognised by content hash and renamed in the catalog without re-extraction. Unreadable
        files are recorded with status ``error`` and listed in the report of the run where they fail; unchanged,
        they are not retried (``SyncReport.failed_before``). Everything is committed in one catalog transaction
        (module docstring); a sync stopped by an error commits nothing and its run is marked ``failed``. A folder sync follows the index's folders
        (:mod:`retrieval.app.index_roots`: ``add_root`` / ``replace_root`` for another folder); one that would
        remove more than half of the indexed images needs ``prune``. ``cluster``: a Dask client (:mod:`.cluster`).
        A sync that changes nothing writes no generation (only its run record). ``retrain``: train the IVFADC
        quantiser of the searchable state again (:mod:`retrieval.engine.segments`).
        """
        with self._locked_run():
            return self._sync(folder_or_paths, workers, progress, add_root, replace_root, prune, cluster, retrain)

    def _sync(self, folder_or_paths, workers, progress, add_root, replace_root, prune, cluster, retrain
              ) -> SyncReport:
        t0 = time.perf_counter()
        roots = None
        walked = {}   # (size, mtime) of each file, read by the walk
        skipped = {}   # the other files of the walk, and why they are not indexed
        if isinstance(folder_or_paths, (str, os.PathLike)):
            files, roots = index_roots.folder_files(self.folder.path, self.roots, self.excluded, folder_or_paths,
                                                    add_root, replace_root, walked, skipped)
            source = str(Path(folder_or_paths).resolve())
            if not files:
                more = skipped_summary(skipped.items())
                raise ValueError(f"photo folder {source!r} holds no images "
                                 f"({'/'.join(e[1:] for e in IMAGE_EXTENSIONS)}, hidden files skipped)"
                                 + (f"; {more}" if more else "") + ".")
        else:
            files = given_files(folder_or_paths)
            source = f"{len(files)} paths"
        report = SyncReport(skipped=sorted(skipped.items()))
        plan = plan_sync(self.catalog, files, walked, roots, source, prune=prune, progress=progress, report=report,
                         t0=t0)
        return self._apply(plan, report, workers, progress, cluster, retrain)

    def add(self, paths, *, root=None, workers: int | None = 1, progress: bool = False, include=()) -> SyncReport:
        """Index the image files ``paths`` (new or changed) without walking the followed folders nor reading every
        catalog row: the cost is what is added (:func:`retrieval.app.write_plan.plan_add`); ``root``: a folder to
        follow from now on (the server's uploads folder). The paths added, and ``include`` (paths to take back
        from the excluded ones), are no longer excluded from syncs -- in the same commit, so that a failed add
        changes nothing. Before any model exists, this is a sync of ``paths``."""
        with self._locked_run():
            t0 = time.perf_counter()
            files = given_files(paths)
            if not self.catalog.generation():   # nothing indexed yet: the model is trained by a sync
                return self._sync(files, workers, progress, False, False, False, None, False)
            new_roots = None
            if root is not None:
                roots, root = self.roots, str(Path(root).resolve())
                new_roots = roots if root in roots else [*roots, root]
            report = SyncReport()
            plan = plan_add(self.catalog, files, new_roots, report=report, t0=t0)
            back = set(files) | {os.path.abspath(os.path.expanduser(str(p))) for p in include}
            excluded = self.excluded
            if back.intersection(excluded):
                plan.extra_meta["excluded"] = [p for p in excluded if p not in back]
            return self._apply(plan, report, workers, progress, None, False)

    def _apply(self, plan: Plan, report: SyncReport, workers, progress, cluster, retrain) -> SyncReport:
        """Steps 2 to 7 of a sync (module docstring) for the changes of ``plan``. A failure before the commit
        leaves nothing: the generation and catalog rows are untouched (:meth:`IndexFolder.publish
        <retrieval.app.folder.IndexFolder.publish>`), and the model a first sync installed is taken back."""
        had_model = (self.folder.model_dir / "model.json").exists()
        try:
            return self._apply_steps(plan, report, workers, progress, cluster, retrain)
        except BaseException:
            if not plan.gen and not had_model and self.folder.committed_generation(self.catalog) == 0:
                self.folder.remove_model()   # installed by this first sync, referenced by nothing
            raise

    def _apply_steps(self, plan: Plan, report: SyncReport, workers, progress, cluster, retrain) -> SyncReport:
        gen, rows, to_add, hashes, stats = plan.gen, plan.rows, plan.to_add, plan.hashes, plan.stats
        deletes, moves, touched, changed, roots = plan.deletes, plan.moves, plan.touched, plan.changed, plan.roots
        next_id, t_stage = plan.next_id, plan.t_stage
        extra_meta = dict(plan.extra_meta)
        if roots is not None:
            extra_meta["roots"] = roots
        # the committed generation loads intact before anything is written (a damaged one is refused: building on
        # an older state would lose what the catalog says is indexed); then the leftovers of an interrupted writer
        backend = self.folder.load_backend(gen, fallback=False)
        self.folder.clear_leftovers(gen)
        # 2. features (feature store: complete entries only; resumable)
        store, key = self.store, self.extractor.config_key
        need = [p for p in to_add if not store.has_full(hashes[p], key)]   # the encoders read the exact features
        self.extract(need, hashes, workers, progress, report, cluster)
        failed = {p for p, _ in report.errors}
        report.changed = len(changed - failed)   # counted once indexed: an unreadable file is neither
        report.added = sum(p not in failed and p not in changed for p in to_add)

        report.stage_seconds["extract"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        if gen and not (to_add or deletes or moves or touched or retrain):   # only the run is recorded
            self.catalog.finish_run(plan.run_id, stats={"added": 0, "changed": 0, "moved": 0, "removed": 0,
                                                        "errors": len(report.errors)}, extra_meta=extra_meta or None)
            report.generation = gen
            report.seconds = time.perf_counter() - plan.t0
            logger.info("sync: nothing changed (%d unchanged, %.1f s)", report.unchanged, report.seconds)
            return report
        # 3. the model (its catalog record committed with the generation)
        if not backend.trained:
            installed = use_generic_model(self.catalog, self.folder, self.preset, rows, to_add, failed)
            if installed is None:
                installed = train_model(self, backend, training_paths(self.catalog, backend.config, rows, to_add,
                                                                      failed, hashes), progress, workers, report)
            extra_meta["model"] = installed
            backend = self.folder.load_backend(gen, fallback=False)
        elif not gen and self.catalog.get_meta("model") is None:   # installed by a first sync killed before its commit
            extra_meta["model"] = model_record(self.folder.model_dir)
        if not gen and backend.trained:
            training = training_record(self.folder.model_dir)
            if training is not None:
                extra_meta["model_training"] = training
        backend.remove(deletes)
        if retrain and not backend.plan_compaction(merge_all=True, retrain=True):
            raise ParamError("retrain", True, template="{retrain}: preset {preset!r} has no trained part kept with the "
                             "collection (its model is retrained by building a new index).", preset=self.preset["name"])

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
        self.encode(backend, np.asarray(add_ids, np.int64), feats, cb, cluster)
        close()
        for j, (row, p) in enumerate(zip([r for r in new_rows if r["status"] == "indexed"], add_paths, strict=True)):
            n_feat, (width, height) = feats.meta(j)
            try:
                orientation = image_meta(p)[2]
            except Exception:  # noqa: BLE001 - the header was readable at extraction; keep the default
                orientation = 1
            row.update(n_features=n_feat, width=width, height=height, orientation=orientation)

        # 4b. the compact form the verification reads (retrieval.features.compact), written before the photos
        # are published so that a published photo is always verified the same
        compacted = compact_added(self, [hashes[p] for p in add_paths], rows)
        # 4c. the verification evidence (search.verify_on evidence: retrieval.rerank.evidence), written before the
        # photos are published for the same reason
        evidence = getattr(backend.verifier, "evidence", None)
        if evidence is not None:
            evidence_added(store, key, evidence, [hashes[p] for p in add_paths])
        report.stage_seconds["encode"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 5. the new generation, then ONE catalog transaction (IndexFolder.publish; nothing raises after its commit)
        stats_row = {"added": report.added, "changed": report.changed, "moved": report.moved,
                     "removed": report.removed, "errors": len(report.errors)}
        new_gen = self.folder.publish(self.catalog, backend, CatalogChanges(
            run_id=plan.run_id, next_id=next_id, upserts=new_rows, deletes=deletes, moves=moves + touched,
            stats=stats_row, extra_meta=extra_meta or None), after=gen)
        report.generation = new_gen
        report.stage_seconds["commit"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 6. the duplicate finder's codes of the photos added (retrieval.app.duplicates.codes; a cache) and 7. the
        # full features of the photos compacted (a store given at creation keeps them): the photos are committed,
        # so a failure here is logged, never raised
        try:
            keep_codes(self.folder.path, store, key, [hashes[p] for p in add_paths])
        except Exception as exc:  # noqa: BLE001 - a cache: the duplicates run encodes what is missing
            logger.warning("%s: the duplicate codes of the photos added were not kept (%s); 'retrieval duplicates' "
                           "will compute them", self.folder.path, exc)
        if compacted and self.owns_store:
            try:
                store.drop_full(key, compacted)
            except Exception as exc:  # noqa: BLE001 - the photos are committed; the full features stay
                logger.warning("%s: the full features of the photos compacted were not dropped (%s); 'retrieval "
                               "compact' drops them", self.folder.path, exc)
        report.stage_seconds["codes"] = round(time.perf_counter() - t_stage, 3)
        report.seconds = time.perf_counter() - plan.t0
        logger.info("sync: %d added, %d changed, %d moved, %d removed, %d unchanged, %d errors (%.1f s)",
                    report.added, report.changed, report.moved, report.removed, report.unchanged,
                    len(report.errors), report.seconds)
        return report

    # ------------------------------------------------------------------ remove
    def remove(self, paths, *, exclude=()) -> int:
        """Drop images (paths or ids) from the index; returns how many were removed. Files are not touched; the
        paths are excluded from later syncs (:meth:`include` takes them back), and so are the paths ``exclude``
        (files that are not indexed: duplicates moved into a followed folder), in the same commit."""
        with self._locked_run():
            gen = self.catalog.generation()   # under the writer lock: no other commit until this one
            ids, gone = [], []
            for p in paths:   # each looked up by id, then by path (the catalog's indexes)
                key = int(p) if isinstance(p, (int, np.integer)) or str(p).isdigit() else None
                r = self.catalog.row_by_id(key) if key is not None else None
                r = r or self.catalog.row_by_path(os.path.abspath(os.path.expanduser(str(p))))
                if r is None:
                    raise ValueError(f"{p!r} is not in the index (give an indexed path or id; see 'retrieval info').")
                ids.append(r["id"])
                gone.append(r["path"])
            if not ids:
                return 0
            backend = self.folder.load_backend(gen, fallback=False)   # intact before anything is changed
            self.folder.clear_leftovers(gen)
            run_id = self.catalog.start_run(f"remove {len(ids)}")
            backend.remove(ids)
            self.folder.publish(self.catalog, backend, CatalogChanges(
                run_id=run_id, next_id=int(self.catalog.get_meta("next_id", 0)), deletes=ids,
                stats={"removed": len(ids)}, extra_meta={"excluded": sorted(set(self.excluded) | set(gone) | {
                    os.path.abspath(os.path.expanduser(str(p))) for p in exclude})}),
                after=gen)
            return len(ids)

    # ------------------------------------------------------------------ compact
    def compact(self, retrain: bool = False, compact_features: int | None = None) -> dict:
        """Merge every segment of the committed generation into one, dropping deleted rows (and train the IVFADC
        quantiser again with ``retrain``), published as a new generation; ``compact_features``: keep the features
        in this form from now on, the store converted (:mod:`retrieval.app.store_forms`). ``{"generation",
        "segments_before", "segments_after", "images", "seconds", "features"}``; ``segments_before`` None for a
        backend without segments (nothing is written then)."""
        with self._locked_run():
            if compact_features is not None:
                self.catalog.set_meta(compact_features=check_compact_features(compact_features))
            t0 = time.perf_counter()
            gen = self.catalog.generation()
            out = {"generation": gen, "segments_before": None, "segments_after": None, "images": 0, "seconds": 0.0,
                   "features": {"compact": 0, "full_dropped": 0}}
            if not gen:
                return out
            backend = self.folder.load_backend(gen, fallback=False)   # intact before anything is changed
            self.folder.clear_leftovers(gen)
            out["features"] = convert_store(self)
            info = backend.segment_info()
            if info is None or not backend.plan_compaction(merge_all=True, retrain=retrain):
                return out
            run_id = self.catalog.start_run("compact")
            new_gen = self.folder.publish(self.catalog, backend, CatalogChanges(
                run_id=run_id, next_id=int(self.catalog.get_meta("next_id", 0))), after=gen)
            after = backend.segment_info()
            out.update(generation=new_gen, segments_before=info["segments"], segments_after=after["segments"],
                       images=after["live"], seconds=round(time.perf_counter() - t0, 3))
            return out

    # ------------------------------------------------------------------ repair
    def repair(self, report: dict) -> dict:
        """``check --repair`` after :func:`retrieval.app.integrity.check_index` gave ``report``: a damaged model
        restored from its verified copy (or made again), a damaged or missing committed generation rebuilt from the
        model and the feature store and published like any other, damaged older generations removed once the
        committed one loads intact (:func:`retrieval.app.model_repair.repair`). Returns ``{"repaired": [...],
        "could_not": [...]}``."""
        return model_repair.repair(self, report)

    # ------------------------------------------------------------------ steps
    def extract(self, paths, hashes, workers, progress, report, cluster=None) -> None:
        """Features of ``paths`` into the feature store (failures recorded in ``report``); ``cluster``: a Dask
        client whose workers extract and write the store (:mod:`retrieval.app.cluster`)."""
        if not paths:
            return
        store, extractor = self.store, self.extractor
        cb, close = progress_callback(progress, "extracting", len(paths))
        if cluster is not None:
            from retrieval.app.cluster import extract_on_cluster

            results = extract_on_cluster(cluster, paths, [hashes[p] for p in paths], store, extractor)
        else:
            results = extract_many(paths, extractor, workers=workers)
        done = 0
        for i, res in results:
            p = paths[i]
            if isinstance(res, Exception):
                reason = getattr(res, "reason", None) or str(res)
                report.errors.append((p, reason))
                logger.debug("cannot read %s: %s", p, reason)   # the report lists it (printed once by the CLI)
            elif res is not None:
                store.put(hashes[p], res, extractor.config_key)
            done += 1
            if done == 1 or done == len(paths) // 2:
                crash_point("extract")
            if cb:
                cb(done, len(paths))
        close()

    def encode(self, backend, ids, feats, progress, cluster=None) -> None:
        """``backend.add``, passing the ``encode`` crash point once more than half the images are encoded; on a
        cluster, a global backend's vectors are encoded by the workers
        (:func:`retrieval.app.cluster.encode_on_cluster`), which also record each image's feature count and size in
        ``feats`` (the client then reads no feature)."""
        if len(ids) == 0:
            return
        if cluster is not None and (backend.encodes_vectors or backend.kind == "object"):
            from retrieval.app.cluster import encode_on_cluster

            V, meta = encode_on_cluster(cluster, self.preset, self.folder.model_dir, feats.store, feats.key,
                                        feats.hashes, progress=progress)
            feats.record(meta)
            if backend.kind == "object":   # the images' words, frames and signatures, added as they are
                backend.add_encoded(ids, {int(i): e[0] for i, e in zip(ids, V, strict=True)}, [e[1] for e in V])
            else:
                backend.add_vectors(ids, V)
            return
        half = len(ids) // 2
        passed = []

        def step(done, total):   # after each chunk: the encode crash point once half the images are encoded
            if progress:
                progress(done, total)
            if done > half and not passed:
                passed.append(True)
                crash_point("encode")

        backend.add(ids, feats, progress=step)
