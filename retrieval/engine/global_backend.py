"""The ``global`` backend: one global vector per image, searched by inner product (exhaustive or IVFADC).

RootSIFT, local PCA to 64-d, a Fisher vector or VLAD (Jegou et al. 2012, eq. 6 / eq. 18, power + L2 normalisation
eq. 7) or a BoW, optional PCA of the aggregated vector, then exhaustive inner-product search, or IVFADC (Jegou et
al. 2012, sec. V-A) once the collection has ``index.min_images`` images. Spatial re-ranking of a shortlist
(:func:`retrieval.rerank.spatial.spatial_rerank`, Philbin et al. 2007) is shared with the codes-only and binary
backends, which derive from :class:`GlobalBackend`, as are the ordering of the results
(:func:`retrieval.engine.hits.finish_ranking`: verified first by inliers, then by similarity) and the optional
average query expansion from verified hits (``search.query_expansion``, Chum et al. 2007).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from retrieval import aggregation as A
from retrieval.core.checks import check_random_state
from retrieval.core.persistence import load_estimator
from retrieval.engine.backend import (
    STATE_FORMAT,
    STATE_FORMAT_VERSION,
    Backend,
    append_rows,
    check_state_header,
    query_expansion_count,
    read_npy,
    write_npy,
    write_state_header,
)
from retrieval.engine.config import AGGREGATION_METHODS
from retrieval.engine.hits import Hit, finish_ranking, similarity_from_ip
from retrieval.engine.presets import record_reduction, vocabulary_cap
from retrieval.features.pca import LocalPCA
from retrieval.features.rootsift import root_sift
from retrieval.rerank.verifier import Verifier

_MAX_DENSE_BATCH_BYTES = 4 << 30  # sparse BoW batches converted to dense float32 rows (no projection)


def sample_descriptors(descriptor_arrays: Sequence[np.ndarray], max_total: int, rng) -> np.ndarray:
    """Draw at most ``max_total`` rows, evenly over images, from a list of (n_i, d) arrays; returns (m, d)."""
    arrays = [a for a in descriptor_arrays if len(a)]
    if not arrays:
        raise ValueError("no local features in the training images: cannot train a model (are the images "
                         "blank or too small?).")
    per = max(1, max_total // len(arrays))
    out = []
    for a in arrays:
        if len(a) > per:
            a = a[np.sort(rng.choice(len(a), per, replace=False))]
        out.append(a)
    return np.concatenate(out, axis=0)


class GlobalBackend(Backend):
    """One global vector per image: RootSIFT -> LocalPCA -> Fisher/VLAD -> (PCA) -> L2; exhaustive or IVFADC.

    State arrays (generation folder): ``ids.npy`` (n,) int64, ``vectors.npy`` (n, D') unit rows of type
    ``index.vectors`` (float32, or float16 for the ``default`` preset: half the bytes, inner products within 1e-3;
    products are computed in float32; a generation is read in the type it was written in),
    and ``ivfadc/`` (:class:`retrieval.search.IVFADC`) once the collection reached ``index.min_images`` with
    ``index.type == "ivfadc"``.
    """

    kind = "global"
    encodes_vectors = True
    shardable = True

    def __init__(self, preset: dict):
        super().__init__(preset)
        self.local_pca = None
        self.aggregator = None
        self.projection = None
        self._ids = np.empty(0, np.int64)
        self._vectors = None
        self.ivf = None

    # ------------------------------------------------------------------ model
    def _fit_vocabulary(self, X: np.ndarray, rng):
        agg = self.config.aggregation
        seed = int(rng.integers(2**31 - 1))
        K = agg.n_components
        cap = vocabulary_cap(self.preset, len(X))
        if K > cap:
            record_reduction(self.effective, self.preset["name"], "aggregation.n_components", K, cap,
                             f"{len(X)} training descriptors support at most {cap} words/Gaussians "
                             f"(training.min_descriptors_per_word)")
            K = cap
        if agg.method == "fisher":
            model = A.FisherVector(n_components=K, alpha=agg.alpha, random_state=seed)
        elif agg.method == "vlad":
            model = A.VLAD(n_clusters=K, alpha=agg.alpha, random_state=seed)
        elif agg.method == "bow":
            params = dict(alpha=agg.alpha, idf=agg.idf, norm="l2", random_state=seed)
            if K > 1000:  # VLFeat's k-means: 447 s for 3 iterations at K = 20,000 (docs/differences.md)
                return A.BoW.from_vocabulary(A.ApproximateKMeans(K, random_state=seed).fit(X), **params)
            model = A.BoW(n_clusters=K, **params)
        else:
            raise ValueError(f"preset {self.preset['name']!r}: aggregation.method must be one of "
                             f"{', '.join(AGGREGATION_METHODS)}; got {agg.method!r}.")
        return model.fit(X)

    def train(self, features_of, n_images: int, progress=None) -> None:
        """Learn local PCA, the vocabulary and the global PCA from ``n_images`` training images.

        ``features_of(i)`` returns the :class:`LocalFeatures` of training image ``i``.
        """
        cfg = self.config
        rng = check_random_state(cfg.training.random_state)
        descs = [root_sift(features_of(i).descriptors) for i in range(n_images)]
        X = sample_descriptors(descs, cfg.training.max_descriptors, rng)
        lp = cfg.local_pca
        n_comp = min(lp.n_components, X.shape[1])
        if len(X) < n_comp:
            raise ValueError(f"only {len(X)} local features in the training images; the local PCA needs at "
                             f"least {n_comp}.")
        self.local_pca = LocalPCA(n_components=n_comp, whiten=lp.whiten,
                                  random_state=int(rng.integers(2**31 - 1))).fit(X)
        if progress:
            progress(1, 3)
        Xp = self.local_pca.transform(X)
        self.aggregator = self._fit_vocabulary(Xp, rng)
        if cfg.aggregation.method == "bow" and getattr(self.aggregator, "idf", False):
            self.aggregator.fit_idf([self._local(features_of(i)) for i in range(n_images)])
        if progress:
            progress(2, 3)
        self.projection = None
        proj = cfg.projection
        rotate = cfg.index.rotation or (proj is not None and proj.rotation)
        if proj is not None:
            n_out = proj.n_components
            if n_images >= 2 * n_out:
                V = self._aggregate([features_of(i) for i in range(n_images)], project=False, dense=False)
                self.projection = A.PCAProjection(n_components=n_out, whiten=proj.whiten, renormalize=proj.renormalize,
                                                rotation=rotate, random_state=int(rng.integers(2**31 - 1))).fit(V)
            else:
                record_reduction(self.effective, self.preset["name"], "projection.n_components", n_out, None,
                                 f"the PCA to {n_out} dimensions needs {2 * n_out} training images, got "
                                 f"{n_images}: the aggregated vectors keep their full dimension D")
        self._fit_index_model(features_of, n_images, rng)
        if progress:
            progress(3, 3)
        self.trained = True

    def _fit_index_model(self, features_of, n_images, rng) -> None:
        """Hook for backends whose codes are trained with the model (ADC, IVFADC ranked by ADC)."""
        return None

    def _describe(self, descriptors) -> np.ndarray:
        """RootSIFT then local PCA of raw SIFT descriptors, (n, d) float32 (for the ratio test)."""
        return np.asarray(self.local_pca.transform(root_sift(descriptors)), dtype=np.float32)

    def _local(self, f) -> np.ndarray:
        """RootSIFT then local PCA of one image's descriptors, (n, d) float32."""
        if len(f) == 0:
            return np.zeros((0, self.local_pca.n_components), np.float32)
        return np.asarray(self.local_pca.transform(root_sift(f.descriptors)), dtype=np.float32)

    def save_model(self, folder: Path) -> dict:
        folder = Path(folder)
        self.local_pca.save(folder / "local_pca.npz")
        self.aggregator.save(folder / "aggregator.npz")
        files = ["local_pca.npz", "aggregator.npz"]
        if self.projection is not None:
            self.projection.save(folder / "projection.npz")
            files.append("projection.npz")
        return {"files": files, "dim": int(self.dim)}

    def load_model(self, folder: Path, info: dict) -> None:
        folder = Path(folder)
        self.local_pca = load_estimator(folder / "local_pca.npz")
        self.aggregator = load_estimator(folder / "aggregator.npz")
        self.projection = load_estimator(folder / "projection.npz") if "projection.npz" in info["files"] else None
        self.trained = True

    @property
    def dim(self) -> int:
        if self.projection is not None:
            return int(self.projection.n_components)
        agg = self.config.aggregation
        K = int(getattr(self.aggregator, "n_components", getattr(self.aggregator, "n_clusters", 0)) or
                agg.n_components)
        if agg.method == "bow":
            return K
        return K * int(self.local_pca.n_components)

    # ------------------------------------------------------------------ encoding
    def _aggregate(self, features: Sequence, project: bool = True, dense: bool = True):
        """Aggregated vectors (n, D) — projected to D' and L2-normalised when ``project``; a sparse BoW stays
        sparse when ``dense`` is False (PCA training)."""
        from retrieval.aggregation.normalize import issparse  # scipy.sparse is imported only by a sparse BoW

        V = self.aggregator.transform([self._local(f) for f in features])
        if project and self.projection is not None:
            V = self.projection.transform(V)
        if issparse(V):
            if not dense:
                return V.astype(np.float32)
            if V.shape[0] * V.shape[1] * 4 > _MAX_DENSE_BATCH_BYTES:
                raise ValueError(f"preset {self.preset['name']!r}: {V.shape[0]} sparse vectors of {V.shape[1]} "
                                 f"dimensions do not fit the global backend's dense batches (at most "
                                 f"{_MAX_DENSE_BATCH_BYTES >> 20} MB; set 'projection' or a smaller vocabulary).")
            V = V.toarray()
        return np.asarray(A.l2_normalize(np.asarray(V, dtype=np.float32)), dtype=np.float32)

    def encode(self, features: Sequence) -> np.ndarray:
        """Global vectors of images, ndarray of shape (n, D'), float32, unit rows (zero for no features)."""
        return self._aggregate(features)

    # ------------------------------------------------------------------ state
    @property
    def ids(self) -> np.ndarray:
        return self._ids

    @property
    def vectors(self):
        """The stored global vectors (n, D') in the order of :attr:`ids` (memory-mapped once loaded), or None."""
        return self._vectors

    def _encoded_chunks(self, features: Sequence, progress, step: int = 64):
        """Global vectors of ``features`` by chunks of ``step`` images: yields ``(start, V (m, D'))``, then
        reports ``progress(done, total)``."""
        for s in range(0, len(features), step):
            yield s, self.encode(features[s:s + step])
            if progress:
                progress(min(s + step, len(features)), len(features))

    def _kept_rows(self, ids) -> np.ndarray | None:
        """Mask (n,) of the stored rows whose id is not in ``ids``; None when there is nothing to remove."""
        ids = np.asarray(list(ids), dtype=np.int64)
        if len(ids) == 0 or len(self._ids) == 0:
            return None
        return ~np.isin(self._ids, ids)

    def _load_ids(self, folder) -> Path | None:
        """Start loading a generation of a codes backend: ``_codes`` reset and ``_ids`` from ``ids.npy`` of the
        folder, whose ``state.json`` is checked (:func:`check_state_header`); folder None: an empty index. Returns
        the folder as a Path (or None)."""
        self._codes = None
        if folder is None:
            self._ids = np.empty(0, np.int64)
            return None
        folder = Path(folder)
        check_state_header(folder, self.kind)
        self._ids = np.asarray(read_npy(folder / "ids.npy", mmap=False), dtype=np.int64)
        return folder

    def add(self, ids, features, progress=None) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        V = np.concatenate([V for _, V in self._encoded_chunks(features, progress)], axis=0)
        self._vectors = append_rows(self._vectors, V.astype(self._vector_dtype))
        self._ids = np.concatenate([self._ids, ids])
        self.ivf = None  # rebuilt at save time

    @property
    def _vector_dtype(self):
        return np.dtype(self.config.index.vectors)

    def add_vectors(self, ids, vectors) -> None:
        """Append vectors already encoded by :meth:`encode` with this model (e.g. by the workers of a cluster)."""
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

    def save_state(self, folder: Path) -> None:
        folder = Path(folder)
        vectors = (np.zeros((0, self.dim), self._vector_dtype) if self._vectors is None
                   else np.asarray(self._vectors, dtype=self._vector_dtype))
        write_npy(folder / "ids.npy", self._ids)
        write_npy(folder / "vectors.npy", vectors)
        vectors = vectors.astype(np.float32)
        ix = self.config.index
        with_ivfadc = ix.type == "ivfadc" and len(self._ids) >= ix.min_images
        if with_ivfadc:
            self.ivf = self._build_ivfadc(vectors)
            self.ivf.save(folder / "ivfadc")
        write_state_header(folder, self.kind, ntotal=int(len(self._ids)), dim=int(vectors.shape[1]),
                           ivfadc=with_ivfadc)

    def _build_ivfadc(self, vectors):
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
        ivf.add(vectors, ids=self._ids)
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

    # ------------------------------------------------------------------ search
    def first_stage(self, q: np.ndarray, k: int) -> list[Hit]:
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

    @property
    def verifier(self) -> Verifier:
        """Ratio-test matches of RootSIFT reduced by the local PCA (64-d: twice as fast as 128-d), the preset's
        ``search.ratio`` and ``search.min_inliers``."""
        s = self.config.search
        return Verifier(ratio=s.ratio, min_inliers=s.min_inliers, describe=self._describe)

    def search(self, query, *, k: int, query_box, method=None, rerank=None, get_features=None,
               query_expansion=None, shortlist=None, cache=None, threads: int = 1, **options) -> list[Hit]:
        if options:
            raise ValueError(f"preset {self.preset['name']!r} (kind global) takes no option(s) "
                             f"{', '.join(sorted(options))}.")
        method = method or self.config.search.method
        if method not in ("ip",):
            raise ValueError(f"--method {method!r} is not offered by preset {self.preset['name']!r} "
                             f"(kind global): use 'ip' (inner product of global vectors).")
        return self._ranked(query, query_box, get_features, k=k, rerank=rerank, query_expansion=query_expansion,
                            shortlist=shortlist, cache=cache, threads=threads)

    def _ranked(self, query, query_box, get_features, *, k: int, rerank, query_expansion=None, shortlist=None,
                cache=None, threads: int = 1, **first_stage_options) -> list[Hit]:
        """First-stage ranking of the encoded query, optional spatial re-ranking of the shortlist and average
        query expansion, ordered by :func:`retrieval.engine.hits.finish_ranking`."""
        s = self.config.search
        rerank = rerank or s.rerank
        if rerank not in ("none", "spatial"):
            raise ValueError(f"--rerank must be 'none' or 'spatial' for preset {self.preset['name']!r}; "
                             f"got {rerank!r}.")
        n_qe = query_expansion_count(s.query_expansion, query_expansion, rerank)
        q = self.encode([query])[0]
        shortlist = s.shortlist if shortlist is None else int(shortlist)
        depth = max(k, shortlist) if rerank == "spatial" else k
        hits = self.first_stage(q, depth, **first_stage_options)
        if rerank != "spatial":
            return finish_ranking(hits, reranked=False)[:k]

        verifier = self.verifier

        def verify(candidates):
            return verifier.rerank(candidates, query, query_box, get_features, shortlist=len(candidates),
                                   cache=cache, threads=threads)

        checked = verify(hits[:shortlist])
        hits = finish_ranking(checked + hits[shortlist:], reranked=True)
        if n_qe:
            hits = self._expanded(q, hits, {h.id: h for h in checked}, n_qe, depth, verify, get_features,
                                  first_stage_options, shortlist)
        return hits[:k]

    def _vectors_of(self, ids, get_features) -> np.ndarray:
        """Global vectors (m, D') of indexed images: the stored rows, or re-encoded from their features (backends
        that keep only codes)."""
        if self._vectors is not None:
            pos = {int(i): r for r, i in enumerate(self._ids.tolist())}
            return np.asarray(self._vectors[[pos[int(i)] for i in ids]], dtype=np.float32)
        return self.encode([get_features(int(i)) for i in ids])

    def _expanded(self, q, hits, checked, n_qe, depth, verify, get_features, first_stage_options,
                  shortlist) -> list[Hit]:
        """Average query expansion (Chum et al. 2007): the query vector plus the vectors of the ``n_qe`` best
        verified hits (skipping the query's own image: inner product with the query above 1 - 1e-5),
        L2-normalised, searched again. Hits verified (or rejected) in the first round keep that
        outcome; new shortlist entries are verified against the original query. Verified hits of the first round
        that the second search misses are kept, with their similarity to the expanded query."""
        cand = [h for h in hits if h.verified][:n_qe + 1]
        V = self._vectors_of([h.id for h in cand], get_features) if cand else np.zeros((0, len(q)), np.float32)
        V = V[V @ q < 1.0 - 1e-5][:n_qe]  # the query's own image (or an exact copy) adds nothing: skipped
        if len(V) == 0:
            return hits
        q2 = q.astype(np.float64) + V.sum(axis=0)
        norm = float(np.linalg.norm(q2))
        if norm == 0:
            return hits
        q2 = (q2 / norm).astype(np.float32)
        second = self.first_stage(q2, depth, **first_stage_options)
        fresh = [h for h in second[:shortlist] if h.id not in checked]
        done = {h.id: h for h in verify(fresh)} if fresh else {}
        out = []
        for h in second:
            old = checked.get(h.id)
            if old is not None:
                h.verified, h.inliers, h.box = old.verified, old.inliers, old.box
            elif h.id in done:
                h = done[h.id]
            out.append(h)
        seen = {h.id for h in out}
        missing = [h for h in hits if h.verified and h.id not in seen]
        if missing:
            sims = similarity_from_ip(self._vectors_of([h.id for h in missing], get_features) @ q2)
            for h, sim in zip(missing, sims, strict=True):
                h.similarity = float(sim)
            out.extend(missing)
        return finish_ranking(out, reranked=True)

