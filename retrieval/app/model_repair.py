"""``retrieval check --repair``: every file of an index made whole again (:func:`repair`, run by
:meth:`Writer.repair <retrieval.app.index_build.Writer.repair>` under the writer lock).

In this order, nothing removed before what replaces it is verified:

1. the model: a damaged or missing ``model/`` is restored from its verified copy ``model.backup/``
   (:func:`retrieval.app.model_files.restore_model`); when the copy is unusable too, the model is made again
   (:func:`make_model_again`): the generic model of the preset, the model imported from another index when its
   folder still holds it, or the model learnt again from the stored features of its training images (the catalog's
   ``model_training``, in their order, with the preset's seed: the same model). A model learnt again that differs
   from the damaged one in any byte (when its manifest is readable to tell) has the committed generation rebuilt
   with it. A missing, damaged or stale copy beside an intact model is made again from the model.
2. the committed generation, when damaged or missing (or encoded by another model), is rebuilt from the model and
   the feature store and published like any other (the older generations are removed by the publish only once the
   new one has loaded intact);
3. the damaged older generations are removed, once the committed one loads intact.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

import numpy as np

from retrieval.app.catalog import CatalogChanges
from retrieval.app.generic_models import generic_model
from retrieval.app.index_support import LazyFeatures
from retrieval.app.integrity import MANIFEST, exact_features_again
from retrieval.app.model_files import (
    MODEL_BACKUP,
    MODEL_TMP,
    install_model,
    make_model_copy,
    model_id,
    restore_model,
)
from retrieval.app.write_model import model_record, training_record

logger = logging.getLogger("retrieval.app.index")

__all__ = ["make_model_again", "repair"]


def _manifest_files(folder: Path) -> dict | None:
    import json

    try:
        return json.loads((folder / MANIFEST).read_text("utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _training_features(writer, hashes: list[str]) -> int:
    """Make sure every training image has its full features in the store (extracted again from a file of the
    collection with that content when only the compact form is left); returns how many are missing."""
    store, key = writer.store, writer.extractor.config_key
    rows = []
    for h in hashes:
        if not store.has_full(h, key):
            found = writer.catalog.rows_by_hash(h)
            if not found:
                return len(hashes)
            rows.append(found[0])
    return exact_features_again(store, writer.extractor, rows) if rows else 0


def make_model_again(writer, want_id: str | None) -> tuple[str, bool]:
    """Install a model equal to the index's (``want_id``) when its copy is unusable: the generic model, the
    imported one, or the model learnt again on its training images (module docstring). Returns (what was done,
    whether the new model is known to be identical byte for byte to the one the generations were encoded with).
    ValueError (one line) when none of these is possible."""
    folder, catalog = writer.folder, writer.catalog
    meta = catalog.get_meta("model") or {}
    old = _manifest_files(folder.model_dir) or _manifest_files(folder.path / MODEL_BACKUP)
    if meta.get("generic") or meta.get("imported"):
        src = generic_model(writer.preset) if meta.get("generic") else Path(meta["imported"])
        where = f"the generic model of preset {writer.preset['name']!r}" if meta.get("generic") else str(src)
        if src is None or model_id(src) != want_id:
            raise ValueError(f"the model it came from ({where}) is no longer model {want_id!r}")
        folder.import_model(src)
        return f"model {want_id!r} installed again from {where}", True
    training = catalog.get_meta("model_training") or {}
    hashes = [str(h) for h in training.get("hashes") or []]
    if not hashes or training.get("model_id") != want_id:
        raise ValueError("no record of its training images (a model trained before this version kept one)")
    missing = _training_features(writer, hashes)
    if missing:
        raise ValueError(f"{missing} of its {len(hashes)} training images have no stored features left")
    backend = folder.new_backend()
    feats = LazyFeatures(writer.store, writer.extractor.config_key, hashes)
    backend.train(lambda i: feats[i], len(hashes))
    info = {"preset": writer.preset["name"], "preset_version": writer.preset["version"], "id": want_id,
            "trained_on": len(hashes)}
    tmp = folder.path / MODEL_TMP
    folder.write_model(backend, info, training=hashes, tmp=tmp)
    identical = old is not None and _manifest_files(tmp) == old
    if not identical:   # another model: another id, so that no generation encoded with the old one passes for its
        info["id"] = uuid.uuid4().hex[:12]
        folder.write_model(backend, info, training=hashes, tmp=tmp)
    try:
        install_model(folder.path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return (f"model {want_id!r} learnt again from the stored features of its {len(hashes)} training images "
            + ("(identical to the damaged one)" if identical else
               f"(as model {info['id']!r}: not known to be identical, the generation is encoded with it again)")), \
        identical


def _repair_model(writer, report: dict, out: dict) -> bool | None:
    """Step 1 (module docstring); returns whether the committed generation must be encoded again with the model
    (None: the model could not be repaired)."""
    folder = writer.folder
    want_id = (writer.catalog.get_meta("model") or {}).get("id")
    if report["model"]:
        try:
            out["repaired"].append(restore_model(folder.path, want_id))
            return False
        except ValueError as exc:
            unusable = str(exc)
        try:
            line, identical = make_model_again(writer, want_id)
        except ValueError as exc:
            out["could_not"].append(f"the model is damaged ({report['model'][0]}), its copy is unusable "
                                    f"({unusable}) and it cannot be made again: {exc}; rebuild the index "
                                    f"('retrieval index PHOTO_DIR' into a new folder)")
            return None
        out["repaired"].append(line)
        return not identical
    if report.get("model_backup"):
        try:
            out["repaired"].append(make_model_copy(folder.path))
        except ValueError as exc:
            out["could_not"].append(str(exc))
    return False


def _rebuild(writer, gen: int, reason: str, out: dict, extra_meta: dict | None) -> None:
    """Step 2: the committed generation rebuilt from the model and the feature store, published (with
    ``extra_meta``: the record of a model made again)."""
    rows = list(writer.catalog.iter_rows("indexed"))
    store, key = writer.store, writer.extractor.config_key
    missing = [r["path"] for r in rows if (r["hash"], key) not in store]
    if missing:
        out["could_not"].append(f"{len(missing)} images have no features in the store (first: {missing[0]}): run "
                                f"'retrieval index' to extract them again")
        return
    approximate = exact_features_again(store, writer.extractor, rows)
    backend = writer.folder.new_backend()
    writer.folder.load_model_into(backend)
    backend.load_state(None)
    backend.add(np.asarray([r["id"] for r in rows], np.int64), LazyFeatures(store, key, [r["hash"] for r in rows]))
    run_id = writer.catalog.start_run("check --repair")
    with writer.catalog.failed_on_error(writer.folder.path):
        new_gen = writer.folder.publish(writer.catalog, backend, CatalogChanges(
            run_id=run_id, next_id=int(writer.catalog.get_meta("next_id", 0)), extra_meta=extra_meta), after=gen,
            keep_previous=False)
    if writer.owns_store:
        try:
            store.drop_full(key, [r["hash"] for r in rows])
        except OSError as exc:
            logger.warning("%s: full features not dropped after the repair (%s)", writer.folder.path, exc)
    if approximate:
        out["repaired"].append(f"{approximate} images whose file is gone or changed were encoded from their compact "
                               f"features (docs/formats.md)")
    out["repaired"].append(f"generation {gen} ({reason}) rebuilt from the model and the feature store as generation "
                           f"{new_gen} ({len(rows)} images)")


def repair(writer, report: dict) -> dict:
    """Repair what :func:`retrieval.app.integrity.check_index` found (``report``), in the order of the module
    docstring. Returns ``{"repaired": [...], "could_not": [...]}``."""
    out = {"repaired": [], "could_not": []}
    if report["catalog"] != "ok":
        out["could_not"].append(f"the catalog is damaged ({report['catalog']}): rebuild the index "
                                f"('retrieval index PHOTO_DIR' into a new folder)")
        return out
    folder, catalog = writer.folder, writer.catalog
    with folder.writer_lock():
        gen = catalog.generation()
        folder.clear_leftovers(gen)
        reencode = _repair_model(writer, report, out)
        if reencode is None:
            return out
        extra_meta = None
        record = catalog.get_meta("model") or {}
        if gen and model_id(folder.model_dir) != record.get("id"):   # a model made again (or installed by a
            extra_meta = {"model": model_record(folder.model_dir),   # repair killed before its commit)
                          "model_training": training_record(folder.model_dir)}
            reencode = True
        older = [(g, p) for g, p in sorted(report["generations"].items()) if g != gen and p]
        problems = report["generations"].get(gen) if gen else None
        if gen and (problems or reencode):
            _rebuild(writer, gen, problems[0] if problems else "encoded with the damaged model", out, extra_meta)
            gen = catalog.generation()
        try:
            folder.load_backend(gen, fallback=False)   # the committed generation loads intact: step 3
        except ValueError:
            return out
        for g, problems in older:   # a damaged fallback: of no use, removed (by the rebuild's publish, or here)
            shutil.rmtree(folder.gen_dir(g), ignore_errors=True)
            out["repaired"].append(f"removed the damaged older generation {g} ({problems[0]})")
        for g in folder.generations_on_disk():   # and one a failed clean-up left half removed
            problems = folder.generation_problems(g) if g < gen else []
            if problems:
                shutil.rmtree(folder.gen_dir(g), ignore_errors=True)
                out["repaired"].append(f"removed the damaged older generation {g} ({problems[0]})")
        folder.clear_leftovers(gen)
    writer.on_change()
    return out
