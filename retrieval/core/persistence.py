"""Atomic file writes and the ``.npz`` + JSON-header persistence used by every trained component.

Estimator file format (``retrieval-estimator``, version 1), documented in docs/formats.md:
a single ``.npz`` archive (NumPy's zip of ``.npy`` members, read with ``allow_pickle=False``) holding

- ``__header__``: a uint8 array with UTF-8 JSON:
  ``{"format": "retrieval-estimator", "format_version": 1, "class": "retrieval.x.Y",
  "library_version": "...", "params": {...}, "attributes": {...}, "arrays": [...]}``
  where ``params`` are the ``__init__`` hyper-parameters, ``attributes`` the learnt JSON-able values
  (names ending in ``_``) and ``arrays`` the names of the learnt arrays;
- one member per learnt array, named as the attribute (e.g. ``cluster_centers_``).

Never pickle.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import signal
import tempfile
from pathlib import Path

import numpy as np

from retrieval._version import __version__
from retrieval.core.npy_threads import serialise_npy_headers

ESTIMATOR_FORMAT = "retrieval-estimator"
ESTIMATOR_FORMAT_VERSION = 1


serialise_npy_headers()   # np.load from several threads on CPython 3.11 < 3.11.8 (retrieval.core.npy_threads)
logger = logging.getLogger(__name__)


class FormatError(ValueError):
    """A file is not in the expected format or version."""


def _umask() -> int:
    """The process's file-creation mask, read without changing it (Linux ``/proc``), else by setting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Write ``path`` atomically: to a temporary file in the same folder, fsync, then rename.

    A crash at any moment leaves either the old file or the new one, never a half-written one. The file gets the
    permissions a plain ``open(path, "w")`` would give it: those of the file it replaces, or ``0o666`` minus the
    umask for a new file (the temporary file is created 0600, which must not leak into the result).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        perms = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        perms = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), perms)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def fsync_dir(folder) -> None:
    """fsync a directory so that a rename inside it is durable."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_npy_atomic(path, array) -> None:
    """Save one array to ``path`` (``.npy``) atomically."""
    with atomic_write(path) as fh:
        np.save(fh, np.asarray(array), allow_pickle=False)


def read_folder_header(folder, fmt: str, version: int, what: str) -> dict:
    """The ``header.json`` of a saved folder, checked: FileNotFoundError when it is missing ("no {what} here"),
    FormatError when it is not JSON or names another format or version."""
    hpath = Path(folder) / "header.json"
    if not hpath.exists():
        raise FileNotFoundError(f"{folder}: no {what} here (header.json missing).")
    try:
        header = json.loads(hpath.read_text())
    except json.JSONDecodeError as exc:
        raise FormatError(f"{hpath}: not valid JSON: {exc}") from None
    if header.get("format") != fmt or header.get("format_version") != version:
        raise FormatError(f"{hpath}: format {header.get('format')!r} version {header.get('format_version')!r}; "
                          f"expected {fmt!r} version {version}.")
    return header


def write_json_atomic(path, obj) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    with atomic_write(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def init_params(obj) -> dict:
    sig = inspect.signature(type(obj).__init__)
    params = {}
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params[name] = _jsonable(getattr(obj, name, p.default))
    return params


# Module paths of classes saved before the package was re-laid out by stage (0.2.0); files written by 0.1.x name
# these in their header and still load.
LEGACY_MODULES = {
    "retrieval.indexing.binary_search": "retrieval.codes.binary_scan",
    **{f"retrieval.indexing.{m}": f"retrieval.codes.{m}" for m in (
        "pq", "scan", "binary_embeddings", "dim_select", "homogeneous_map", "kernel_pca", "kernels", "klsh",
        "rmmh", "binary")},
    **{f"retrieval.indexing.{m}": f"retrieval.search.{m}" for m in (
        "ivfadc", "kernel_search", "kernel_exact", "invfile", "dissimilarities")},
}


def canonical_class(qualified: str) -> str:
    """``qualified`` (``"module.Class"`` from a file header) with a 0.1.x module path mapped to today's."""
    module_name, _, cls_name = qualified.rpartition(".")
    return f"{LEGACY_MODULES.get(module_name, module_name)}.{cls_name}"


