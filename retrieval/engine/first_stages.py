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

__all__ = ["FirstStage", "VectorStage", "merge_candidates"]


class FirstStage:
    """The interface of a first stage (module docstring): its trained part (``fit``, ``save_model``,
    ``load_model``), its state (``add``, ``remove``, ``save_state``, ``load_state``, ``ids``) and ``search``."""

    kind = "global"                # the backend kind written in a generation's state.json
    stores_vectors = False         # the global vectors themselves are stored (add_vectors, vectors_of)
    shardable = False              # retrieval.app.shards can split the state

    def __init__(self, preset: dict, effective: dict):
        self.preset = preset
        self.config = preset_config(preset)   # the typed view, parsed once (the dict stays the source of truth)
        self.effective = effective
        self._ids = np.empty(0, np.int64)


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

    def empty_part(self) -> FirstStage:
        """An empty stage sharing this one's trained model (a segment of
        :class:`retrieval.engine.segments.SegmentedStage`)."""
        raise NotImplementedError

    def row_arrays(self) -> dict:
        """The per-row arrays of the state, aligned with :attr:`ids` (what a segment merge copies)."""
        raise NotImplementedError

    def from_rows(self, ids, arrays) -> None:
        """Set the state to the rows ``ids`` (increasing) holding ``arrays`` (of :meth:`row_arrays`)."""
        raise NotImplementedError

    def absorb(self, parts) -> None:
        """Set the state to the live rows of ``parts`` (a list of ``(stage, dead ids)``), ordered by id: the
        merge of segments (the rows of ``dead`` are dropped). The rows are copied once: a part without deleted
        rows is read as it is (memory-mapped), and parts whose id ranges follow each other (the usual case: ids
        grow with time) need no reordering."""
        parts = sorted(parts, key=lambda part: int(part[0].ids[0]) if len(part[0].ids) else 0)
        ids, arrays = [], {}
        for stage, dead in parts:
            stored = np.asarray(stage.ids)
            keep = ~np.isin(stored, dead) if len(dead) else None
            ids.append(stored if keep is None else stored[keep])
            for name, arr in stage.row_arrays().items():
                if arr is not None:
                    arrays.setdefault(name, []).append(arr if keep is None else np.asarray(arr)[keep])
        ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
        if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
            order = np.argsort(ids, kind="stable")
            self.from_rows(ids[order], {name: np.concatenate(a)[order] for name, a in arrays.items()})
        else:
            self.from_rows(ids, {name: np.concatenate(a) for name, a in arrays.items()})

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
    methods = ("ip",)
    """The scorings this stage offers (checked by :meth:`retrieval.engine.params.SearchParams.resolve`)."""

    def method_options(self, method: str) -> dict:
        """The search options of ``method``, one of :attr:`methods` (already checked)."""
        return {}

    def search(self, q: np.ndarray, k: int, *, reference: np.ndarray | None = None, **options) -> list[Hit]:
        """The top ``k`` for the query vector ``q``, best first, each hit's ``similarity`` relative to the score of
        the stored form of ``reference`` (default ``q``: the query photo itself scores 1; query expansion passes
        the original query's vector when it searches with the expanded one)."""
        raise NotImplementedError

    def vectors_of(self, ids) -> np.ndarray | None:
        """The stored global vectors of ``ids`` (None: this stage keeps only codes)."""
        return None

    def use_remote(self, client) -> bool:
        """Search on the workers of a Dask ``client`` (only sharded stages can); False when not offered."""
        return False

    def segment_info(self) -> dict | None:
        """``{"segments", "rows", "live", "quantizer_nlist"}`` of a segmented state (None: one state per
        generation)."""
        return None

    def plan_compaction(self, *, merge_all: bool, retrain: bool) -> bool:
        """Ask the next save to merge every segment into one (``merge_all``) and/or to train the IVFADC quantiser
        again (``retrain``); False when the stage is not segmented."""
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
        self.quantizer = None   # a trained, empty IVFADC whose lists save_state fills (retrieval.engine.segments)

    def empty_part(self) -> VectorStage:
        """An empty stage of the same preset (a segment of :class:`retrieval.engine.segments.SegmentedStage`)."""
        return VectorStage(self.preset, self.effective)

    def row_arrays(self) -> dict:
        """The per-row arrays of the state, in the order of :attr:`ids` (a segment merge reads them)."""
        return {"vectors": self._vectors}

    def from_rows(self, ids, arrays) -> None:
        """Set the state to rows ``ids`` (increasing) with ``arrays`` of :meth:`row_arrays`."""
        self._ids = np.asarray(ids, np.int64)
        self._vectors = np.asarray(arrays["vectors"], dtype=self._vector_dtype)
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
        with_ivfadc = self.quantizer is not None
        if with_ivfadc:   # the inverted lists of these rows, with quantisers trained once (SegmentedStage)
            self.ivf = self.quantizer.empty_like()
            for a in range(0, len(vectors), 65536):
                self.ivf.add(np.asarray(vectors[a:a + 65536], np.float32), ids=self._ids[a:a + 65536])
            self.ivf.save(folder / "ivfadc")
        write_state_header(folder, self.kind, ntotal=int(len(self._ids)), dim=int(vectors.shape[1]),
                           ivfadc=with_ivfadc)

    def build_ivfadc(self, vectors, ids):
        """An IVFADC trained on ``vectors`` (float32) and filled with them under ``ids``."""
        ivf = self.train_quantizer(vectors, len(vectors))
        ivf.add(vectors, ids=ids)
        return ivf

    def train_quantizer(self, sample, n: int):
        """An empty IVFADC (coarse quantiser and residual PQ) trained on ``sample`` (float32 rows of the
        collection) for a collection of ``n`` images: ``nlist = min(index.nlist, n // 39)``."""
        cfg = self.config
        ix = cfg.index
        vectors = np.asarray(sample, np.float32)
        nlist = int(min(ix.nlist, max(1, n // 39), len(vectors)))
        M = ix.M
        if vectors.shape[1] % M:
            M = next(m for m in (32, 16, 8, 4, 2, 1) if vectors.shape[1] % m == 0)
        from retrieval.search import IVFADC

        ivf = IVFADC(nlist=nlist, M=M, nbits=ix.nbits, nprobe=min(ix.nprobe, nlist),
                     random_state=cfg.training.random_state)
        return ivf.fit(vectors)

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

    def rows_of(self, ids) -> np.ndarray:
        """Rows of ``ids`` (stored in increasing order: a binary search, no map of every id); -1 for an id not
        stored."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if len(self._ids) == 0:
            return np.full(len(ids), -1, np.int64)
        pos = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
        return np.where(self._ids[pos] == ids, pos, -1)

    def candidates(self, q: np.ndarray, k: int, short: int) -> tuple:
        """This stage's candidates for ``q``: ``(ids, ip, adc)`` -- without IVFADC the top ``k`` ids by (inner
        product descending, id) and ``adc`` None; with IVFADC its ``short`` best ids by ADC distance, their
        distances ``adc`` and exact inner products ``ip``. :func:`merge_candidates` merges several stages' (the
        segments of :class:`retrieval.engine.segments.SegmentedStage`, the shards of a sharded index) exactly as
        one stage holding all their rows ranks them."""
        n = len(self._ids)
        if n == 0:
            return np.empty(0, np.int64), np.empty(0, np.float64), None
        if self.ivf is not None:
            D, cand = self.ivf.search(q[None, :], min(short, n))
            keep = cand[0] >= 0
            cand, D = cand[0][keep], D[0][keep]
            rows = self.rows_of(cand)
            order = np.argsort(rows)
            ip = np.empty(len(rows), np.float64)
            ip[order] = np.asarray(np.asarray(self._vectors[rows[order]], np.float32) @ q, np.float64)
            return cand.astype(np.int64), ip, D.astype(np.float64)
        scores = np.asarray(np.asarray(self._vectors, dtype=np.float32) @ q, dtype=np.float64)
        kk = min(k, n)
        top = np.argpartition(-scores, kk - 1)[:kk]
        top = top[np.lexsort((self._ids[top], -scores[top]))]
        return self._ids[top].astype(np.int64), scores[top], None

    def reference_ip(self, q: np.ndarray, reference: np.ndarray | None = None) -> float:
        """The inner product of ``q`` with ``reference`` (default ``q``) as this stage stores it (rounded to
        ``index.vectors``), computed in float32 as the stored rows are: what ``similarity`` 1 means. A reference
        that ``q`` scores at most 0 (an expanded query turned away from the original one) is replaced by ``q``."""
        q = np.asarray(q, np.float32)
        for r in ((q,) if reference is None else (np.asarray(reference, np.float32), q)):
            ip = float(np.dot(r.astype(self._vector_dtype).astype(np.float32), q))
            if ip > 0.0:
                return ip
        return 0.0

    def search(self, q: np.ndarray, k: int, *, reference: np.ndarray | None = None, **options) -> list[Hit]:
        """Top ``k`` by inner product (exhaustive) or by IVFADC distance then exact inner product; ``similarity``
        = ``ip / reference_ip`` clipped to [0, 1] (:meth:`reference_ip`,
        :func:`retrieval.engine.hits.similarity_from_ip`)."""
        short = max(k, self.config.index.shortlist)
        return merge_candidates([self.candidates(q, k, short)], k, min(short, len(self._ids)),
                                self.reference_ip(q, reference))

    def vectors_of(self, ids) -> np.ndarray | None:
        if self._vectors is None:
            return None
        rows = self.rows_of(ids)
        if (rows < 0).any():
            raise KeyError(f"image id {int(np.asarray(ids)[rows < 0][0])} is not stored")
        return np.asarray(self._vectors[rows], dtype=np.float32)


def merge_candidates(tops, k: int, short: int, reference_ip: float = 1.0) -> list[Hit]:
    """The top ``k`` of several :meth:`VectorStage.candidates`, as first-stage hits (``similarity`` =
    ``ip / reference_ip`` clipped to [0, 1], ``reference_ip`` from :meth:`VectorStage.reference_ip`; 1: a unit
    query stored in float32): IVFADC candidates kept by (ADC distance, id) up to ``short``, then ordered by (exact
    inner product descending, id) -- the order of one stage holding every row."""
    ids = np.concatenate([t[0] for t in tops]) if tops else np.empty(0, np.int64)
    ip = np.concatenate([t[1] for t in tops]) if tops else np.empty(0, np.float64)
    if len(ids) == 0:
        return []
    if any(t[2] is not None for t in tops):
        adc = np.concatenate([t[2] for t in tops if t[2] is not None])
        keep = np.lexsort((ids, adc))[:short]
        ids, ip = ids[keep], ip[keep]
    order = np.lexsort((ids, -ip))[:k]
    sims = similarity_from_ip(ip[order], reference_ip)
    return [Hit(int(i), float(s), similarity=float(s)) for i, s in zip(ids[order], sims, strict=True)]
