"""The ``binary`` and ``object`` backends of :mod:`retrieval.engine.pipeline` (same interface as ``GlobalBackend``).

- :class:`BinaryBackend`: the global vector of :class:`retrieval.engine.pipeline.GlobalBackend` turned into a binary
  code h(x) = q(g(x)) by an embedding of :mod:`retrieval.codes.binary` (Gordo et al. 2014, sec. 2; PCAE-ITQ by
  default) and searched with the symmetric Hamming distance or the asymmetric d_E (eq. 21-26) / d_LB (eq. 30-33)
  through the table look-up scan. State: ``ids.npy`` (n,) int64 and ``codes.npy`` (n, nbits / 8) uint8.
- :class:`ObjectBackend`: :class:`retrieval.engine.object_search.ObjectSearcher` (Zhu et al. 2013: large-vocabulary BoW in an
  inverted file, l1 / l2 / delta_1 / delta_2, exact and spatial re-ranking) adapted to the index folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write, crash_point, load_estimator
from retrieval.engine.pipeline import (
    STATE_FORMAT,
    STATE_FORMAT_VERSION,
    GlobalBackend,
    Hit,
    default_rerank,
    read_npy,
    write_npy,
)
from retrieval.engine.presets import record_reduction

logger = logging.getLogger(__name__)

BINARY_DISTANCES = ("hamming", "expectation", "expectation_hat", "lower_bound")


def _check_state_header(folder: Path, kind: str) -> dict:
    header = json.loads((folder / "state.json").read_text("utf-8"))
    if header.get("format") != STATE_FORMAT or header.get("format_version") != STATE_FORMAT_VERSION or \
            header.get("kind") != kind:
        raise ValueError(f"{folder}: index state {header.get('format')!r} version {header.get('format_version')!r} "
                         f"kind {header.get('kind')!r}; expected {STATE_FORMAT!r} {STATE_FORMAT_VERSION} {kind!r}.")
    return header


class CodesBackend(GlobalBackend):
    """Global vectors stored only as PQ codes and ranked by the codes' own asymmetric distances.

    ``index.type == "adc"``: a :class:`retrieval.codes.ProductQuantizer` (``M`` x ``nbits``) trained with the
    model; exhaustive ADC ranking (Jegou et al. 2012, eq. 21-23) through :func:`retrieval.codes.scan.lut_scan_topk`.
    State: ``ids.npy`` (n,) int64, ``codes.npy`` (n, M) uint8/uint16.
    ``index.type == "ivfadc_adc"``: a :class:`retrieval.search.IVFADC` trained with the model, updated in
    place by add/remove, ranked by its ADC distances (Jegou et al. 2012, sec. VI-C). State: ``ids.npy`` and ``ivfadc/``.
    ``score`` = minus the (squared Euclidean) ADC distance. With fewer training images than ``2**nbits`` (or
    39 x ``nlist``) the parameters are reduced with a warning (:meth:`_fit_index_model`).
    """

    def __init__(self, preset: dict):
        super().__init__(preset)
        self.pq = None
        self._codes = None

    @property
    def itype(self) -> str:
        return self.preset["index"]["type"]

    def _fit_index_model(self, features_of, n_images, rng) -> None:
        """Train the PQ (``adc``) or the IVFADC (``ivfadc_adc``) on the training images' global vectors.

        Small-collection rule (:func:`retrieval.engine.presets.record_reduction`): with ``n`` training vectors,
        ``nbits`` is reduced so that ``2**nbits <= n`` (each sub-quantiser's k-means needs at least ``ksub``
        points), ``nlist`` to the largest power of two ``<= n / 39`` (faiss's minimum of 39 training points per
        coarse centroid; at least 1), ``nprobe`` to ``nlist``, and ``M`` to the largest divisor of the vector
        dimension ``<= M``. Each reduction is one warning and is recorded in ``effective``.
        """
        ix = self.preset["index"]
        name = self.preset["name"]
        if n_images < 2:
            raise ValueError(f"preset {name!r}: its {self.itype} index needs at least 2 training images; "
                             f"got {n_images}.")
        V = self._aggregate([features_of(i) for i in range(n_images)])
        n, d = V.shape
        M, nbits = int(ix["M"]), int(ix["nbits"])
        if d % M:
            m = max(m for m in range(1, M + 1) if d % m == 0)
            record_reduction(self.effective, name, "index.M", M, m,
                             f"the {d}-d vectors split into M sub-vectors only when M divides {d}")
            M = m
        if 2 ** nbits > n:
            nb = int(np.floor(np.log2(n)))
            record_reduction(self.effective, name, "index.nbits", nbits, nb,
                             f"{n} training vectors: 2**nbits = {2 ** nbits} codewords per sub-quantiser "
                             f"need at least as many vectors (2**{nb} = {2 ** nb} <= {n})")
            nbits = nb
        seed = int(rng.integers(2**31 - 1))
        from retrieval.codes import ProductQuantizer
        from retrieval.search import IVFADC

        if self.itype == "adc":
            self.pq = ProductQuantizer(M=M, nbits=nbits, random_state=seed).fit(V)
            return
        nlist, nprobe = int(ix["nlist"]), int(ix.get("nprobe", 1))
        cap = 1 << int(np.floor(np.log2(max(1, n // 39))))
        if nlist > cap:
            record_reduction(self.effective, name, "index.nlist", nlist, cap,
                             f"{n} training vectors: the coarse k-means needs at least 39 per list "
                             f"(largest power of two <= {n}/39)")
            nlist = cap
        if nprobe > nlist:
            record_reduction(self.effective, name, "index.nprobe", nprobe, nlist,
                             f"only {nlist} inverted lists")
            nprobe = nlist
        self.ivf = IVFADC(nlist=nlist, M=M, nbits=nbits, nprobe=nprobe, random_state=seed).fit(V)

    def save_model(self, folder: Path) -> dict:
        info = super().save_model(folder)
        if self.itype == "adc":
            self.pq.save(Path(folder) / "pq.npz")
            info["files"].append("pq.npz")
        else:
            self.ivf.save(Path(folder) / "ivfadc")
            info["files"].append("ivfadc")
        return info

    def load_model(self, folder: Path, info: dict) -> None:
        super().load_model(folder, info)
        if self.itype == "adc":
            self.pq = load_estimator(Path(folder) / "pq.npz")
        else:
            from retrieval.search import IVFADC

            self.ivf = IVFADC.load(Path(folder) / "ivfadc", mmap=False)

    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        half = len(features) // 2
        chunks = []
        for s in range(0, len(features), 64):
            V = self.encode(features[s:s + 64])
            if self.itype == "adc":
                chunks.append(self.pq.encode(V))
            else:
                self.ivf.add(V, ids=ids[s:s + 64])
            if progress:
                progress(min(s + 64, len(features)), len(features))
            if s <= half < s + 64:
                crash_point("encode")
        if self.itype == "adc":
            C = np.concatenate(chunks, axis=0)
            old = np.zeros((0, C.shape[1]), C.dtype) if self._codes is None else np.asarray(self._codes)
            self._codes = np.concatenate([old, C], axis=0)
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        ids = np.asarray(list(ids), dtype=np.int64)
        if len(ids) == 0 or len(self._ids) == 0:
            return
        keep = ~np.isin(self._ids, ids)
        if self.itype == "adc":
            self._codes = np.asarray(self._codes)[keep]
        else:
            self.ivf.remove(ids[np.isin(ids, self._ids)])
        self._ids = self._ids[keep]

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        write_npy(folder / "ids.npy", self._ids)
        if self.itype == "adc":
            codes = np.zeros((0, self.pq.M), self.pq.code_dtype) if self._codes is None else np.asarray(self._codes)
            write_npy(folder / "codes.npy", codes)
        else:
            self.ivf.save(folder / "ivfadc")
        header = {"format": STATE_FORMAT, "format_version": STATE_FORMAT_VERSION, "kind": self.kind,
                  "index_type": self.itype, "ntotal": int(len(self._ids))}
        with atomic_write(folder / "state.json", "w") as fh:
            json.dump(header, fh, indent=2, sort_keys=True)

    def load_state(self, folder) -> None:
        if folder is None:
            self._ids, self._codes = np.empty(0, np.int64), None
            return
        folder = Path(folder)
        _check_state_header(folder, self.kind)
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        if self.itype == "adc":
            self._codes = read_npy(folder / "codes.npy", mmap=True)
        else:
            from retrieval.search import IVFADC

            self.ivf = IVFADC.load(folder / "ivfadc", mmap=True)

    def first_stage(self, q, k):
        n = len(self._ids)
        if n == 0:
            return []
        kk = min(k, n)
        if self.itype == "adc":
            from retrieval.codes.scan import lut_scan_topk

            tables = self.pq.compute_distance_tables(q[None, :])
            D, rows = lut_scan_topk(tables, np.ascontiguousarray(self._codes), kk)
            return [Hit(int(self._ids[r]), 0.0 - float(d)) for d, r in zip(D[0], rows[0], strict=True) if r >= 0]
        D, found = self.ivf.search(q[None, :], kk)
        return [Hit(int(i), 0.0 - float(d)) for d, i in zip(D[0], found[0], strict=True) if i >= 0]


class BinaryBackend(GlobalBackend):
    """Global vector -> binary code; asymmetric (or Hamming) search; spatial re-ranking of the shortlist."""

    kind = "binary"

    def __init__(self, preset: dict):
        super().__init__(preset)
        self.embedding = None
        self._codes = None

    def train(self, features_of, n_images: int, progress=None) -> None:
        super().train(features_of, n_images, progress=None)
        from retrieval.codes import binary

        ix = self.preset["index"]
        V = self._aggregate([features_of(i) for i in range(n_images)])
        bits = int(ix.get("bits", 256))
        cap = min(V.shape[1], n_images - 1)
        if bits > cap:
            used = max(8, (cap // 8) * 8)
            record_reduction(self.effective, self.preset["name"], "index.bits", bits, used,
                             f"{n_images} training vectors of dimension {V.shape[1]} support at most {cap} "
                             f"projected directions (rounded down to whole bytes)")
            bits = used
        cls = getattr(binary, ix.get("embedding", "PCAEITQ"))
        tr = self.preset.get("training", {})
        self.embedding = cls(nbits=bits, random_state=int(tr.get("random_state", 0))).fit(V)
        if progress:
            progress(3, 3)

    def save_model(self, folder: Path) -> dict:
        info = super().save_model(folder)
        self.embedding.reset()
        self.embedding.save(Path(folder) / "embedding.npz")
        info["files"].append("embedding.npz")
        info["bits"] = int(self.embedding.nbits)
        return info

    def load_model(self, folder: Path, info: dict) -> None:
        super().load_model(folder, info)
        self.embedding = load_estimator(Path(folder) / "embedding.npz")

    # state
    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        chunks = []
        half = len(features) // 2
        for s in range(0, len(features), 64):
            chunks.append(self.embedding.encode(self.encode(features[s:s + 64])))
            if progress:
                progress(min(s + 64, len(features)), len(features))
            if s <= half < s + 64:
                crash_point("encode")
        C = np.concatenate(chunks, axis=0)
        old = np.zeros((0, C.shape[1]), np.uint8) if self._codes is None else np.asarray(self._codes)
        self._codes = np.concatenate([old, C], axis=0)
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        ids = np.asarray(list(ids), dtype=np.int64)
        if len(ids) == 0 or len(self._ids) == 0:
            return
        keep = ~np.isin(self._ids, ids)
        self._ids = self._ids[keep]
        self._codes = np.asarray(self._codes)[keep]

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        codes = np.zeros((0, self.embedding.nbytes), np.uint8) if self._codes is None else np.asarray(self._codes)
        write_npy(folder / "ids.npy", self._ids)
        write_npy(folder / "codes.npy", codes)
        header = {"format": STATE_FORMAT, "format_version": STATE_FORMAT_VERSION, "kind": self.kind,
                  "ntotal": int(len(self._ids)), "nbits": int(self.embedding.nbits)}
        with atomic_write(folder / "state.json", "w") as fh:
            json.dump(header, fh, indent=2, sort_keys=True)

    def load_state(self, folder) -> None:
        if folder is None:
            self._ids, self._codes = np.empty(0, np.int64), None
            return
        folder = Path(folder)
        _check_state_header(folder, self.kind)
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        self._codes = read_npy(folder / "codes.npy", mmap=True)

    def first_stage(self, q, k, distance="expectation"):
        n = len(self._ids)
        if n == 0:
            return []
        self.embedding.codes_ = np.ascontiguousarray(self._codes)
        try:
            D, rows = self.embedding.search(q[None, :], min(k, n), distance=distance)
        finally:
            self.embedding.codes_ = np.zeros((0, self.embedding.nbytes), np.uint8)
        return [Hit(int(self._ids[r]), 0.0 - float(d)) for d, r in zip(D[0], rows[0], strict=True) if r >= 0]

    def search(self, query, *, k, query_box, method=None, rerank=None, get_features=None, **options):
        if options:
            raise ValueError(f"preset {self.preset['name']!r} (kind binary) takes no option(s) "
                             f"{', '.join(sorted(options))}.")
        s = self.preset.get("search", {})
        method = method or s.get("method", "expectation")
        if method not in BINARY_DISTANCES:
            raise ValueError(f"--method must be one of {', '.join(BINARY_DISTANCES)} for preset "
                             f"{self.preset['name']!r}; got {method!r}.")
        return self._ranked(query, query_box, get_features, k=k, rerank=rerank, distance=method)


class ObjectBackend:
    """Adapter of :class:`retrieval.engine.object_search.ObjectSearcher` to the backend interface.

    The searcher keeps its own model (vocabulary, idf) and inverted file; ``save_model`` stores the trained but
    empty searcher, ``save_state`` the searcher with its postings (its own folder format, docs/formats.md).
    """

    kind = "object"

    def __init__(self, preset: dict):
        self.preset = preset
        self.trained = False
        self.effective = {}
        self.searcher = None
        self._ids = np.empty(0, np.int64)

    def _new(self, n_descriptors: int):
        from retrieval.engine.object_search import ObjectSearcher

        params = dict(self.preset.get("object_search", {}))
        tr = self.preset.get("training", {})
        params.setdefault("random_state", int(tr.get("random_state", 0)))
        params.setdefault("max_train_descriptors", int(tr.get("max_descriptors", 1_000_000)))
        n_train = min(n_descriptors, params["max_train_descriptors"])
        cap = max(64, n_train // int(tr.get("min_descriptors_per_word", 10)))
        if params.get("n_words", 100_000) > cap:
            record_reduction(self.effective, self.preset["name"], "object_search.n_words",
                             params.get("n_words", 100_000), cap,
                             f"{n_train} training descriptors support at most {cap} words "
                             f"(training.min_descriptors_per_word)")
            params["n_words"] = cap
        return ObjectSearcher(**params)

    def train(self, features_of, n_images: int, progress=None) -> None:
        feats = [features_of(i) for i in range(n_images)]
        self.searcher = self._new(sum(len(f) for f in feats)).fit(feats)
        crash_point("train")
        if progress:
            progress(3, 3)
        self.trained = True

    def save_model(self, folder: Path) -> dict:
        self.searcher.save(Path(folder) / "searcher")
        return {"files": ["searcher"]}

    def load_model(self, folder: Path, info: dict) -> None:
        from retrieval.engine.object_search import ObjectSearcher

        self._model_folder = Path(folder) / "searcher"
        self.searcher = ObjectSearcher.load(self._model_folder)
        self.trained = True

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        step = 64
        half = len(features) // 2
        for s in range(0, len(features), step):
            self.searcher.add(ids[s:s + step], list(features[s:s + step]))
            if progress:
                progress(min(s + step, len(features)), len(features))
            if s <= half < s + step:
                crash_point("encode")
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        ids = np.asarray(list(ids), dtype=np.int64)
        present = ids[np.isin(ids, self._ids)]
        if len(present):
            self.searcher.remove(present)
            self._ids = self._ids[~np.isin(self._ids, present)]

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        write_npy(folder / "ids.npy", self._ids)
        self.searcher.save(folder / "searcher")
        header = {"format": STATE_FORMAT, "format_version": STATE_FORMAT_VERSION, "kind": self.kind,
                  "ntotal": int(len(self._ids))}
        with atomic_write(folder / "state.json", "w") as fh:
            json.dump(header, fh, indent=2, sort_keys=True)

    def load_state(self, folder) -> None:
        from retrieval.engine.object_search import ObjectSearcher

        if folder is None:
            self._ids = np.empty(0, np.int64)
            return
        folder = Path(folder)
        _check_state_header(folder, self.kind)
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        self.searcher = ObjectSearcher.load(folder / "searcher")

    def search(self, query, *, k, query_box, method=None, rerank=None, get_features=None, **options):
        s = self.preset.get("search", {})
        method = method or s.get("method", "delta1")
        if method not in ("l1", "l2", "delta1", "delta2"):
            raise ValueError(f"--method must be one of l1, l2, delta1, delta2 for preset {self.preset['name']!r}; "
                             f"got {method!r}.")
        rerank = rerank or default_rerank(s)
        if rerank == "none" and s.get("rerank") == "spatial":
            rerank = "exact"  # verification unavailable: keep the exact re-ranking of the shortlist
        if rerank not in ("none", "exact", "spatial"):
            raise ValueError(f"--rerank must be none, exact or spatial for preset {self.preset['name']!r}; "
                             f"got {rerank!r}.")
        alpha = float(options.pop("alpha", s.get("alpha", 0.5)))
        if options:
            raise ValueError(f"preset {self.preset['name']!r} (kind object) takes no option(s) "
                             f"{', '.join(sorted(options))}.")
        if len(self._ids) == 0:
            return []
        if rerank == "spatial":
            from retrieval.engine.pipeline import spatial_available

            if not spatial_available():
                raise ValueError("--rerank spatial needs retrieval.rerank.verify_affine, which is not "
                                 "available; use --rerank exact or none.")
        # the searcher verifies with the frames it stores itself (get_features=None)
        hits = self.searcher.search(query, bbox=query_box, k=k, method=method, alpha=alpha, rerank=rerank)
        out = []
        for h in hits:
            def get(name, h=h):
                return h.get(name) if isinstance(h, dict) else getattr(h, name, None)

            box, inl = get("box"), get("inliers")
            # the searcher's score is a dissimilarity (smaller is better): report its negation
            out.append(Hit(int(get("id")), 0.0 - float(get("score")),
                           None if inl is None or rerank != "spatial" else int(inl),
                           None if box is None else tuple(float(v) for v in box)))
        return out
