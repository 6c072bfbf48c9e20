"""The model of a first sync: the generic model of the preset when the index's policy takes it
(:mod:`retrieval.app.generic_models`), else one trained on a seeded sample of the collection (or on the
``train_images`` given at creation), written to ``model.tmp/`` and installed as ``model/`` with its verified copy
``model.backup/`` (:meth:`IndexFolder.write_model <retrieval.app.folder.IndexFolder.write_model>`). Used by
:class:`retrieval.app.index_build.Writer` only, under the writer lock.

The catalog's ``model`` record is committed with the first generation (:func:`model_record`), so that a first
sync that fails before its commit leaves no record; a trained model also records the content hashes of its
training images, in their order (``model/training.json`` and the catalog's ``model_training``): with the seed of the
preset they are what ``check --repair`` needs to learn the same model again (:mod:`retrieval.app.model_repair`).
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import numpy as np

from retrieval.app.generic_models import generic_model, provenance
from retrieval.app.index_support import LazyFeatures, progress_callback
from retrieval.app.write_plan import STATUS
from retrieval.core.checks import ParamError
from retrieval.core.persistence import crash_point
from retrieval.features.store import file_hash

logger = logging.getLogger("retrieval.app.index")


TRAINING = "training.json"
"""The file of a trained model folder that lists the content hashes of its training images, in their order."""


def use_generic_model(catalog, folder, preset: dict, rows, to_add, failed) -> dict | None:
    """Import the generic model when the index's training policy asks for it; its catalog record when it did (the
    caller then loads it instead of training, and commits the record with the generation), else None."""
    policy = catalog.get_meta("train_on") or "collection"   # indexes made before the policy existed
    if policy == "collection" or catalog.get_meta("train_images"):
        return None
    info = provenance(preset)
    if info is None:
        if policy == "generic":
            raise ParamError("train_on", policy, template="no generic model for preset {preset!r} as configured "
                             "(none was built, or its model-shaping keys differ from the built model's); use "
                             "{train_on} collection.", preset=preset["name"])
        return None
    n = sum(r[STATUS] == "indexed" for r in rows) + sum(p not in failed for p in to_add)   # rows: Catalog.scan
    if policy == "auto" and n >= int(info["use_below"]):
        return None
    meta = folder.import_model(generic_model(preset))
    logger.info("model: the generic model of preset %r (trained on %s), the collection having %d images",
                preset["name"], info["trained_on"], n)
    return {**meta, "generic": True, "imported": f"generic model of preset {preset['name']!r}"}


def training_paths(catalog, config, rows, to_add, failed, hashes) -> list[tuple[str, str]]:
    """(path, hash) of the training images: ``train_images`` or a seeded sample of the collection (``config``:
    the typed preset, its ``training`` section)."""
    explicit = catalog.get_meta("train_images")
    if explicit:
        return [(p, file_hash(p)) for p in explicit]
    pool = {h: p for p, _, _, _, status, h in rows if status == "indexed"}   # rows: Catalog.scan tuples
    pool.update({hashes[p]: p for p in to_add if p not in failed})
    if not pool:
        raise ValueError("no readable image to train the model on.")
    tr = config.training
    order = sorted(pool)  # by content hash: independent of names and of the walk order
    rng = np.random.default_rng(tr.random_state)
    n = min(len(order), tr.max_images)
    pick = sorted(rng.choice(len(order), n, replace=False)) if n < len(order) else range(len(order))
    return [(pool[order[i]], order[i]) for i in pick]


def train_model(writer, backend, train_paths, progress, workers, report) -> dict:
    """Train ``backend``'s model on ``train_paths`` (extracted first by ``writer`` when missing from its store)
    and install it as ``model/`` (through ``model.tmp/``); returns the catalog's ``model`` record, committed with
    the generation."""
    store, key, preset = writer.store, writer.extractor.config_key, writer.preset
    need = [p for p, h in train_paths if (h, key) not in store]
    writer.extract(need, dict(train_paths), workers, progress, report)
    ok = [(p, h) for p, h in train_paths if (h, key) in store]
    cb, close = progress_callback(progress, "training", 3, unit="step")
    feats = LazyFeatures(store, key, [h for _, h in ok])
    backend.train(lambda i: feats[i], len(ok), progress=cb)
    close()
    crash_point("train")
    info = {"preset": preset["name"], "preset_version": preset["version"], "id": uuid.uuid4().hex[:12],
            "trained_on": len(ok)}
    writer.folder.write_model(backend, info, training=[h for _, h in ok])
    report.trained = True
    return model_record(writer.folder.model_dir)


def model_record(model_dir) -> dict:
    """The catalog's ``model`` record of the installed model folder ``model_dir``: its ``id``, ``trained_on`` and
    ``effective`` (the preset parameters reduced to fit its training set)."""
    info = json.loads((Path(model_dir) / "model.json").read_text("utf-8"))
    meta = {"id": info["id"], "trained_on": info.get("trained_on")}
    if info.get("effective"):
        meta["effective"] = dict(info["effective"])
    return meta


def training_record(model_dir) -> dict | None:
    """``{"model_id", "hashes"}``: the training images of the installed model folder ``model_dir``
    (:data:`TRAINING`), or None (an imported or generic model, or one trained before this record existed)."""
    try:
        hashes = json.loads((Path(model_dir) / TRAINING).read_text("utf-8"))["hashes"]
        return {"model_id": model_record(model_dir)["id"], "hashes": [str(h) for h in hashes]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
