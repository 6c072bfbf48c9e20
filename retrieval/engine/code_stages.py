"""The first stages that keep only codes (:mod:`retrieval.engine.first_stages`): PQ codes ranked by ADC
(:class:`CodesStage`, Jegou et al. 2012) and binary codes (:class:`BinaryStage`, Gordo et al. 2014)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.core.persistence import load_estimator
from retrieval.engine.backend import append_rows, read_npy, write_npy, write_state_header
from retrieval.engine.config import BINARY_DISTANCES
from retrieval.engine.first_stages import FirstStage
from retrieval.engine.hits import Hit, similarity_from_hamming, similarity_from_sq_distance
from retrieval.engine.presets import record_reduction

__all__ = ["BinaryStage", "CodesStage"]


class _CodeRows(FirstStage):
    """The per-row state the two code stages share for segment merges: ``codes`` (n, w) aligned with the ids."""

    def __init__(self, preset: dict, effective: dict):
        super().__init__(preset, effective)
        self._codes = None

    def row_arrays(self) -> dict:
        return {"codes": self._codes}

    def from_rows(self, ids, arrays) -> None:
        self._ids = np.asarray(ids, np.int64)
        self._codes = np.asarray(arrays["codes"])


class CodesStage(_CodeRows):
    """Global vectors stored only as PQ codes and ranked by the codes' own asymmetric distances.

    ``index.type == "adc"``: a :class:`retrieval.codes.ProductQuantizer` (``M`` x ``nbits``) trained with the
    model; exhaustive ADC ranking (Jegou et al. 2012, eq. 21-23) through :func:`retrieval.codes.scan.lut_scan_topk`.
    State: ``ids.npy`` (n,) int64, ``codes.npy`` (n, M) uint8/uint16.
    ``index.type == "ivfadc_adc"``: a :class:`retrieval.search.IVFADC` trained with the model, updated in
    place by add/remove, ranked by its ADC distances (Jegou et al. 2012, sec. VI-C). State: ``ids.npy`` and
    ``ivfadc/``. With fewer training images than ``2**nbits`` (or 39 x ``nlist``) the parameters are reduced with
    a warning (:meth:`fit`).
    """

    def __init__(self, preset: dict, effective: dict):
        super().__init__(preset, effective)
        self.pq = None
        self.ivf = None

    @property
    def itype(self) -> str:
        return self.config.index.type

    def empty_part(self) -> CodesStage:
        part = CodesStage(self.preset, self.effective)
        part.pq = self.pq
        part.ivf = None if self.ivf is None else self.ivf.empty_like()
        return part

    def absorb(self, parts) -> None:
        if self.itype == "adc":
            return super().absorb(parts)
        ids = []
        for stage, dead in parts:   # the rows go into this stage's lists as they are (no re-encoding)
            src = stage.ivf
            lists = np.repeat(np.arange(src.nlist), np.diff(src.offsets_))
            live = (src.ids_ >= 0) & ~np.isin(src.ids_, dead)
            self.ivf.add_preassigned(lists[live], np.asarray(src.codes_)[live], np.asarray(src.ids_)[live])
            ids.append(np.asarray(src.ids_)[live])
        self._ids = np.sort(np.concatenate(ids)) if ids else np.empty(0, np.int64)

    def fit(self, encoder, features_of, n_images: int, rng) -> None:
        """Train the PQ (``adc``) or the IVFADC (``ivfadc_adc``) on the training images' global vectors.

        Small-collection rule (:func:`retrieval.engine.presets.record_reduction`): with ``n`` training vectors,
        ``nbits`` is reduced so that ``2**nbits <= n`` (each sub-quantiser's k-means needs at least ``ksub``
        points), ``nlist`` to the largest power of two ``<= n / 39`` (faiss's minimum of 39 training points per
        coarse centroid; at least 1), ``nprobe`` to ``nlist``, and ``M`` to the largest divisor of the vector
        dimension ``<= M``. Each reduction is one warning and is recorded in ``effective``.
        """
        from retrieval.codes import ProductQuantizer
        from retrieval.search import IVFADC

        ix = self.config.index
        name = self.preset["name"]
        if n_images < 2:
            raise ValueError(f"preset {name!r}: its {self.itype} index needs at least 2 training images; "
                             f"got {n_images}.")
        V = encoder.aggregate([features_of(i) for i in range(n_images)])
        n, d = V.shape
        M, nbits = ix.M, ix.nbits
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
        if self.itype == "adc":
            self.pq = ProductQuantizer(M=M, nbits=nbits, random_state=seed).fit(V)
            return
        nlist, nprobe = ix.nlist, ix.nprobe
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

    def save_model(self, folder: Path, info: dict) -> None:
        if self.itype == "adc":
            self.pq.save(Path(folder) / "pq.npz")
            info["files"].append("pq.npz")
        else:
            self.ivf.save(Path(folder) / "ivfadc")
            info["files"].append("ivfadc")

    def load_model(self, folder: Path, info: dict) -> None:
        from retrieval.search import IVFADC

        if self.itype == "adc":
            self.pq = load_estimator(Path(folder) / "pq.npz")
        else:
            self.ivf = IVFADC.load(Path(folder) / "ivfadc", mmap=False)

    def add(self, ids, chunks) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        parts = []
        for s, V in chunks:
            if self.itype == "adc":
                parts.append(self.pq.encode(V))
            else:
                self.ivf.add(V, ids=ids[s:s + len(V)])
        if self.itype == "adc":
            self._codes = append_rows(self._codes, np.concatenate(parts, axis=0))
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        ids = np.asarray(list(ids), dtype=np.int64)
        keep = self._kept_rows(ids)
        if keep is None:
            return
        if self.itype == "adc":
            self._codes = np.asarray(self._codes)[keep]
        else:
            self.ivf.remove(ids[np.isin(ids, self._ids)])
        self._ids = self._ids[keep]

    def save_state(self, folder: Path, dim) -> None:
        folder = Path(folder)
        write_npy(folder / "ids.npy", self._ids)
        if self.itype == "adc":
            codes = np.zeros((0, self.pq.M), self.pq.code_dtype) if self._codes is None else np.asarray(self._codes)
            write_npy(folder / "codes.npy", codes)
        else:
            self.ivf.save(folder / "ivfadc")
        write_state_header(folder, self.kind, index_type=self.itype, ntotal=int(len(self._ids)))

    def load_state(self, folder) -> None:
        from retrieval.search import IVFADC

        self._codes = None
        folder = self._load_ids(folder)
        if folder is None:
            return
        if self.itype == "adc":
            self._codes = read_npy(folder / "codes.npy", mmap=True)
        else:
            self.ivf = IVFADC.load(folder / "ivfadc", mmap=True)

    def reference_distance(self, q, reference=None) -> float:
        """The squared ADC distance of ``q`` to the code of ``reference`` (default ``q``: the query photo's own code,
        its coding error): through the same distance tables as the search (``adc``), or to the reconstruction
        ``c + q(r)`` of its list's centroid and encoded residual (``ivfadc_adc``, what the scan's tables sum to)."""
        from retrieval.codes.scan import lut_scan_topk

        q = np.asarray(q, np.float32)[None, :]
        r = q if reference is None else np.asarray(reference, np.float32)[None, :]
        if self.itype == "adc":
            D, _ = lut_scan_topk(self.pq.compute_distance_tables(q), np.ascontiguousarray(self.pq.encode(r)), 1)
            return float(D[0, 0])
        ivf = self.ivf
        _, lists = ivf.coarse_search(r, 1)
        centroid = ivf.centroids_[lists[0, 0]]
        rebuilt = centroid + ivf.pq_.decode(ivf.pq_.encode(r - centroid))[0]
        return float(np.sum((q[0].astype(np.float64) - rebuilt) ** 2))

    def search(self, q, k, *, reference=None, **options):
        """Top ``k`` by ADC distance; ``distance`` = the squared ADC distance ``d``, ``similarity`` =
        ``1 - (d - d_ref) / (2 ||q||^2)`` clipped to [0, 1] (``||q|| = 1``; 0 for a query without features) with
        ``d_ref`` the :meth:`reference_distance`
        (:func:`retrieval.engine.hits.similarity_from_sq_distance`)."""
        from retrieval.codes.scan import lut_scan_topk

        n = len(self._ids)
        if n == 0:
            return []
        kk = min(k, n)
        if self.itype == "adc":
            tables = self.pq.compute_distance_tables(q[None, :])
            D, rows = lut_scan_topk(tables, np.ascontiguousarray(self._codes), kk)
            pairs = [(float(d), int(self._ids[r])) for d, r in zip(D[0], rows[0], strict=True) if r >= 0]
        else:
            D, found = self.ivf.search(q[None, :], kk)
            pairs = [(float(d), int(i)) for d, i in zip(D[0], found[0], strict=True) if i >= 0]
        energy = float(np.dot(np.asarray(q, np.float64), np.asarray(q, np.float64)))   # 1 (unit), 0 (no features)
        sims = similarity_from_sq_distance([d for d, _ in pairs], self.reference_distance(q, reference), energy)
        return [Hit(i, float(s), similarity=float(s), distance=d) for (d, i), s in zip(pairs, sims, strict=True)]


class BinaryStage(_CodeRows):
    """The global vector turned into a binary code by an embedding of :mod:`retrieval.codes.binary` (PCAE-ITQ by
    default), searched through the table look-up scan. State: ``ids.npy`` (n,) int64 and ``codes.npy`` (n,
    nbits / 8) uint8."""

    kind = "binary"

    def __init__(self, preset: dict, effective: dict):
        super().__init__(preset, effective)
        self.embedding = None

    def empty_part(self) -> BinaryStage:
        part = BinaryStage(self.preset, self.effective)
        part.embedding = self.embedding
        return part

    def fit(self, encoder, features_of, n_images: int, rng) -> None:
        from retrieval.codes import binary

        cfg = self.config
        V = encoder.aggregate([features_of(i) for i in range(n_images)])
        bits = cfg.index.bits
        cap = min(V.shape[1], n_images - 1)
        if bits > cap:
            used = max(8, (cap // 8) * 8)
            record_reduction(self.effective, self.preset["name"], "index.bits", bits, used,
                             f"{n_images} training vectors of dimension {V.shape[1]} support at most {cap} "
                             f"projected directions (rounded down to whole bytes)")
            bits = used
        cls = getattr(binary, cfg.index.embedding)
        self.embedding = cls(nbits=bits, random_state=cfg.training.random_state).fit(V)

    def save_model(self, folder: Path, info: dict) -> None:
        self.embedding.reset()
        self.embedding.save(Path(folder) / "embedding.npz")
        info["files"].append("embedding.npz")
        info["bits"] = int(self.embedding.nbits)

    def load_model(self, folder: Path, info: dict) -> None:
        self.embedding = load_estimator(Path(folder) / "embedding.npz")

    def add(self, ids, chunks) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        C = np.concatenate([self.embedding.encode(V) for _, V in chunks], axis=0)
        self._codes = append_rows(self._codes, C)
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        keep = self._kept_rows(ids)
        if keep is None:
            return
        self._ids = self._ids[keep]
        self._codes = np.asarray(self._codes)[keep]

    def save_state(self, folder: Path, dim) -> None:
        folder = Path(folder)
        codes = np.zeros((0, self.embedding.nbytes), np.uint8) if self._codes is None else np.asarray(self._codes)
        write_npy(folder / "ids.npy", self._ids)
        write_npy(folder / "codes.npy", codes)
        write_state_header(folder, self.kind, ntotal=int(len(self._ids)), nbits=int(self.embedding.nbits))

    def load_state(self, folder) -> None:
        self._codes = None
        folder = self._load_ids(folder)
        if folder is not None:
            self._codes = read_npy(folder / "codes.npy", mmap=True)

    methods = BINARY_DISTANCES

    def method_options(self, method: str) -> dict:
        return {"distance": method}

    def reference_distance(self, q, reference=None, distance: str = "expectation") -> float:
        """The distance of ``q`` to the code of ``reference`` (default ``q``: the query photo's own code), through
        the same search as the stored codes: 0 for ``hamming`` and ``lower_bound``, the coding error for
        ``expectation`` / ``expectation_hat``."""
        r = q if reference is None else reference
        code = self.embedding.encode(np.asarray(r, np.float32)[None, :])
        D, _ = self.embedding.search_codes(np.asarray(q, np.float32)[None, :], code, 1, distance=distance)
        return float(D[0, 0])

    def search(self, q, k, distance="expectation", *, reference=None):
        """Top ``k`` by the code distance ``d``, with ``d_ref`` the :meth:`reference_distance`; ``similarity``,
        clipped to [0, 1]: ``1 - 2 (d - d_ref) / bits`` (``hamming``); ``1 - 2 (d - d_ref) / W`` with ``W = sum_k
        (g_k(q) - t_k)^2`` (``lower_bound``: a Hamming distance weighted by the query's margin to each threshold,
        Gordo et al. 2014, eq. 30-33, of which ``W`` is the largest value); ``1 - (d - d_ref) / (2 ||g(q)||^2)``
        (``expectation``, ``expectation_hat``: estimates of the squared distance between the centred projections
        ``g``, so an estimated cosine of them)."""
        n = len(self._ids)
        if n == 0:
            return []
        D, rows = self.embedding.search_codes(q[None, :], self._codes, min(k, n), distance=distance)
        keep = rows[0] >= 0
        d, rows = np.asarray(D[0], np.float64)[keep], rows[0][keep]
        ref = self.reference_distance(q, reference, distance)
        if distance == "hamming":
            sims = similarity_from_hamming(d, ref, self.embedding.nbits)
        else:
            g = self.embedding.project(np.asarray(q, np.float32)[None, :]).astype(np.float64)[0]
            if distance == "lower_bound":
                margin = float(np.sum((g - self.embedding.thresholds_) ** 2))
                sims = similarity_from_hamming(d, ref, max(margin, 1e-12))
            else:
                sims = similarity_from_sq_distance(d, ref, float(np.sum(g * g)))
        return [Hit(int(self._ids[r]), float(s), similarity=float(s), distance=float(x))
                for x, r, s in zip(d, rows, sims, strict=True)]
