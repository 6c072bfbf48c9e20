"""A sharded index: the codes and ids of a ``global`` preset split into S shards by a stable hash of the image id.

``retrieval index PHOTO_DIR --shards S`` stores S in the catalog (meta ``shards``) when the index is created. A
generation folder of a sharded index holds ``state.json`` (``sharded: S``) and one folder per shard,
``shard-000`` ... , each a complete generation state of the ``global`` backend (``ids.npy``, ``vectors.npy`` and,
from ``index.min_images`` images on, ``ivfadc/``) holding the images with :func:`shard_of` ``(id) == s``.

The IVFADC quantisers are trained once, on the whole collection exactly as the unsharded index trains them; each
shard fills its own inverted lists with them. A search sends the query vector to every shard
(:func:`shard_top`: in this process, or on the workers of a Dask cluster through
:class:`retrieval.app.cluster.RemoteShards`); each returns its best candidates, and :func:`merge_tops` keeps the
global best: IVFADC candidates by (ADC distance, id) up to ``index.shortlist``, then the top ``k`` by (exact inner
product descending, id) -- the unsharded index's ordering, so the ranked lists are the same. Spatial re-ranking and
query expansion then run on the client, unchanged.

The object presets (``accurate``, ``object``) are sharded the same way (:mod:`retrieval.engine.object.parts`): each
segment holds the images of one shard (its own postings, signatures and forward index; ``shard`` in the
generation's list), and a search scores every shard's segments as one collection (with idf, under the document
frequencies of all shards' images, each image's normalisation recomputed under them), so the lists are those of the
unsharded index. Their shards are searched in the process that opened the index.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from retrieval.core.checks import ParamError
from retrieval.core.persistence import fsync_dir
from retrieval.engine.backend import (
    STATE_FORMAT,
    STATE_FORMAT_VERSION,
    write_npy,
    write_state_header,
)
from retrieval.engine.first_stages import VectorStage, merge_candidates
from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.hits import Hit
from retrieval.engine.pipeline import make_backend
from retrieval.engine.segments import shard_of  # noqa: F401 (part of this module's API)

MAX_SHARDS = 4096

logger = logging.getLogger(__name__)


def check_shards(preset: dict, n_shards) -> int:
    """``n_shards`` as an int, refused (ValueError, one line) below 1, above :data:`MAX_SHARDS`, or > 1 for a preset
    whose backend cannot be sharded (``global`` presets with ``index.type`` exhaustive / ivfadc and the object
    presets can)."""
    if isinstance(n_shards, bool) or not isinstance(n_shards, (int, np.integer)) or not 1 <= n_shards <= MAX_SHARDS:
        raise ParamError("shards", n_shards, f"an integer from 1 to {MAX_SHARDS}")
    if n_shards > 1 and not make_backend(preset).shardable:
        raise ParamError("shards", n_shards, template=(
            "{shards} {value}: preset {preset!r} (kind {kind}) cannot be sharded; sharding needs a 'global' preset "
            "with index.type 'flat' or 'ivfadc' (e.g. default) or an object preset (accurate, object)."),
            preset=preset["name"], kind=preset["kind"])
    return int(n_shards)


def make_index_backend(preset: dict, n_shards: int = 1):
    """The backend of an index: :func:`make_backend`, or a :class:`GlobalBackend` whose first stage is a
    :class:`ShardedStage` when ``n_shards`` > 1."""
    if n_shards > 1 and preset.get("kind") == "object":
        from retrieval.engine.object.backend import ObjectBackend

        return ObjectBackend(preset, n_shards)
    if n_shards > 1:
        return GlobalBackend(preset, stage=lambda p, effective: ShardedStage(p, effective, n_shards))
    return make_backend(preset)


def load_shard(preset: dict, folder) -> VectorStage:
    """One shard's state (no model: only first-stage data is used)."""
    shard = VectorStage(preset, {})
    shard.load_state(Path(folder))
    return shard


def shard_top(shard: VectorStage, q: np.ndarray, k: int, short: int) -> tuple:
    """One shard's candidates for the query vector ``q`` (:meth:`VectorStage.candidates
    <retrieval.engine.first_stages.VectorStage.candidates>`; the client keeps the global best)."""
    return shard.candidates(q, k, short)


def merge_tops(tops, k: int, short: int, reference_ip: float = 1.0) -> list[Hit]:
    """The global top ``k`` from every shard's :func:`shard_top`, ordered and scored as the unsharded index does
    (:func:`retrieval.engine.first_stages.merge_candidates`)."""
    return merge_candidates(tops, k, short, reference_ip)


