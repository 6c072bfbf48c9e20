"""The interface every backend implements (:class:`Backend`) and the state files of an index generation.

A backend is chosen by :func:`retrieval.engine.pipeline.make_backend` from the preset's ``kind``. The interface:
``train(features_of, n_images)`` learns the model from a sample of the collection's features, ``save_model`` /
``load_model`` persist it in the index's ``model/`` folder, ``add(ids, features)`` / ``remove(ids)`` change the
searchable state, ``save_state(folder)`` / ``load_state(folder)`` persist that state in one *generation* folder of
the index (``state.json`` + ``.npy`` arrays written by :func:`write_npy`), and ``search(features, k, ...)`` returns
:class:`retrieval.engine.hits.Hit` records, best first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retrieval.core.cache import BytesLRU
from retrieval.core.persistence import atomic_write, crash_point
from retrieval.engine.config import Preset
from retrieval.engine.hits import Hit
from retrieval.engine.presets import preset_config

STATE_FORMAT = "retrieval-index-state"
STATE_FORMAT_VERSION = 1


def write_npy(path, array: np.ndarray) -> None:
    """Write one ``.npy`` in two halves with the ``array`` crash point between them (fault-injection tests).

    Callers write into a temporary generation folder that is renamed only when complete, so a half-written
    file is never visible.
    """
    array = np.ascontiguousarray(array)
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(array))
        raw = array.tobytes()
        half = len(raw) // 2
        fh.write(raw[:half])
        fh.flush()
        crash_point("array")
        fh.write(raw[half:])
        fh.flush()
        os.fsync(fh.fileno())


def read_npy(path, mmap: bool = True) -> np.ndarray:
    """Read an ``.npy`` (memory-mapped when ``mmap``), never unpickling."""
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def append_rows(old, new: np.ndarray) -> np.ndarray:
    """``new`` (m, w) appended below the stored rows ``old`` (n, w) (None: no rows yet; memory-mapped: read)."""
    old = np.zeros((0, new.shape[1]), new.dtype) if old is None else np.asarray(old)
    return np.concatenate([old, new], axis=0)


def write_state_header(folder: Path, kind: str, **fields) -> None:
    """Write the ``state.json`` of a generation folder (atomically): this module's format and version, the backend
    ``kind`` and the backend's own ``fields``."""
    header = {"format": STATE_FORMAT, "format_version": STATE_FORMAT_VERSION, "kind": kind, **fields}
    with atomic_write(Path(folder) / "state.json", "w") as fh:
        json.dump(header, fh, indent=2, sort_keys=True)


def check_state_header(folder: Path, kind: str) -> dict:
    """The ``state.json`` of a generation folder, refused (ValueError naming the folder) unless it has this
    module's format, version and the backend ``kind``."""
    header = json.loads((folder / "state.json").read_text("utf-8"))
    if header.get("format") != STATE_FORMAT or header.get("format_version") != STATE_FORMAT_VERSION or \
            header.get("kind") != kind:
        raise ValueError(f"{folder}: index state {header.get('format')!r} version {header.get('format_version')!r} "
                         f"kind {header.get('kind')!r}; expected {STATE_FORMAT!r} {STATE_FORMAT_VERSION} {kind!r}.")
    return header


def query_expansion_count(preset_value: int, asked, rerank: str) -> int:
    """Verified hits averaged into the query: ``asked`` (``--qe``) or the preset's ``search.query_expansion``;
    0 without spatial re-ranking (nothing is verified), and an explicit request then is an error."""
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, (int, np.integer)) or asked < 0:
            raise ValueError(f"query_expansion must be an int >= 0 (verified hits averaged into the query); "
                             f"got {asked!r}.")
        if asked and rerank != "spatial":
            raise ValueError(f"query expansion ({asked}) averages verified hits: it needs --rerank spatial, "
                             f"got {rerank!r}.")
        return int(asked)
    return int(preset_value) if rerank == "spatial" else 0


VERIFICATION_CACHE_MB = 256
"""Default memory budget of a backend's verification cache (environment variable ``RETRIEVAL_VERIFY_CACHE_MB``;
0 disables it). About 130 kB per Holidays photo for the ``default`` preset: 256 MB keep about 2,000 images."""


def verification_cache_bytes() -> int:
    """The verification cache budget in bytes: ``RETRIEVAL_VERIFY_CACHE_MB`` (a number >= 0) or the default."""
    raw = os.environ.get("RETRIEVAL_VERIFY_CACHE_MB")
    if raw is None or raw.strip() == "":
        return VERIFICATION_CACHE_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise ValueError(f"RETRIEVAL_VERIFY_CACHE_MB must be a number of megabytes >= 0; got {raw!r}.")
    return int(mb * (1 << 20))


class Backend:
    """The interface every preset kind implements (see the module docstring)."""

    kind = "abstract"

    def __init__(self, preset: dict):
        self.preset = preset
        self.trained = False
        self.effective = {}  # preset parameters reduced to fit the training data (record_reduction)
        # what spatial re-ranking reads of each database image, kept across searches by image id (ids are never
        # reused and an id always names the same content); a server hands it to the next generation's backend
        # when the model is the same (retrieval.web.service.SharedBackends)
        self.verification_cache = BytesLRU(verification_cache_bytes())
        self.model_signature = None   # the model manifest's hash, set when the model is loaded from an index

    @property
    def config(self) -> Preset:
        """The typed view of ``self.preset`` (parsed on each access: the dict stays the source of truth)."""
        return preset_config(self.preset)

    # model
    def train(self, features_of: Callable[[int], object], n_images: int, progress=None) -> None:
        raise NotImplementedError

    def save_model(self, folder: Path) -> dict:
        raise NotImplementedError

    def load_model(self, folder: Path, info: dict) -> None:
        raise NotImplementedError

    # state
    def add(self, ids: np.ndarray, features: Sequence, progress=None) -> None:
        raise NotImplementedError

    def remove(self, ids) -> None:
        raise NotImplementedError

    def save_state(self, folder: Path) -> None:
        raise NotImplementedError

    def load_state(self, folder: Path | None) -> None:
        raise NotImplementedError

    @property
    def ids(self) -> np.ndarray:
        raise NotImplementedError

    def search(self, query, *, k: int, query_box, method=None, rerank=None, get_features=None,
               query_expansion=None, shortlist=None, **options) -> list[Hit]:
        """Ranked hits, best first, ordered by :func:`retrieval.engine.hits.finish_ranking`; ``query_expansion``
        (None: the preset's ``search.query_expansion``) is :func:`query_expansion_count`'s ``asked``;
        ``shortlist`` (None: the preset's) is the number of first-stage results spatially verified."""
        raise NotImplementedError
