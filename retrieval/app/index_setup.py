"""An index folder made, opened and described: the catalog of a new index (:func:`write_new_catalog`), the checks
of an existing one (:func:`open_catalog`, :func:`check_same_index`) and the summary of ``retrieval info``
(:func:`index_info`). Used by :class:`retrieval.app.index.Index`.

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
"""

from __future__ import annotations

import os
from pathlib import Path

from retrieval._version import __version__
from retrieval.app.catalog import Catalog
from retrieval.app.generic_models import TRAIN_ON
from retrieval.app.index_support import adopt_thresholds
from retrieval.app.shards import check_shards, shard_count
from retrieval.app.store_forms import check_compact_features
from retrieval.core.checks import ParamError
from retrieval.engine.presets import check_available, load_preset, preset_digest, preset_names
from retrieval.features.extractor import DEFAULT_DECODER

INDEX_FORMAT = "retrieval-index"
INDEX_FORMAT_VERSION = 1

ERROR_FILES_SHOWN = 100
"""The unreadable files :func:`index_info` lists (the first by id; ``errors`` counts them all)."""


def checked_creation(preset, train_on: str, shards: int, compact_features: int) -> tuple[dict, int, int]:
    """``(preset, shards, compact_features)`` of a new index, checked: the preset loaded and its pieces
    available, ``train_on`` one of :data:`~retrieval.app.generic_models.TRAIN_ON`, the shard count and the compact
    form allowed for it."""
    preset = load_preset(preset)
    check_available(preset)
    if train_on not in TRAIN_ON:
        raise ValueError(f"train_on must be one of {', '.join(TRAIN_ON)}; got {train_on!r}.")
    return preset, check_shards(preset, shards), check_compact_features(compact_features)


def check_same_index(idx, preset: dict, shards: int, compact_features: int) -> None:
    """ValueError (one line) when the existing index ``idx`` was made otherwise than asked (``exist_ok``)."""
    path = idx.path
    if idx.preset["name"] != preset["name"] or idx.preset["version"] != preset["version"]:
        raise ParamError("index", str(path), template="{value}: this index was built with preset {built!r} version "
                         "{built_version}, not {preset!r} version {version}; use another {index} folder or delete "
                         "this one.", built=idx.preset["name"], built_version=idx.preset["version"],
                         preset=preset["name"], version=preset["version"])
    if shards != 1 and shards != shard_count(idx.catalog):
        raise ParamError("shards", shards, template="{path}: this index has {have} shard(s); {shards} is fixed when "
                         "an index is created (got {value}).", path=str(path), have=shard_count(idx.catalog))
    if compact_features and compact_features != idx.compact_features:
        raise ValueError(f"{path}: this index keeps compact_features={idx.compact_features} (got "
                         f"{compact_features}); Index.compact(compact_features=N) changes it.")


def write_new_catalog(path: Path, preset: dict, *, feature_store, train_images, train_on: str, shards: int,
                      compact_features: int) -> None:
    """The catalog of a new, empty index in ``path`` (created; refused when it holds anything else), written to
    ``catalog.db.tmp`` and renamed: a crash leaves no half-made index."""
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


def open_catalog(path: Path) -> tuple[Catalog, dict]:
    """``(catalog, preset)`` of an existing index folder: its format checked, its preset refused when this
    library's preset of that name has another version, query-time thresholds adopted
    (:func:`~retrieval.app.index_support.adopt_thresholds`)."""
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
    return cat, preset


def state_bytes_on_disk(path: Path) -> int:
    """Bytes of the index's own files: the catalog (and its backup), the model, the generations and their
    segments -- not the feature store, the thumbnail cache or uploaded photos, whose sizes would need a walk of
    one file per photo (``retrieval info`` answers in constant time)."""
    total = 0
    for p in Path(path).iterdir():
        if p.name in ("features", "thumbs", "uploads"):
            continue
        files = [p] if p.is_file() else (f for f in p.rglob("*") if f.is_file())
        total += sum(f.stat().st_size for f in files)
    return total


def index_info(idx) -> dict:
    """Summary: preset, model, counts by status (the catalog's ``counts``, no row read), generation, the first
    :data:`ERROR_FILES_SHOWN` unreadable files, last runs, the index's size (:func:`state_bytes_on_disk`)."""
    cat = idx.catalog
    with cat.reading():
        gen, counts = cat.generation(), cat.counts()
        errors = cat.error_rows(ERROR_FILES_SHOWN)
    size = state_bytes_on_disk(idx.path)
    runs = idx.catalog.runs()
    if runs and runs[-1]["status"] == "running" and not idx.writer_active():
        runs[-1]["status"] = "interrupted"   # left 'running' by a killed process
    return {
        "index": str(idx.path.resolve()),
        "preset": {"name": idx.preset["name"], "version": idx.preset["version"], "kind": idx.preset["kind"]},
        "model": idx.catalog.get_meta("model"),
        "generation": gen,
        "images": sum(counts.values()),
        "indexed": counts.get("indexed", 0),
        "errors": counts.get("error", 0),
        "error_files": [{"path": r["path"], "error": r["error"]} for r in errors],
        "roots": idx.roots,
        "excluded": idx.excluded,
        "bytes_on_disk": int(size), "compact_features": idx.compact_features,
        "shards": shard_count(idx.catalog), "runs": len(runs), "last_run": runs[-1] if runs else None,
    }
