"""Named presets: JSON files in ``retrieval/data/presets/`` that say how an index is built and searched.

A preset (format documented in docs/user-guide.md and docs/formats.md) is a JSON object with

- ``name`` (str), ``version`` (int: bumped whenever a change makes old indexes incompatible), ``kind``
  (``"global"``, ``"binary"`` or ``"object"``: which backend of :mod:`retrieval.engine.pipeline` runs it),
  ``description``;
- ``requires``: the ``"module:attribute"`` pieces it needs; :func:`check_available` names the missing ones;
- per-stage settings: ``features`` (the :class:`retrieval.features.FeatureExtractor` parameters), ``local_pca``,
  ``aggregation``, ``projection``, ``index``, ``object_search``, ``training``, ``search``.

Every key, its default and its range are declared once in :mod:`retrieval.engine.config`; :func:`load_preset`
parses strictly (an unknown key is an error naming the closest valid one) but returns the dict as given, so that
:func:`preset_digest` and the index folder see exactly the preset's own keys. Code reads the typed view,
:func:`preset_config` (``preset_config(p).index.nprobe``), never ``p.get(key, default)``.

An index stores the full preset it was built with; opening it with a library whose preset of the same name has
another ``version`` is refused (see :meth:`retrieval.app.index.Index.open`).
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import logging
from importlib import resources
from pathlib import Path

from retrieval.engine.config import KINDS, Preset, PresetError  # noqa: F401  (KINDS, PresetError: re-exported)

logger = logging.getLogger(__name__)


class PresetUnavailableError(ValueError):
    """A preset needs a piece of the library that is not available in this installation."""


def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    folder = resources.files("retrieval") / "data" / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def _validate(preset, where: str) -> dict:
    Preset.from_dict(preset, where)
    return preset


def preset_config(preset) -> Preset:
    """The typed, strictly checked view of a preset dict (:class:`retrieval.engine.config.Preset`)."""
    return preset if isinstance(preset, Preset) else Preset.from_dict(preset)


def load_preset(preset) -> dict:
    """Return a preset as a dict (a deep copy).

    Parameters
    ----------
    preset : str, Path or dict
        A bundled name (``"default"``, ``"compact"``, ``"object"``), the path of a JSON file, or a dict.
    """
    if isinstance(preset, dict):
        return _validate(copy.deepcopy(preset), repr(preset.get("name")))
    text = str(preset)
    if text in preset_names():
        data = (resources.files("retrieval") / "data" / "presets" / f"{text}.json").read_text("utf-8")
        return _validate(json.loads(data), repr(text))
    path = Path(text)
    if path.suffix == ".json" and path.is_file():
        try:
            return _validate(json.loads(path.read_text("utf-8")), str(path))
        except json.JSONDecodeError as exc:
            raise ValueError(f"preset file {path}: not valid JSON ({exc}).") from None
    raise ValueError(f"unknown preset {text!r}: expected one of {', '.join(preset_names())} or a .json file.")


def preset_digest(preset: dict) -> str:
    """A short hash of the preset's canonical JSON (recorded in the catalog)."""
    blob = json.dumps(preset, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


MOVED_MODULES = {"retrieval.engine.object_search": "retrieval.engine.object.searcher"}
"""Modules named by the ``requires`` of presets stored in older indexes, and where they live now."""


def missing_pieces(preset: dict) -> list[str]:
    """The ``requires`` entries of ``preset`` that cannot be imported, as ``"module:attribute (reason)"``."""
    missing = []
    for spec in preset_config(preset).requires:
        module_name, _, attr = spec.partition(":")
        module_name = MOVED_MODULES.get(module_name, module_name)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing.append(f"{spec} (module not importable: {exc})")
            continue
        if attr and not hasattr(module, attr):
            missing.append(f"{spec} (no attribute {attr!r} in {module_name})")
    return missing


def check_available(preset: dict) -> None:
    """Raise :class:`PresetUnavailableError` naming every missing piece of ``preset``."""
    missing = missing_pieces(preset)
    if missing:
        raise PresetUnavailableError(
            f"preset {preset['name']!r} (version {preset['version']}) needs pieces this installation does not "
            f"have yet: {'; '.join(missing)}."
        )


def describe_presets() -> list[dict]:
    """One dict per bundled preset: name, version, kind, available (bool), missing, description."""
    out = []
    for name in preset_names():
        p = load_preset(name)
        miss = missing_pieces(p)
        out.append({"name": name, "version": p["version"], "kind": p["kind"], "available": not miss,
                    "missing": miss, "description": p["description"]})
    return out


def record_reduction(effective: dict, preset_name: str, param: str, preset_value, used, reason: str) -> None:
    """Record in ``effective`` (and warn once) that the preset parameter ``param`` was reduced to fit the data.

    The small-collection rule (docs/user-guide.md, "Small collections"): a preset meant for large collections is
    applied to a small one with every data-bound parameter reduced to what the training data supports (PQ bits,
    IVF lists, vocabulary size, projection, binary code length) instead of refusing; each reduction is one
    ``WARNING`` naming the parameter, the value used (``None``: the stage is dropped) and why, and is recorded as
    ``effective[param] = {"preset": preset_value, "used": used, "reason": reason}`` (saved in the model's
    ``model.json``, the index's ``info()`` and the ``eval run`` report).
    """
    effective[param] = {"preset": preset_value, "used": used, "reason": reason}
    logger.warning("preset %r: %s = %s %s: %s", preset_name, param, preset_value,
                   "dropped" if used is None else f"reduced to {used}", reason)


def vocabulary_cap(preset: dict, n_descriptors: int) -> int:
    """Largest vocabulary learnt from ``n_descriptors`` training descriptors: ``n // training.min_descriptors_per_word``
    (default 10 descriptors per word; at least 1)."""
    return max(1, n_descriptors // preset_config(preset).training.min_descriptors_per_word)


def effective_preset(preset) -> dict:
    """The effective configuration of ``preset`` (name, file or dict): every key, defaults filled in."""
    return preset_config(load_preset(preset)).to_dict(full=True)


def format_preset(preset) -> str:
    """Readable text of the effective configuration of ``preset``; keys the preset leaves to their default are
    marked ``(default)``."""
    cfg = preset_config(load_preset(preset))
    full, given = cfg.to_dict(full=True), cfg.to_dict()
    lines = [f"{cfg.name}  version {cfg.version}  kind {cfg.kind}", f"  {cfg.description}"]
    if cfg.requires:
        lines.append(f"requires: {', '.join(cfg.requires)}")
    from retrieval.engine.config import KIND_SECTIONS

    for name in KIND_SECTIONS[cfg.kind]:
        section = full[name]
        if section is None:
            lines.append(f"{name}: null (stage skipped){'' if name in given else '  (default)'}")
            continue
        lines.append(f"{name}:")
        own = given.get(name) or {}
        for key, value in section.items():
            mark = "" if key in own else "  (default)"
            lines.append(f"  {key:26s} {json.dumps(value)}{mark}")
    if cfg.overrides:
        lines.append(f"overrides: {', '.join(cfg.overrides)}")
    return "\n".join(lines)
