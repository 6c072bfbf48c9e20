"""The model folder of an index and its checksummed copy: ``model/`` and ``model.backup/``.

Every model an index gets (trained by its first sync, the generic model of its preset, a model imported from
another index) is written to ``model.tmp/`` with its manifest (size and BLAKE2b checksum of every file), then
installed by :func:`install_model`: the folder is copied to ``model.backup.tmp/``, the copy's checksums verified
against the manifest, the copy renamed to ``model.backup/`` and only then ``model.tmp/`` renamed to ``model/``. So
``model.backup/`` is always a verified copy of the model the generations were encoded with (or, after a crash
between the two renames, of the model about to be installed, which no generation uses yet: a first sync run again
trains or imports it again).

``retrieval check`` compares both folders with their manifests (:func:`model_copy_problems`); ``check --repair``
puts the copy back in place of a damaged model (:func:`restore_model`: copied to ``model.tmp/``, verified, then
renamed over the damaged folder) and makes the copy again from an intact model when the copy is missing, damaged or
of another model (:func:`make_model_copy`). When both are damaged, :mod:`retrieval.app.model_repair` learns the
model again from the stored features.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from retrieval.app.integrity import MANIFEST, NO_COPY_YET, check_folder, write_manifest
from retrieval.core.persistence import crash_point, fsync_dir

logger = logging.getLogger("retrieval.app.index")

MODEL = "model"
MODEL_BACKUP = "model.backup"
MODEL_TMP = "model.tmp"
MODEL_BACKUP_TMP = "model.backup.tmp"

__all__ = ["MODEL", "MODEL_BACKUP", "import_model_folder", "install_model", "make_model_copy", "model_copy_problems",
           "model_id", "restore_model"]


def _fsync_tree(folder: Path) -> None:
    """fsync every file and folder under ``folder`` (and itself)."""
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    for p in [*(q for q in folder.rglob("*") if q.is_dir()), folder]:
        fsync_dir(p)


def _replace_backup(source: Path, index_path: Path) -> None:
    """``model.backup/`` replaced by a verified copy of the model folder ``source`` (copied beside it, then swapped
    in)."""
    tmp = index_path / MODEL_BACKUP_TMP
    _copy_verified(source, tmp)
    try:
        _swap_in(tmp, index_path / MODEL_BACKUP)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_verified(src: Path, dst: Path) -> None:
    """Copy the model folder ``src`` (with its manifest) to ``dst`` (replaced), fsynced, and check the copy's
    checksums against the manifest; ValueError (one line) when they differ (nothing is then left at ``dst``)."""
    shutil.rmtree(dst, ignore_errors=True)
    try:
        shutil.copytree(src, dst)
        _fsync_tree(dst)
        problems = check_folder(dst, checksums=True)
        if not (dst / MANIFEST).is_file():
            problems = [f"{dst / MANIFEST}: missing"]
        if problems:
            raise ValueError(f"{problems[0]}: the copy of {src} does not match its manifest")
    except BaseException:
        shutil.rmtree(dst, ignore_errors=True)
        raise


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename the complete folder ``tmp`` to ``final`` (an existing ``final`` removed first) and make it durable."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def install_model(index_path, tmp) -> None:
    """Install the complete model folder ``tmp`` (``<index>/model.tmp``, its manifest written) as ``model/``,
    after its verified copy ``model.backup/`` (module docstring)."""
    index_path, tmp = Path(index_path), Path(tmp)
    if not (tmp / MANIFEST).is_file():
        write_manifest(tmp)
    _fsync_tree(tmp)
    _replace_backup(tmp, index_path)
    crash_point("model")   # the copy is in place, the model not yet
    _swap_in(tmp, index_path / MODEL)


def model_id(folder) -> str | None:
    """The ``id`` of the model folder's ``model.json`` (None when it is missing or unreadable)."""
    try:
        return str(json.loads((Path(folder) / "model.json").read_text("utf-8"))["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_copy_problems(index_path, *, checksums: bool = True, want_id: str | None = None) -> list[str]:
    """Problems of ``model.backup/`` (one line each, naming the file): missing while a model exists, damaged
    against its manifest, without a manifest, or the copy of another model than ``want_id`` (the catalog's)."""
    index_path = Path(index_path)
    backup, model = index_path / MODEL_BACKUP, index_path / MODEL
    if not backup.is_dir():
        return [f"{backup}: {NO_COPY_YET}"] if model.is_dir() else []
    if not (backup / MANIFEST).is_file():
        return [f"{backup / MANIFEST}: missing"]
    problems = [str(p) for p in check_folder(backup, checksums=checksums)]
    if not problems and want_id is not None and model_id(backup) != want_id:
        problems.append(f"{backup}: the copy of model {model_id(backup)!r}, not of the index's model {want_id!r}")
    return problems


def make_model_copy(index_path) -> str:
    """``model.backup/`` made again from an intact ``model/`` (checksums verified first); returns what was done.
    ValueError (one line) when the model itself does not match its manifest."""
    index_path = Path(index_path)
    model = index_path / MODEL
    problems = check_folder(model, checksums=True)
    if problems:
        raise ValueError(f"{problems[0]}: the model is damaged; its copy cannot be made from it")
    if not (model / MANIFEST).is_file():
        write_manifest(model)   # a model written before manifests existed
    _replace_backup(model, index_path)
    return f"{MODEL_BACKUP}/ made again from {MODEL}/ (verified)"


def restore_model(index_path, want_id: str | None) -> str:
    """Put the verified copy ``model.backup/`` in place of a damaged or missing ``model/`` (copied to
    ``model.tmp/``, checked against the manifest, then renamed over it); returns what was done. ValueError (one
    line) when the copy is damaged too, or is the copy of another model than ``want_id``."""
    index_path = Path(index_path)
    backup = index_path / MODEL_BACKUP
    problems = model_copy_problems(index_path, want_id=want_id)
    if not backup.is_dir() or problems:
        raise ValueError(problems[0] if problems else f"{backup}: missing")
    tmp = index_path / MODEL_TMP
    _copy_verified(backup, tmp)
    crash_point("restore")   # the verified copy is in model.tmp, the damaged model still in place
    try:
        _swap_in(tmp, index_path / MODEL)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return f"{MODEL}/ restored from its verified copy {MODEL_BACKUP}/ (model {model_id(index_path / MODEL)!r})"


def import_model_folder(index_path, preset: dict, src) -> dict:
    """Copy a trained model folder (an index folder or its ``model/``) into ``<index_path>/model/`` with its
    verified copy (:func:`install_model`); returns the catalog's ``model`` record. ValueError (one line) when it is
    not a model, is damaged, or was trained for another preset than ``preset``."""
    index_path, src = Path(index_path), Path(src)
    if (src / MODEL / "model.json").exists():
        src = src / MODEL
    if not (src / "model.json").exists():
        raise ValueError(f"{src}: not a trained model folder (no model.json; give an index folder or its "
                         f"model/ folder).")
    info = json.loads((src / "model.json").read_text("utf-8"))
    if info.get("preset") != preset["name"] or info.get("preset_version") != preset["version"]:
        raise ValueError(f"{src}: model trained for preset {info.get('preset')!r} version "
                         f"{info.get('preset_version')}; this index uses {preset['name']!r} version "
                         f"{preset['version']}.")
    problems = check_folder(src, checksums=True)
    if problems:
        raise ValueError(f"{problems[0]}: the model to import is damaged.")
    tmp = index_path / MODEL_TMP
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(MANIFEST))
        write_manifest(tmp)   # of exactly what is copied (the source's may list fewer files)
        install_model(index_path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta = {"id": info["id"], "trained_on": info.get("trained_on"), "imported": str(src)}
    if info.get("effective"):
        meta["effective"] = info["effective"]
    return meta