class PersistableMixin:
    """``save(path)`` / ``Class.load(path)`` for estimators following the scikit-learn contract.

    Saved: the ``__init__`` parameters (read back from attributes of the same name; must be JSON-able or a
    numpy Generator/None for ``random_state``), every attribute ending in ``_`` that is an ndarray (as an
    array member) or a JSON-able value. Subclasses with nested estimators override ``_extra_state`` /
    ``_set_extra_state``.
    """

    def _extra_state(self) -> tuple[dict, dict]:
        """Return (json_attributes, arrays) beyond the automatic ones."""
        return {}, {}

    def _set_extra_state(self, attributes: dict, arrays: dict) -> None:
        return None

    def save(self, path) -> Path:
        """Save to ``path`` (``.npz`` appended when missing) atomically; return the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        params = init_params(self)
        if "random_state" in params and not (params["random_state"] is None or isinstance(params["random_state"], int)):
            params["random_state"] = None
        attributes, arrays = {}, {}
        for name, value in vars(self).items():
            if not name.endswith("_") or name.startswith("_"):
                continue
            if isinstance(value, np.ndarray):
                arrays[name] = value
            elif value is None or isinstance(value, (bool, int, float, str, list, dict, np.generic)):
                attributes[name] = _jsonable(value)
        extra_attrs, extra_arrays = self._extra_state()
        attributes.update(_jsonable(extra_attrs))
        arrays.update(extra_arrays)
        header = {
            "format": ESTIMATOR_FORMAT,
            "format_version": ESTIMATOR_FORMAT_VERSION,
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "library_version": __version__,
            "params": params,
            "attributes": attributes,
            "arrays": sorted(arrays),
        }
        blob = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), dtype=np.uint8)
        with atomic_write(path) as fh:
            np.savez(fh, __header__=blob, **{k: np.asarray(v) for k, v in arrays.items()})
        return path

    @classmethod
    def load(cls, path):
        """Load an estimator saved by :meth:`save`. Checks format, version and class."""
        header, arrays = read_estimator_file(path)
        expected = f"{cls.__module__}.{cls.__qualname__}"
        if canonical_class(header["class"]) != expected:
            raise FormatError(f"{path}: holds a {header['class']}, not a {expected}.")
        obj = cls(**header["params"])
        extra_attrs = {}
        for name, value in header["attributes"].items():
            if name.endswith("_"):
                setattr(obj, name, value)
            else:
                extra_attrs[name] = value
        extra_arrays = {}
        for name, value in arrays.items():
            if name.endswith("_"):
                setattr(obj, name, value)
            else:
                extra_arrays[name] = value
        obj._set_extra_state(extra_attrs, extra_arrays)
        return obj


def read_estimator_file(path) -> tuple[dict, dict]:
    """Read an estimator ``.npz``: return (header dict, {name: ndarray}). Never unpickles."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such model file.")
    try:
        with np.load(path, allow_pickle=False) as z:
            if "__header__" not in z.files:
                raise FormatError(f"{path}: not a retrieval model file (no __header__ member).")
            header = json.loads(bytes(z["__header__"]).decode("utf-8"))
            arrays = {k: z[k] for k in z.files if k != "__header__"}
    except FormatError:
        raise
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: cannot read model file: {exc}") from None
    if header.get("format") != ESTIMATOR_FORMAT:
        raise FormatError(f"{path}: format {header.get('format')!r}, expected {ESTIMATOR_FORMAT!r}.")
    if header.get("format_version") != ESTIMATOR_FORMAT_VERSION:
        raise FormatError(
            f"{path}: format version {header.get('format_version')!r}; this library reads version "
            f"{ESTIMATOR_FORMAT_VERSION}."
        )
    return header, arrays


def load_estimator(path):
    """Load any estimator file, instantiating the class named in its header (only ``retrieval.*`` classes)."""
    header, _ = read_estimator_file(path)
    qual = canonical_class(header["class"])
    module_name, _, cls_name = qual.rpartition(".")
    if not module_name.startswith("retrieval."):
        raise FormatError(f"{path}: refuses to load class {qual!r} from outside the retrieval package.")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls.load(path)


_CRASH_AT: list[str] = []


def set_crash_point(name: str | None) -> None:
    """Arm the fault-injection hook (:func:`crash_point`) at the point ``name`` (None: disarm). Called by the
    command line when ``RETRIEVAL_CRASH_AT`` is set; nothing below the command line reads the environment."""
    _CRASH_AT[:] = [name] if name else []


def crash_point(name: str) -> None:
    """The one fault-injection hook of the persistence steps (crash-safety tests).

    When armed at ``name`` (:func:`set_crash_point`), the process kills itself with SIGKILL (the equivalent of
    ``kill -9``): no clean-up, no ``finally`` block, no flush runs. Does nothing otherwise. Points (all in the
    application's writers and :meth:`retrieval.app.folder.IndexFolder.publish`, never inside an algorithm):
    ``extract`` (features half stored), ``train`` (model trained, not saved), ``encode`` (half the new images
    encoded), ``array`` (inside a file of a new generation, :func:`write_array`), ``publish`` (new generation
    folder renamed, catalog not yet written), ``catalog`` (inside the catalog transaction), ``commit`` (just
    after it).
    """
    if _CRASH_AT and _CRASH_AT[0] == name:
        logger.warning("crash point %s: killing the process (fault injection)", name)
        os.kill(os.getpid(), signal.SIGKILL)


def write_array(path, array: np.ndarray) -> None:
    """Write one ``.npy`` (fsynced) in two halves with the ``array`` crash point between them.

    Callers write into a temporary generation folder that is renamed only when complete, so a half-written
    file is never visible."""
    array = np.ascontiguousarray(array)
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(array))
        raw = array.reshape(-1).view(np.uint8)
        half = len(raw) // 2
        fh.write(raw[:half])
        fh.flush()
        crash_point("array")
        fh.write(raw[half:])
        fh.flush()
        os.fsync(fh.fileno())