class ShardedStage(VectorStage):
    """The first stage of a ``global`` preset whose searchable state is split into ``n_shards`` shards (module
    docstring).

    Adding and removing work on the whole collection's ids and vectors, assembled from the shards when a writer
    first needs them; searching reads only the shards, in this process or on a cluster (:meth:`use_remote`).
    """

    def __init__(self, preset: dict, effective: dict, n_shards: int):
        super().__init__(preset, effective)
        self.n_shards = int(n_shards)
        self.shards: list[VectorStage] = []
        self.folders: list[Path] = []
        self.remote = None
        self._assembled = True

    # ------------------------------------------------------------------ state
    def _assemble(self) -> None:
        """Whole-collection ids / vectors from the loaded shards, by id (a writer's view)."""
        if self._assembled:
            return
        ids = np.concatenate([s.ids for s in self.shards]) if self.shards else np.empty(0, np.int64)
        order = np.argsort(ids, kind="stable")
        self._ids = ids[order]
        if self.shards and len(ids):
            self._vectors = np.concatenate([np.asarray(s.vectors) for s in self.shards])[order]
        else:
            self._vectors = None
        self._assembled = True

    @property
    def ids(self) -> np.ndarray:
        if not self._assembled:
            return np.sort(np.concatenate([s.ids for s in self.shards]))
        return self._ids

    def add(self, ids, chunks) -> None:
        self._assemble()
        super().add(ids, chunks)

    def add_vectors(self, ids, vectors) -> None:
        self._assemble()
        super().add_vectors(ids, vectors)

    def remove(self, ids) -> None:
        self._assemble()
        super().remove(ids)

    def save_state(self, folder: Path, dim) -> None:
        self._assemble()
        folder = Path(folder)
        vectors = np.zeros((0, dim()), np.float32) if self._vectors is None else np.asarray(self._vectors)
        ix = self.config.index
        ivf = self.build_ivfadc(vectors, self._ids) if ix.type == "ivfadc" and len(self._ids) >= ix.min_images \
            else None
        which = shard_of(self._ids, self.n_shards)
        for s in range(self.n_shards):
            rows = np.flatnonzero(which == s)
            rows = rows[np.argsort(self._ids[rows], kind="stable")]
            sub = folder / f"shard-{s:03d}"
            sub.mkdir()
            write_npy(sub / "ids.npy", self._ids[rows])
            write_npy(sub / "vectors.npy", vectors[rows])
            if ivf is not None:
                part = ivf.empty_like()
                part.add(vectors[rows], ids=self._ids[rows])
                part.save(sub / "ivfadc")
            write_state_header(sub, self.kind, ntotal=int(len(rows)), dim=int(vectors.shape[1]),
                               ivfadc=ivf is not None)
            fsync_dir(sub)
        write_state_header(folder, self.kind, ntotal=int(len(self._ids)), dim=int(vectors.shape[1]),
                           ivfadc=ivf is not None, sharded=self.n_shards)
        self.ivf = ivf   # the writer's in-memory view searches like the unsharded index until reloaded

    def load_state(self, folder: Path | None) -> None:
        self._close_remote()
        if folder is None:
            super().load_state(None)
            self.shards, self.folders, self._assembled = [], [], True
            return
        folder = Path(folder)
        header = json.loads((folder / "state.json").read_text("utf-8"))
        if header.get("format") != STATE_FORMAT or header.get("format_version") != STATE_FORMAT_VERSION or \
                header.get("sharded") != self.n_shards:
            raise ValueError(f"{folder}: not a state of {self.n_shards} shards (state.json: format "
                             f"{header.get('format')!r} version {header.get('format_version')!r}, sharded "
                             f"{header.get('sharded')!r}).")
        self.folders = [folder / f"shard-{s:03d}" for s in range(self.n_shards)]
        self.shards = [load_shard(self.preset, f) for f in self.folders]
        self._ids, self._vectors, self.ivf = np.empty(0, np.int64), None, None
        self._assembled = False

    # ------------------------------------------------------------------ search
    def use_remote(self, client) -> bool:
        """Search on the workers of a Dask ``client``: each shard is loaded and held by a worker."""
        from retrieval.app.cluster import RemoteShards

        self._close_remote()
        if self.folders:
            self.remote = RemoteShards(client, self.preset, self.folders, load_shard, shard_top)
        return True

    def _close_remote(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None

    def search(self, q: np.ndarray, k: int, *, reference=None, **options) -> list[Hit]:
        if self._assembled:   # a writer's in-memory state (not saved yet): the unsharded first stage
            return super().search(q, k, reference=reference)
        short = max(k, self.config.index.shortlist)
        if self.remote is not None:
            tops = self._remote_top(q, k, short)
        else:
            tops = [shard_top(s, q, k, short) for s in self.shards]
        n = sum(len(s.ids) for s in self.shards)
        return merge_tops(tops, k, min(short, n), self.reference_ip(q, reference))

    def _remote_top(self, q, k, short, attempts: int = 3) -> list:
        """The shards' candidates from the workers; a lost worker's shards are loaded again (up to ``attempts``
        tries, the scheduler needing a moment to notice the loss)."""
        client = self.remote.client
        for attempt in range(attempts):
            try:
                if self.remote is None:
                    self.use_remote(client)
                return self.remote.top(q, k, short)
            except Exception:  # noqa: BLE001 - an actor's worker was lost
                if attempt == attempts - 1:
                    raise
                logger.warning("a worker holding shards was lost; loading the shards again")
                time.sleep(0.5 * attempt)
                try:
                    self.use_remote(client)
                except Exception:  # noqa: BLE001 - the lost worker was chosen again: next attempt
                    continue
        raise AssertionError("unreachable")

    def vectors_of(self, ids) -> np.ndarray | None:
        if self._assembled:
            return super().vectors_of(ids)
        which = shard_of(ids, self.n_shards)
        out = np.empty((len(ids), self.shards[0].vectors.shape[1] if self.shards else 0), np.float32)
        for j, (i, s) in enumerate(zip(ids, which, strict=True)):
            shard = self.shards[int(s)]
            out[j] = shard.vectors[int(shard.rows_of([int(i)])[0])]
        return out


def shard_count(catalog) -> int:
    """The index's number of shards (catalog meta ``shards``; 1 for an index made without ``--shards``)."""
    return int(catalog.get_meta("shards") or 1)

