"""The first stages of the global presets: global vectors (or their codes) stored per image and ranked for a query
vector. :class:`retrieval.engine.global_backend.GlobalBackend` composes one of them with its encoder, its verifier
and query expansion.

- :class:`VectorStage` (``index.type`` flat / ivfadc): the vectors themselves, exhaustive inner product, or an
  IVFADC shortlist (Jegou et al. 2012, sec. V-A) re-scored exactly once the collection has ``index.min_images``;
- :class:`retrieval.engine.code_stages.CodesStage` (``adc`` / ``ivfadc_adc``): only PQ codes, ranked by their asymmetric distances (eq. 21-23,
  sec. VI-C), the quantisers trained with the model;
- :class:`retrieval.engine.code_stages.BinaryStage` (the ``binary`` kind): binary codes h(x) = q(g(x)) (Gordo et al. 2014, sec. 2) searched
  with the symmetric Hamming distance or the asymmetric d_E (eq. 21-26) / d_LB (eq. 30-33).

A stage's search only reads it: any number of threads may search one stage at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from retrieval.engine.backend import (
    STATE_FORMAT,
    STATE_FORMAT_VERSION,
    append_rows,
    check_state_header,
    read_npy,
    write_npy,
    write_state_header,
)
from retrieval.engine.hits import (
    Hit,
    similarity_from_ip,
)
from retrieval.engine.presets import preset_config

__all__ = ["FirstStage", "VectorStage"]


class FirstStage:
    """The interface of a first stage (module docstring): its trained part (``fit``, ``save_model``,
    ``load_model``), its state (``add``, ``remove``, ``save_state``, ``load_state``, ``ids``) and ``search``."""

    kind = "global"                # the backend kind written in a generation's state.json
    stores_vectors = False         # the global vectors themselves are stored (add_vectors, vectors_of)
    shardable = False              # retrieval.app.shards can split the state

    def __init__(self, preset: dict, effective: dict):
        self.preset = preset
        self.effective = effective
        self._ids = np.empty(0, np.int64)

    @property
    def config(self):
        return preset_config(self.preset)

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    # the trained part (codes trained with the model)
    def fit(self, encoder, features_of, n_images: int, rng) -> None:
        return None

    def save_model(self, folder: Path, info: dict) -> None:
        return None

    def load_model(self, folder: Path, info: dict) -> None:
        return None

    # the state
    def add(self, ids: np.ndarray, chunks) -> None:
        """Append images ``ids``; ``chunks`` yields ``(start, V)``: their global vectors, in order."""
        raise NotImplementedError

    def add_vectors(self, ids, vectors) -> None:
        raise ValueError(f"preset {self.preset['name']!r} does not store global vectors.")

    def remove(self, ids) -> None:
        raise NotImplementedError

    def save_state(self, folder: Path, dim) -> None:
        """Write the state into a generation folder; ``dim()``: the vector dimension (read only when the state is
        empty)."""
        raise NotImplementedError

    def load_state(self, folder: Path | None) -> None:
        raise NotImplementedError

    def _kept_rows(self, ids) -> np.ndarray | None:
        """Mask (n,) of the stored rows whose id is not in ``ids``; None when there is nothing to remove."""
        ids = np.asarray(list(ids), dtype=np.int64)
        if len(ids) == 0 or len(self._ids) == 0:
            return None
        return ~np.isin(self._ids, ids)

    def _load_ids(self, folder) -> Path | None:
        """``ids.npy`` of a generation folder whose ``state.json`` is checked (None: an empty state)."""
        if folder is None:
            self._ids = np.empty(0, np.int64)
            return None
        folder = Path(folder)
        check_state_header(folder, self.kind)
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        return folder

    # search
    def check_method(self, method: str) -> dict:
        """The search options of ``method`` (``search.method`` or ``--method``); ValueError when not offered."""
        if method not in ("ip",):
            raise ValueError(f"--method {method!r} is not offered by preset {self.preset['name']!r} "
                             f"(kind global): use 'ip' (inner product of global vectors).")
        return {}

    def search(self, q: np.ndarray, k: int, **options) -> list[Hit]:
        raise NotImplementedError

    def vectors_of(self, ids) -> np.ndarray | None:
        """The stored global vectors of ``ids`` (None: this stage keeps only codes)."""
        return None

    def use_remote(self, client) -> bool:
        """Search on the workers of a Dask ``client`` (only sharded stages can); False when not offered."""
        return False


class VectorStage(FirstStage):
    """``ids.npy`` (n,) int64, ``vectors.npy`` (n, D') unit rows of type ``index.vectors`` (float32, or float16 for
    the ``default`` preset: half the bytes, inner products within 1e-3; products are computed in float32; a
    generation is read in the type it was written in), and ``ivfadc/`` (:class:`retrieval.search.IVFADC`) once the
    collection reached ``index.min_images`` with ``index.type == "ivfadc"``."""

    stores_vectors = True
    shardable = True

    def __init__(self, preset: dict, effective: dict):
        super().__init__(preset, effective)
        self._vectors = None
        self.ivf = None

    @property
    def vectors(self):
        """The stored global vectors (n, D') in the order of :attr:`ids` (memory-mapped once loaded), or None."""
        return self._vectors

    @property
    def _vector_dtype(self):
        return np.dtype(self.config.index.vectors)

    def add(self, ids, chunks) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        V = np.concatenate([V for _, V in chunks], axis=0)
        self._vectors = append_rows(self._vectors, V.astype(self._vector_dtype))
        self._ids = np.concatenate([self._ids, ids])
        self.ivf = None  # rebuilt at save time

    def add_vectors(self, ids, vectors) -> None:
        """Append vectors already encoded with this model (e.g. by the workers of a cluster)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        self._vectors = append_rows(self._vectors, np.asarray(vectors, dtype=self._vector_dtype))
        self._ids = np.concatenate([self._ids, ids])
        self.ivf = None  # rebuilt at save time

    def remove(self, ids) -> None:
        keep = self._kept_rows(ids)
        if keep is None:
            return
        self._ids = self._ids[keep]
        self._vectors = np.asarray(self._vectors)[keep]
        self.ivf = None

    def save_state(self, folder: Path, dim) -> None:
        folder = Path(folder)
        vectors = (np.zeros((0, dim()), self._vector_dtype) if self._vectors is None
                   else np.asarray(self._vectors, dtype=self._vector_dtype))
        write_npy(folder / "ids.npy", self._ids)
        write_npy(folder / "vectors.npy", vectors)
        vectors = vectors.astype(np.float32)
        ix = self.config.index
        with_ivfadc = ix.type == "ivfadc" and len(self._ids) >= ix.min_images
        if with_ivfadc:
            self.ivf = self.build_ivfadc(vectors, self._ids)
            self.ivf.save(folder / "ivfadc")
        write_state_header(folder, self.kind, ntotal=int(len(self._ids)), dim=int(vectors.shape[1]),
                           ivfadc=with_ivfadc)

    def build_ivfadc(self, vectors, ids):
        """An IVFADC trained on ``vectors`` (float32) and filled with them under ``ids``."""
        cfg = self.config
        ix = cfg.index
        n = len(vectors)
        nlist = int(min(ix.nlist, max(1, n // 39)))
        M = ix.M
        if vectors.shape[1] % M:
            M = next(m for m in (32, 16, 8, 4, 2, 1) if vectors.shape[1] % m == 0)
        from retrieval.search import IVFADC

        ivf = IVFADC(nlist=nlist, M=M, nbits=ix.nbits, nprobe=min(ix.nprobe, nlist),
                     random_state=cfg.training.random_state)
        ivf.fit(vectors)
        ivf.add(vectors, ids=ids)
        return ivf

    def load_state(self, folder: Path | None) -> None:
        if folder is None:
            self._ids = np.empty(0, np.int64)
            self._vectors = None
            self.ivf = None
            return
        folder = Path(folder)
        header = json.loads((folder / "state.json").read_text("utf-8"))
        if header.get("format") != STATE_FORMAT or header.get("format_version") != STATE_FORMAT_VERSION:
            raise ValueError(f"{folder}: index state format {header.get('format')!r} version "
                             f"{header.get('format_version')!r}; expected {STATE_FORMAT!r} {STATE_FORMAT_VERSION}.")
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        self._vectors = read_npy(folder / "vectors.npy", mmap=True)
        self.ivf = None
        if header.get("ivfadc"):
            from retrieval.search import IVFADC

            self.ivf = IVFADC.load(folder / "ivfadc")

    def search(self, q: np.ndarray, k: int, **options) -> list[Hit]:
        """Top ``k`` by inner product (exhaustive) or by IVFADC distance then exact inner product; ``similarity``
        = ``(1 + ip) / 2`` (:func:`retrieval.engine.hits.similarity_from_ip`)."""
        n = len(self._ids)
        if n == 0:
            return []
        if self.ivf is not None:
            short = max(k, self.config.index.shortlist)
            _, cand = self.ivf.search(q[None, :], min(short, n))
            cand = cand[0][cand[0] >= 0]
            rows = np.flatnonzero(np.isin(self._ids, cand))
            mat = self._vectors[rows]
        else:
            rows = np.arange(n)
            mat = self._vectors   # every row: no gathered copy of the matrix per query
        scores = np.asarray(np.asarray(mat, dtype=np.float32) @ q, dtype=np.float64)
        kk = min(k, len(rows))
        top = np.argpartition(-scores, kk - 1)[:kk]
        top = top[np.lexsort((self._ids[rows[top]], -scores[top]))]
        sims = similarity_from_ip(scores[top])
        return [Hit(int(self._ids[rows[t]]), float(s), similarity=float(s)) for t, s in zip(top, sims, strict=True)]

    def vectors_of(self, ids) -> np.ndarray | None:
        if self._vectors is None:
            return None
        pos = {int(i): r for r, i in enumerate(self._ids.tolist())}
        return np.asarray(self._vectors[[pos[int(i)] for i in ids]], dtype=np.float32)
