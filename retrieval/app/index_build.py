"""The writer of an index: :class:`Writer` runs one sync or one remove of :class:`retrieval.app.index.Index`.

A writer is created for one operation, under the index's writer lock, and is never shared. Its steps follow the
crash-safety contract of :mod:`retrieval.app.folder`: features go to the feature store one complete entry at a
time (crash point ``extract``), the model is trained and written to ``model.tmp/`` then renamed into ``model/``
(``train``: trained, not yet saved), the new images are encoded (``encode``: half of them), and the new
generation is made durable by the one :meth:`IndexFolder.publish <retrieval.app.folder.IndexFolder.publish>`.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.app.catalog import CatalogChanges
from retrieval.app.duplicate_codes import keep_codes
from retrieval.app.generic_models import generic_model, provenance
from retrieval.app.index_support import LazyFeatures, SyncReport, file_stat, image_meta, progress_callback
from retrieval.app.store_forms import compact_added, convert_store
from retrieval.core.persistence import crash_point
from retrieval.engine.presets import preset_config
from retrieval.features.image import IMAGE_EXTENSIONS
from retrieval.features.parallel import extract_many
from retrieval.features.store import file_hash

logger = logging.getLogger("retrieval.app.index")

PATH, ID, SIZE, MTIME, STATUS, HASH = range(6)
"""Positions in the tuples of :meth:`Catalog.scan <retrieval.app.catalog.Catalog.scan>` (``SCAN_COLUMNS``)."""


@dataclass
class Plan:
    """The changes a writer found (a sync's walk, or the files given to :meth:`Writer.add_files`)."""

    run_id: int
    gen: int
    next_id: int
    rows: list            # the catalog's rows as Catalog.scan tuples (training sample; empty when not read)
    to_add: list
    hashes: dict
    stats: dict
    deletes: list
    moves: list
    touched: list
    changed: set
    roots: list | None
    t0: float
    t_stage: float


def unchanged_counts(files: list, walked: dict, rows: list) -> tuple[int, int] | None:
    """``(indexed, failed before)`` when the walked ``files`` are exactly the catalog's ``rows`` (every path
    there, none other) with the size and mtime the catalog holds and every row settled (indexed, or failed
    before): what the full comparison of :meth:`Writer.sync` concludes for an unchanged folder, in one pass over
    the rows. None as soon as anything may differ (the full comparison then runs)."""
    if len(rows) != len(files) or len(walked) != len(files):
        return None
    indexed = failed = 0
    get = walked.get
    for r in rows:
        st = get(r[PATH])
        if st is None or st[0] != r[SIZE] or st[1] != r[MTIME]:
            return None
        if r[STATUS] == "indexed":
            indexed += 1
        elif r[STATUS] == "error":
            failed += 1
        else:
            return None
    return indexed, failed


class Writer:
    """One sync or remove of ``index`` (its folder, this thread's catalog connection, its store and extractor);
    ``client``: a Dask client that extracts and encodes on its workers (:mod:`retrieval.app.cluster`)."""

    def __init__(self, index, client=None, retrain: bool = False):
        self.index = index
        self.retrain = retrain
        self.folder = index.folder
        self.catalog = index.catalog
        self.preset = index.preset
        self.store = index.store
        self.extractor = index.extractor
        self.client = client

    # ------------------------------------------------------------------ sync
    def sync(self, folder_or_paths, workers, progress, add_root, replace_root, prune) -> SyncReport:
        t0 = t_stage = time.perf_counter()
        roots = None
        walked = {}   # (size, mtime) of each file, read by the walk
        if isinstance(folder_or_paths, (str, os.PathLike)):
            files, roots = self.index.folder_files(folder_or_paths, add_root, replace_root, walked)
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
        # every row as a tuple (path, id, size, mtime, status, hash): Catalog.scan, the one O(rows) read of a sync
        gen, rows = self.catalog.scan()
        next_id = int(self.catalog.get_meta("next_id", 0))
        same = unchanged_counts(files, walked, rows) if walked else None
        if same is not None:   # the common case of a large library, one pass over the rows: nothing to compare
            report.unchanged, report.failed_before = same
            report.stage_seconds["scan"] = round(time.perf_counter() - t_stage, 3)
            return self._apply(Plan(run_id=run_id, gen=gen, next_id=next_id, rows=rows, to_add=[], hashes={},
                                    stats={}, deletes=[], moves=[], touched=[], changed=set(), roots=roots, t0=t0,
                                    t_stage=time.perf_counter()), report, workers, progress)
        by_path = {r[PATH]: r for r in rows}
        fileset = set(files)

        # 1. what changed: size + mtime first, the content hash only for candidates
        stats = {}
        candidates = []
        for p in files:
            try:
                stats[p] = walked[p] if p in walked else file_stat(p)
            except OSError as exc:
                report.errors.append((p, f"cannot stat: {exc}"))
                continue
            r = by_path.get(p)
            same = r is not None and r[SIZE] == stats[p][0] and r[MTIME] == stats[p][1]
            if same and r[STATUS] == "indexed":
                report.unchanged += 1
            elif same and r[STATUS] == "error":
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
        gone = [r for r in rows if r[PATH] not in fileset]
        gone_by_hash = {}
        for r in gone:
            if r[STATUS] == "indexed":
                gone_by_hash.setdefault(r[HASH], []).append(r)
        deletes, moves, to_add, touched, changed = [], [], [], [], set()
        for p in candidates:
            if p not in hashes:
                continue
            r = by_path.get(p)
            h = hashes[p]
            if r is not None and r[STATUS] == "indexed" and r[HASH] == h:
                touched.append((r[ID], p, stats[p][1]))  # same content, new mtime
                report.unchanged += 1
                continue
            if r is not None:
                deletes.append(r[ID])
                if r[STATUS] == "indexed":
                    changed.add(p)
            elif gone_by_hash.get(h):
                old = gone_by_hash[h].pop()
                moves.append((old[ID], p, stats[p][1]))
                report.moved += 1
                continue
            to_add.append(p)
        moved_ids = {m[0] for m in moves}
        for r in gone:
            if r[ID] not in moved_ids:
                deletes.append(r[ID])
                if r[STATUS] == "indexed":
                    report.removed += 1
        n_before = sum(r[STATUS] == "indexed" for r in rows)
        if report.removed > n_before / 2 and not prune:
            raise ValueError(f"this sync would remove {report.removed} of the {n_before} indexed images (their files "
                             f"are gone); nothing was changed: run again with --prune to confirm.")

        report.stage_seconds["scan"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        return self._apply(Plan(run_id=run_id, gen=gen, next_id=next_id, rows=rows, to_add=to_add, hashes=hashes,
                                stats=stats, deletes=deletes, moves=moves, touched=touched, changed=changed,
                                roots=roots, t0=t0, t_stage=t_stage), report, workers, progress)

    def add_files(self, paths, workers, progress, root=None) -> SyncReport:
        """Index the image files ``paths`` (new or changed) without walking the folders the index follows nor
        reading every catalog row: each path is looked up by itself, so the cost is what is added (the server's
        upload). ``root``: a folder the index follows from now on (the uploads folder). A file whose content is
        indexed at another path is added as a new image (only a folder sync recognises moves)."""
        t0 = t_stage = time.perf_counter()
        files = sorted({os.path.abspath(os.path.expanduser(str(p))) for p in paths})
        for p in files:
            if not os.path.isfile(p):
                raise FileNotFoundError(f"image {p!r} does not exist.")
        gen = self.catalog.generation()
        if not gen:   # nothing indexed yet: the model is trained by a sync
            return self.sync(files, workers, progress, False, False, False)
        report = SyncReport()
        run_id = self.catalog.start_run(f"add {len(files)}")
        next_id = int(self.catalog.get_meta("next_id", 0))
        stats, hashes, to_add, deletes, touched, changed = {}, {}, [], [], [], set()
        for p in files:
            try:
                stats[p] = file_stat(p)
                r = self.catalog.row_by_path(p)
                if r is not None and (r["size"], r["mtime"]) == stats[p] and r["status"] in ("indexed", "error"):
                    report.unchanged += r["status"] == "indexed"
                    report.failed_before += r["status"] == "error"
                    continue
                hashes[p] = file_hash(p)
            except OSError as exc:
                report.errors.append((p, f"cannot read: {exc}"))
                continue
            if r is not None and r["status"] == "indexed" and r["hash"] == hashes[p]:
                touched.append((r["id"], p, stats[p][1]))
                report.unchanged += 1
                continue
            if r is not None:
                deletes.append(r["id"])
                if r["status"] == "indexed":
                    changed.add(p)
            to_add.append(p)
        roots = self.index.roots
        new_roots = None
        if root is not None:
            root = str(Path(root).resolve())
            new_roots = roots if root in roots else [*roots, root]
        return self._apply(Plan(run_id=run_id, gen=gen, next_id=next_id, rows=[], to_add=to_add, hashes=hashes,
                                stats=stats, deletes=deletes, moves=[], touched=touched, changed=changed,
                                roots=new_roots, t0=t0, t_stage=t_stage), report, workers, progress)

    def _apply(self, plan: Plan, report: SyncReport, workers, progress) -> SyncReport:
        """Steps 2 to 5 of a sync (module docstring) for the changes of ``plan``."""
        run_id, gen, next_id, rows, to_add, hashes = (plan.run_id, plan.gen, plan.next_id, plan.rows, plan.to_add,
                                                      plan.hashes)
        stats, deletes, moves, touched, changed, roots = (plan.stats, plan.deletes, plan.moves, plan.touched,
                                                          plan.changed, plan.roots)
        t0, t_stage = plan.t0, plan.t_stage
        # 2. features (feature store: complete entries only; resumable)
        store, key = self.store, self.extractor.config_key
        need = [p for p in to_add if not store.has_full(hashes[p], key)]   # the encoders read the exact features
        self.extract(need, hashes, workers, progress, report)
        failed = {p for p, _ in report.errors}
        report.changed = len(changed - failed)   # counted once indexed: an unreadable file is neither
        report.added = sum(p not in failed and p not in changed for p in to_add)

        report.stage_seconds["extract"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        if gen and not (to_add or deletes or moves or touched or self.retrain):   # only the run is recorded
            self.catalog.finish_run(run_id, stats={"added": 0, "changed": 0, "moved": 0, "removed": 0,
                                                   "errors": len(report.errors)},
                                    extra_meta=None if roots is None else {"roots": roots})
            report.generation = gen
            report.seconds = time.perf_counter() - t0
            logger.info("sync: nothing changed (%d unchanged, %.1f s)", report.unchanged, report.seconds)
            return report
        self.folder.cleanup(keep=[gen])   # leftovers of an interrupted writer, older generations
        # 3. the model
        backend = self.folder.load_backend(gen, fallback=False)
        if not backend.trained:
            if not self.use_generic_model(rows, to_add, failed):
                self.train(backend, self.training_paths(rows, to_add, failed, hashes), progress, workers, report)
            backend = self.folder.load_backend(gen, fallback=False)
        backend.remove(deletes)
        if self.retrain and not backend.plan_compaction(merge_all=True, retrain=True):
            raise ValueError(f"--retrain: preset {self.preset['name']!r} has no trained part kept with the "
                             f"collection (its model is retrained by building a new index).")

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
        self.add(backend, np.asarray(add_ids, np.int64), feats, cb)
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
        compacted = compact_added(self.index, [hashes[p] for p in add_paths], rows)
        report.stage_seconds["encode"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 5. the new generation, then ONE catalog transaction (IndexFolder.publish)
        stats_row = {"added": report.added, "changed": report.changed, "moved": report.moved,
                     "removed": report.removed, "errors": len(report.errors)}
        new_gen = self.folder.publish(self.catalog, backend, CatalogChanges(
            run_id=run_id, next_id=next_id, upserts=new_rows, deletes=deletes, moves=moves + touched, stats=stats_row,
            extra_meta=None if roots is None else {"roots": roots}), after=gen)
        report.generation = new_gen
        report.stage_seconds["commit"] = round(time.perf_counter() - t_stage, 3)
        t_stage = time.perf_counter()
        # 6. the duplicate finder's codes of the photos added (retrieval.app.duplicate_codes; a cache)
        try:
            keep_codes(self.folder.path, store, key, [hashes[p] for p in add_paths])
        except OSError as exc:   # a cache: the duplicates run encodes what is missing
            logger.warning("%s: the duplicate codes of the photos added were not kept (%s); 'retrieval duplicates' "
                           "will compute them", self.folder.path, exc)
        if compacted and self.index.owns_store:   # 7. the full features of the photos compacted (a store given at
            store.drop_full(key, compacted)         # creation keeps them)
        report.stage_seconds["codes"] = round(time.perf_counter() - t_stage, 3)
        report.seconds = time.perf_counter() - t0
        logger.info("sync: %d added, %d changed, %d moved, %d removed, %d unchanged, %d errors (%.1f s)",
                    report.added, report.changed, report.moved, report.removed, report.unchanged,
                    len(report.errors), report.seconds)
        return report

    # ------------------------------------------------------------------ remove
    def remove(self, paths) -> int:
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
        run_id = self.catalog.start_run(f"remove {len(ids)}")
        backend = self.folder.load_backend(gen, fallback=False)
        backend.remove(ids)
        self.folder.publish(self.catalog, backend, CatalogChanges(
            run_id=run_id, next_id=int(self.catalog.get_meta("next_id", 0)), deletes=ids, stats={"removed": len(ids)},
            extra_meta={"excluded": sorted(set(self.index.excluded) | set(gone))}), after=gen)
        return len(ids)

    # ------------------------------------------------------------------ compact
    def compact(self, retrain: bool = False) -> dict:
        """Merge every segment of the committed generation into one, dropping deleted rows (and train the IVFADC
        quantiser again with ``retrain``), published as a new generation. ``{"generation", "segments_before",
        "segments_after", "images", "seconds"}``; ``segments_before`` None for a backend without segments
        (nothing is written then)."""
        t0 = time.perf_counter()
        gen = self.catalog.generation()
        out = {"generation": gen, "segments_before": None, "segments_after": None, "images": 0, "seconds": 0.0,
               "features": {"compact": 0, "full_dropped": 0}}
        if not gen:
            return out
        out["features"] = convert_store(self.index)
        self.folder.cleanup(keep=[gen])
        backend = self.folder.load_backend(gen, fallback=False)
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

    # ------------------------------------------------------------------ steps
    def extract(self, paths, hashes, workers, progress, report) -> None:
        """Features of ``paths`` into the feature store (failures recorded in ``report``)."""
        if not paths:
            return
        store, extractor = self.store, self.extractor
        cb, close = progress_callback(progress, "extracting", len(paths))
        if self.client is not None:   # workers write the store (retrieval.app.cluster)
            from retrieval.app.cluster import extract_on_cluster

            results = extract_on_cluster(self.client, paths, [hashes[p] for p in paths], store, extractor)
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

    def add(self, backend, ids, feats, progress) -> None:
        """``backend.add``, passing the ``encode`` crash point once more than half the images are encoded; on a cluster, a global
        backend's vectors are encoded by the workers (:func:`retrieval.app.cluster.encode_on_cluster`), which also
        record each image's feature count and size in ``feats`` (the client then reads no feature)."""
        if len(ids) == 0:
            return
        if self.client is not None and (backend.encodes_vectors or backend.kind == "object"):
            from retrieval.app.cluster import encode_on_cluster

            V, meta = encode_on_cluster(self.client, self.preset, self.folder.model_dir, feats.store, feats.key,
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

    def use_generic_model(self, rows, to_add, failed) -> bool:
        """Import the generic model (:mod:`retrieval.app.generic_models`) when the index's training policy asks
        for it; True when it did (the caller then loads it instead of training)."""
        policy = self.catalog.get_meta("train_on") or "collection"   # indexes made before the policy existed
        if policy == "collection" or self.catalog.get_meta("train_images"):
            return False
        info = provenance(self.preset)
        if info is None:
            if policy == "generic":
                raise ValueError(f"no generic model for preset {self.preset['name']!r} as configured (none was built, "
                                 f"or its model-shaping keys differ from the built model's); use --train-on "
                                 f"collection.")
            return False
        n = sum(r[STATUS] == "indexed" for r in rows) + sum(p not in failed for p in to_add)   # rows: Catalog.scan
        if policy == "auto" and n >= int(info["use_below"]):
            return False
        meta = self.folder.import_model(generic_model(self.preset))
        self.catalog.set_meta(model={**meta, "generic": True,
                                     "imported": f"generic model of preset {self.preset['name']!r}"})
        logger.info("model: the generic model of preset %r (trained on %s), the collection having %d images",
                    self.preset["name"], info["trained_on"], n)
        return True

    def training_paths(self, rows, to_add, failed, hashes) -> list[tuple[str, str]]:
        """(path, hash) of the training images: ``train_images`` or a seeded sample of the collection."""
        explicit = self.catalog.get_meta("train_images")
        if explicit:
            return [(p, file_hash(p)) for p in explicit]
        pool = {h: p for p, _, _, _, status, h in rows if status == "indexed"}   # rows: Catalog.scan tuples
        pool.update({hashes[p]: p for p in to_add if p not in failed})
        if not pool:
            raise ValueError("no readable image to train the model on.")
        tr = preset_config(self.preset).training
        order = sorted(pool)  # by content hash: independent of names and of the walk order
        rng = np.random.default_rng(tr.random_state)
        n = min(len(order), tr.max_images)
        pick = sorted(rng.choice(len(order), n, replace=False)) if n < len(order) else range(len(order))
        return [(pool[order[i]], order[i]) for i in pick]

    def train(self, backend, train_paths, progress, workers, report) -> None:
        """Train ``backend``'s model on ``train_paths`` and write it to ``model/`` (through ``model.tmp/``)."""
        key = self.extractor.config_key
        need = [p for p, h in train_paths if (h, key) not in self.store]
        self.extract(need, dict(train_paths), workers, progress, report)
        ok = [(p, h) for p, h in train_paths if (h, key) in self.store]
        cb, close = progress_callback(progress, "training", 3, unit="step")
        feats = LazyFeatures(self.store, key, [h for _, h in ok])
        backend.train(lambda i: feats[i], len(ok), progress=cb)
        close()
        crash_point("train")
        info = {"preset": self.preset["name"], "preset_version": self.preset["version"], "id": uuid.uuid4().hex[:12],
                "trained_on": len(ok)}
        self.folder.write_model(backend, info)
        meta = {"id": info["id"], "trained_on": len(ok)}
        if backend.effective:
            meta["effective"] = dict(backend.effective)
        self.catalog.set_meta(model=meta)
        report.trained = True
