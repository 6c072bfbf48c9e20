"""The ``binary`` backend: the global vector of :class:`retrieval.engine.global_backend.GlobalBackend` turned into
a binary code h(x) = q(g(x)) by an embedding of :mod:`retrieval.codes.binary` (Gordo et al. 2014, sec. 2; PCAE-ITQ
by default) and searched with the symmetric Hamming distance or the asymmetric d_E (eq. 21-26) / d_LB (eq. 30-33)
through the table look-up scan. State: ``ids.npy`` (n,) int64 and ``codes.npy`` (n, nbits / 8) uint8.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.codes import binary
from retrieval.core.persistence import load_estimator
from retrieval.engine.backend import (
    append_rows,
    read_npy,
    write_npy,
    write_state_header,
)
from retrieval.engine.config import BINARY_DISTANCES
from retrieval.engine.global_backend import GlobalBackend
from retrieval.engine.hits import Hit, similarity_from_hamming, similarity_from_sq_distance
from retrieval.engine.presets import record_reduction


class BinaryBackend(GlobalBackend):
    """Global vector -> binary code; asymmetric (or Hamming) search; spatial re-ranking of the shortlist."""

    kind = "binary"
    encodes_vectors = False
    shardable = False

    def __init__(self, preset: dict):
        super().__init__(preset)
        self.embedding = None
        self._codes = None

    def train(self, features_of, n_images: int, progress=None) -> None:
        super().train(features_of, n_images, progress=None)
        cfg = self.config
        V = self._aggregate([features_of(i) for i in range(n_images)])
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
        C = np.concatenate([self.embedding.encode(V) for _, V in self._encoded_chunks(features, progress)], axis=0)
        self._codes = append_rows(self._codes, C)
        self._ids = np.concatenate([self._ids, ids])

    def remove(self, ids) -> None:
        keep = self._kept_rows(ids)
        if keep is None:
            return
        self._ids = self._ids[keep]
        self._codes = np.asarray(self._codes)[keep]

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        codes = np.zeros((0, self.embedding.nbytes), np.uint8) if self._codes is None else np.asarray(self._codes)
        write_npy(folder / "ids.npy", self._ids)
        write_npy(folder / "codes.npy", codes)
        write_state_header(folder, self.kind, ntotal=int(len(self._ids)), nbits=int(self.embedding.nbits))

    def load_state(self, folder) -> None:
        folder = self._load_ids(folder)
        if folder is not None:
            self._codes = read_npy(folder / "codes.npy", mmap=True)

    def first_stage(self, q, k, distance="expectation"):
        n = len(self._ids)
        if n == 0:
            return []
        D, rows = self.embedding.search_codes(q[None, :], self._codes, min(k, n), distance=distance)
        keep = rows[0] >= 0
        d, rows = np.asarray(D[0], np.float64)[keep], rows[0][keep]
        sims = (similarity_from_hamming(d, self.embedding.nbits) if distance == "hamming"
                else similarity_from_sq_distance(d))
        return [Hit(int(self._ids[r]), float(s), similarity=float(s), distance=float(x))
                for x, r, s in zip(d, rows, sims, strict=True)]

    def search(self, query, *, k, query_box, method=None, rerank=None, get_features=None, query_expansion=None,
               shortlist=None, cache=None, threads: int = 1, **options):
        if options:
            raise ValueError(f"preset {self.preset['name']!r} (kind binary) takes no option(s) "
                             f"{', '.join(sorted(options))}.")
        method = method or self.config.search.method
        if method not in BINARY_DISTANCES:
            raise ValueError(f"--method must be one of {', '.join(BINARY_DISTANCES)} for preset "
                             f"{self.preset['name']!r}; got {method!r}.")
        return self._ranked(query, query_box, get_features, k=k, rerank=rerank, query_expansion=query_expansion,
                            shortlist=shortlist, cache=cache, threads=threads, distance=method)
