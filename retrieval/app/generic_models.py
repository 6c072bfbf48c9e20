"""Generic trained models in the package, for collections too small to learn their own.

A vocabulary of 16k words, a Fisher-vector GMM with its local PCA or a PCA of the Fisher vectors cannot be learnt
well from a couple of dozen photos (the ``default`` preset drops its PCA below 512 training images). For each bundled
preset the package holds the model (the same files an index writes to ``model/``) learnt once on independent photos,
with ``provenance.json``: the training images, their number, the library version, the date and the model key
(:func:`model_key`). ``make setup`` learns them (``scripts/train_generic_models.py``, from the Holidays photos of
``../shared/data``); they are not kept in the repository, and a wheel built after set-up includes them.

An index uses the generic model when its training policy (``Index.create(train_on=...)``, ``retrieval index
--train-on``) is ``generic``, or ``auto`` (the default) and its first sync holds fewer readable images than the
preset's :data:`USE_BELOW`: a folder of at most 25 images for ``default`` and ``accurate``, 50 for ``object``, 100 for
``compact`` (:data:`GENERIC_UP_TO`, the largest sizes at which it ranked at least as well as a model learnt on the
folder, docs/results.md "Generic model or the folder's own"); with ``collection``, or explicit training images, it
learns its own.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["GENERIC_UP_TO", "MODEL_SECTIONS", "TRAINING_FOLDER", "TRAIN_ON", "USE_BELOW", "generic_model", "model_key",
           "models_folder", "provenance", "use_below"]

MODEL_SECTIONS = ("features", "local_pca", "aggregation", "projection", "index", "object_search", "training")
"""Preset sections that shape a trained model: a preset whose sections differ from those the generic model was
learnt with (a user's ``--set`` of an index-time key, for instance) never gets it."""

TRAIN_ON = ("auto", "collection", "generic")

TRAINING_FOLDER = ("real", "holidays805", "jpg")
"""The generic models' training photos, under the shared data folder (``scripts/train_generic_models.py --data``)."""

GENERIC_UP_TO = {"default": 25, "compact": 100, "accurate": 25, "object": 50}
"""Per preset, the largest folder size at which the generic model ranked at least as well as a model learnt on the
folder itself, on Holidays-805 and on UKBench-400 alike, at that size and at every smaller one measured (sizes 25,
50, 100, 200, 400, 800; ``retrieval bench generic``, docs/results.md "Generic model or the folder's own")."""

USE_BELOW = {name: n + 1 for name, n in GENERIC_UP_TO.items()}
"""Per preset: ``auto`` imports the generic model when the first sync holds fewer readable images than this (a folder
of at most :data:`GENERIC_UP_TO` images)."""


def use_below(name: str) -> int:
    """:data:`USE_BELOW` of preset ``name`` (the smallest of them for a name without its own)."""
    return USE_BELOW.get(name, min(USE_BELOW.values()))


def models_folder() -> Path:
    """``retrieval/data/models``: one folder per preset name."""
    return Path(__file__).resolve().parent.parent / "data" / "models"


def model_key(preset: dict) -> str:
    """Digest of the model-shaping sections of ``preset`` (:data:`MODEL_SECTIONS`), with its name and version."""
    keys = {k: preset.get(k) for k in MODEL_SECTIONS if k in preset}
    keys["name"], keys["version"] = preset["name"], preset["version"]
    blob = json.dumps(keys, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def provenance(preset: dict) -> dict | None:
    """The generic model's ``provenance.json`` for ``preset``, or None when none matches its :func:`model_key`.

    Its ``use_below`` is this library's (:func:`use_below`): a model folder built by an earlier set-up keeps its
    model but follows the current threshold."""
    path = models_folder() / preset["name"] / "provenance.json"
    if not path.is_file():
        return None
    info = json.loads(path.read_text("utf-8"))
    return {**info, "use_below": use_below(preset["name"])} if info.get("model_key") == model_key(preset) else None


def generic_model(preset: dict) -> Path | None:
    """The generic model folder for ``preset`` (its ``model.json`` and estimator files), or None."""
    return models_folder() / preset["name"] if provenance(preset) is not None else None
