"""The codes-only ``global`` backends (``index.type`` ``adc`` / ``ivfadc_adc``): global vectors kept only as PQ
codes and ranked by their asymmetric distances (Jegou et al. 2012)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from retrieval.codes import ProductQuantizer
from retrieval.codes.scan import lut_scan_topk
from retrieval.core.persistence import load_estimator
from retrieval.engine.backend import (
    append_rows,
    read_npy,
    write_npy,
    write_state_header,
)
from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.hits import Hit, similarity_from_sq_distance
from retrieval.engine.presets import record_reduction
from retrieval.search import IVFADC

logger = logging.getLogger(__name__)


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

    encodes_vectors = False
    shardable = False

    def __init__(self, preset: dict):
        super().__init__(preset)
        self.pq = None
        self._codes = None

    @property
    def itype(self) -> str:
        return self.config.index.type

    def _fit_index_model(self, features_of, n_images, rng) -> None:
        """Train the PQ (``adc``) or the IVFADC (``ivfadc_adc``) on the training images' global vectors.

        Small-collection rule (:func:`retrieval.engine.presets.record_reduction`): with ``n`` training vectors,
        ``nbits`` is reduced so that ``2**nbits <= n`` (each sub-quantiser's k-means needs at least ``ksub``
        points), ``nlist`` to the largest power of two ``<= n / 39`` (faiss's minimum of 39 training points per
        coarse centroid; at least 1), ``nprobe`` to ``nlist``, and ``M`` to the largest divisor of the vector
        dimension ``<= M``. Each reduction is one warning and is recorded in ``effective``.
        """
        ix = self.config.index
        name = self.preset["name"]
        if n_images < 2:
            raise ValueError(f"preset {name!r}: its {self.itype} index needs at least 2 training images; "
                             f"got {n_images}.")
        V = self._aggregate([features_of(i) for i in range(n_images)])
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
            self.ivf = IVFADC.load(Path(folder) / "ivfadc", mmap=False)

    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        chunks = []
        for s, V in self._encoded_chunks(features, progress):
            if self.itype == "adc":
                chunks.append(self.pq.encode(V))
            else:
                self.ivf.add(V, ids=ids[s:s + 64])
        if self.itype == "adc":
            self._codes = append_rows(self._codes, np.concatenate(chunks, axis=0))
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

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        write_npy(folder / "ids.npy", self._ids)
        if self.itype == "adc":
            codes = np.zeros((0, self.pq.M), self.pq.code_dtype) if self._codes is None else np.asarray(self._codes)
            write_npy(folder / "codes.npy", codes)
        else:
            self.ivf.save(folder / "ivfadc")
        write_state_header(folder, self.kind, index_type=self.itype, ntotal=int(len(self._ids)))

    def load_state(self, folder) -> None:
        folder = self._load_ids(folder)
        if folder is None:
            return
        if self.itype == "adc":
            self._codes = read_npy(folder / "codes.npy", mmap=True)
        else:
            self.ivf = IVFADC.load(folder / "ivfadc", mmap=True)

    def first_stage(self, q, k):
        """Top ``k`` by ADC distance; ``distance`` = the squared ADC distance, ``similarity`` = ``1 - d / 4``
        (:func:`retrieval.engine.hits.similarity_from_sq_distance`)."""
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
        sims = similarity_from_sq_distance([d for d, _ in pairs])
        return [Hit(i, float(s), similarity=float(s), distance=d) for (d, i), s in zip(pairs, sims, strict=True)]
