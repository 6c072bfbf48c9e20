"""The extraction and training steps of :meth:`retrieval.app.index.Index.sync` (a mixin of :class:`Index`).

Moved out of ``index.py`` unchanged; the crash-safety contract is described in that module's docstring: features
go to the feature store one complete entry at a time, the model is trained into ``model.tmp/`` and renamed into
``model/`` when complete.
"""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np

from retrieval.app.generic_models import generic_model, provenance
from retrieval.app.index_support import LazyFeatures, progress_callback
from retrieval.app.integrity import write_manifest
from retrieval.core.persistence import crash_point, fsync_dir, write_json_atomic
from retrieval.engine.presets import preset_config
from retrieval.features.parallel import extract_many
from retrieval.features.store import file_hash

logger = logging.getLogger("retrieval.app.index")


class IndexBuildMixin:
    """Extraction into the feature store, choice of the training images, training of the preset's model."""

    def _extract(self, paths, hashes, store, extractor, workers, progress, report) -> None:
        if not paths:
            return
        cb, close = progress_callback(progress, "extracting", len(paths))

        if getattr(self, "_client", None) is not None:   # workers write the store (retrieval.app.cluster)
            from retrieval.app.cluster import extract_on_cluster

            results = extract_on_cluster(self._client, paths, [hashes[p] for p in paths], store, extractor)
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

    def _add(self, backend, ids, feats, progress) -> None:
        """``backend.add``; on a cluster, a global backend's vectors are encoded by the workers
        (:func:`retrieval.app.cluster.encode_on_cluster`), which also record each image's feature count and size
        in ``feats`` (the client then reads no feature)."""
        from retrieval.app.shards import ShardedBackend
        from retrieval.engine.global_backend import GlobalBackend

        if getattr(self, "_client", None) is None or type(backend) not in (GlobalBackend, ShardedBackend) \
                or len(ids) == 0:
            backend.add(ids, feats, progress=progress)
            return
        from retrieval.app.cluster import encode_on_cluster

        V, meta = encode_on_cluster(self._client, self.preset, self._model_dir(), feats.store, feats.key, feats.hashes,
                                    progress=progress)
        feats._meta.update(enumerate(meta))
        backend.add_vectors(ids, V)

    def _use_generic_model(self, rows, to_add, failed, gen) -> bool:
        """Import the generic model (:mod:`retrieval.app.generic_models`) when the index's training policy
        asks for it; True when it did (the caller then loads it instead of training)."""
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
        n = sum(r["status"] == "indexed" for r in rows) + sum(p not in failed for p in to_add)
        if policy == "auto" and n >= int(info["use_below"]):
            return False
        self._import_model(generic_model(self.preset))
        self.catalog.set_meta(model={**self.catalog.get_meta("model"), "generic": True,
                                     "imported": f"generic model of preset {self.preset['name']!r}"})
        logger.info("model: the generic model of preset %r (trained on %s), the collection having %d images",
                    self.preset["name"], info["trained_on"], n)
        self._backend = None
        return True

    def _training_paths(self, rows, to_add, failed, hashes) -> list[tuple[str, str]]:
        """(path, hash) of the training images: ``train_images`` or a seeded sample of the collection."""
        explicit = self.catalog.get_meta("train_images")
        if explicit:
            return [(p, file_hash(p)) for p in explicit]
        pool = {r["hash"]: r["path"] for r in rows if r["status"] == "indexed"}
        pool.update({hashes[p]: p for p in to_add if p not in failed})
        if not pool:
            raise ValueError("no readable image to train the model on.")

        tr = preset_config(self.preset).training
        order = sorted(pool)  # by content hash: independent of names and of the walk order
        rng = np.random.default_rng(tr.random_state)
        n = min(len(order), tr.max_images)
        pick = sorted(rng.choice(len(order), n, replace=False)) if n < len(order) else range(len(order))
        return [(pool[order[i]], order[i]) for i in pick]

    def _train(self, backend, train_paths, progress, workers, report) -> None:
        store, extractor = self.store, self.extractor
        key = extractor.config_key
        need = [p for p, h in train_paths if (h, key) not in store]
        self._extract(need, dict(train_paths), store, extractor, workers, progress, report)
        ok = [(p, h) for p, h in train_paths if (h, key) in store]
        cb, close = progress_callback(progress, "training", 3, unit="step")
        feats = LazyFeatures(store, key, [h for _, h in ok])
        backend.train(lambda i: feats[i], len(ok), progress=cb)
        close()
        import uuid

        tmp = self.path / "model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        info = backend.save_model(tmp)
        info.update(preset=self.preset["name"], preset_version=self.preset["version"], id=uuid.uuid4().hex[:12],
                    trained_on=len(ok))
        effective = dict(getattr(backend, "effective", {}) or {})
        if effective:  # preset parameters reduced to fit a small training set (pipeline.record_reduction)
            info["effective"] = effective

        write_json_atomic(tmp / "model.json", info)
        write_manifest(tmp)
        fsync_dir(tmp)
        shutil.rmtree(self._model_dir(), ignore_errors=True)
        os.replace(tmp, self._model_dir())
        meta = {"id": info["id"], "trained_on": len(ok)}
        if effective:
            meta["effective"] = effective
        self.catalog.set_meta(model=meta)
        report.trained = True
