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
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write, write_array
from retrieval.engine.hits import Hit
from retrieval.engine.params import Offer, Resolved, SearchContext
from retrieval.engine.presets import preset_config
from retrieval.rerank.verifier import Verifier

STATE_FORMAT = "retrieval-index-state"
STATE_FORMAT_VERSION = 1


def write_npy(path, array: np.ndarray) -> None:
    """Write one ``.npy`` of a generation folder (:func:`retrieval.core.persistence.write_array`)."""
    write_array(path, array)


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


VERIFICATION_CACHE_MB = 256
"""The smallest default memory budget of a searcher's verification cache (:class:`retrieval.core.cache.BytesLRU`;
the command line reads ``RETRIEVAL_VERIFY_CACHE_MB``)."""
VERIFICATION_CACHE_SHARE, VERIFICATION_CACHE_MAX_MB = 1 / 16, 2048


def default_verification_cache_mb() -> int:
    """The default budget of the verification cache: a sixteenth of the machine's memory, from 256 MB
    (:data:`VERIFICATION_CACHE_MB`) to 2,048 MB. A described image takes about 130 kB for a Holidays photo (325 px)
    and 0.7-1.4 MB for a 1,024-pixel photo (2,000-3,000 features): 1.5 GB (a 24 GB machine) keep about 1,000 to
    2,000 full-size photos, 512 MB (8 GB) 400 to 700. Only what searches verified is held (least recently used
    out)."""
    from retrieval.core.machine import share_of_memory_mb

    return share_of_memory_mb(VERIFICATION_CACHE_SHARE, VERIFICATION_CACHE_MB, VERIFICATION_CACHE_MAX_MB)


class Backend:
    """The interface every preset kind implements (see the module docstring)."""

    kind = "abstract"
    encodes_vectors = False
    shardable = False
    """True when :class:`retrieval.app.shards.ShardedStage` can split the searchable state (``global`` presets
    with ``index.type`` flat or ivfadc)."""
    """True when the searchable state is the global vectors of :meth:`encode` (``add_vectors`` takes vectors
    encoded elsewhere, e.g. by a cluster's workers)."""

    def __init__(self, preset: dict):
        self.preset = preset
        self.config = preset_config(preset)   # the typed view, parsed once (the dict stays the source of truth)
        self.trained = False
        self.effective = {}  # preset parameters reduced to fit the training data (record_reduction)


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

    def use_remote(self, client) -> bool:
        """Search on the workers of a Dask ``client`` when the backend can (a sharded index); False otherwise."""
        return False

    def segment_info(self) -> dict | None:
        """The segments of the searchable state (:mod:`retrieval.engine.segments`); None when the backend writes
        one complete state per generation."""
        return None

    def plan_compaction(self, *, merge_all: bool, retrain: bool) -> bool:
        """Ask the next save to merge every segment into one and/or to retrain the trained parts of the state
        (the IVFADC quantiser); False when the backend is not segmented."""
        return False

    verifier: Verifier | None = None
    """The geometric verification of this backend's searches (the preset's ratio and decision threshold, the
    backend's descriptor space), built once when the model is trained or loaded and never reassigned: what
    ``retrieval match --index``, the match view and the duplicate finder use too (None before a model)."""

    offer: Offer
    """The scorings and re-rankings a search may ask for (:class:`retrieval.engine.params.Offer`)."""

    def search(self, query, box, params: Resolved, context: SearchContext) -> list[Hit]:
        """Ranked hits of the query's (selected) local features ``query`` in its region ``box``, best first,
        ordered by :func:`retrieval.engine.hits.finish_ranking`; ``params`` checked against :attr:`offer`
        (:meth:`retrieval.engine.params.SearchParams.resolve`); ``context`` the call's own means (the features of
        database images, the cache of described images, the threads verifying). A search only reads the backend:
        any number of threads may search one backend at once."""
        raise NotImplementedError
