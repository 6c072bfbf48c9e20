"""Verification evidence: what spatial verification needs of a database image, without its descriptors.

Large-scale object retrieval keeps, for each database feature, its visual word and its elliptical frame (the
forward index of Philbin et al. 2007, "Object retrieval with large vocabularies and fast spatial matching"), and
tentative correspondences are the query's and the image's features that share a word. Jegou et al. 2008
("Hamming embedding and weak geometric consistency") add to each feature a binary signature that locates it inside
its word's cell, so that two features of one word correspond only when their signatures are close:

- a random orthogonal projection ``P`` (``bits`` x d, drawn once, section 3.1 of Jegou et al. 2008) of the
  described descriptor ``x`` (RootSIFT);
- per word ``q(x)`` and per bit ``i``, the median ``tau_{q(x), i}`` of the projected training descriptors of that
  word (taken between two of them, :func:`_split`); bit ``i`` of the signature is ``(P x)_i > tau_{q(x), i}``
  (eq. 5);
- two features correspond when ``q(x) = q(y)`` and the Hamming distance of their signatures is at most ``h_t``
  (eq. 6).

The query side is the query's own features, all of them, each assigned to its ``multiple`` nearest words
(multiple assignment on the query side only, Jegou et al. 2010, "Improving bag-of-features for large scale image
search", section 4.1), its signature computed against each of those words' medians. A database feature is kept as
its word (uint32), its signature (``bits`` / 8 bytes) and its frame packed in 12 bytes
(:func:`retrieval.features.compact.pack_frames`: centre in fixed point over the image, shape in float16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.compact import pack_frames, unpack_frames

__all__ = ["Evidence", "EvidenceModel", "EvidenceRule", "QueryEvidence", "evidence_matches", "hamming_weights"]

SIGNATURE_BITS = (32, 64)


@dataclass(frozen=True)
class Evidence:
    """A database image's evidence: per feature its ``words`` (n,) uint32, ``signatures`` (n,) uint32 or uint64,
    packed frame ``centres`` (n, 2) uint16 and ``shapes`` (n, 4) float16
    (:func:`~retrieval.features.compact.pack_frames`); the image size (w, h). Features are kept in word order
    (stable), so that the features of a word are one slice."""

    words: np.ndarray
    signatures: np.ndarray
    centres: np.ndarray
    shapes: np.ndarray
    image_size: tuple[int, int]

    def __len__(self) -> int:
        return len(self.words)

    @property
    def frames(self) -> np.ndarray:
        """The frames (n, 6) float32 as packed."""
        return unpack_frames(self.centres, self.shapes, self.image_size)

    @property
    def xy(self) -> np.ndarray:
        """The feature positions (n, 2) float32, as :attr:`LocalFeatures.xy
        <retrieval.features.types.LocalFeatures.xy>`."""
        return self.frames[:, :2]

    @property
    def nbytes(self) -> int:
        return int(self.words.nbytes + self.signatures.nbytes + self.centres.nbytes + self.shapes.nbytes)

    def arrays(self) -> dict:
        """The arrays to save (``np.savez``), with the image size."""
        return {"words": self.words, "signatures": self.signatures, "centres": self.centres, "shapes": self.shapes,
                "image_size": np.asarray(self.image_size, np.int64)}

    @classmethod
    def from_arrays(cls, arrays) -> Evidence:
        size = np.asarray(arrays["image_size"])
        return cls(np.asarray(arrays["words"]), np.asarray(arrays["signatures"]), np.asarray(arrays["centres"]),
                   np.asarray(arrays["shapes"]), (int(size[0]), int(size[1])))


@dataclass(frozen=True)
class QueryEvidence:
    """A query's side: per feature and per assigned word (n, multiple) its ``words`` (int64, -1 when fewer were
    found) and ``signatures``; its frames (n, 6) float32 as extracted (never packed)."""

    words: np.ndarray
    signatures: np.ndarray
    frames: np.ndarray


@dataclass(frozen=True)
class EvidenceRule:
    """How a pair is decided on evidence: tentative correspondences by :func:`evidence_matches` (``multiple`` words
    per query feature, ``hamming`` the threshold ``h_t``, ``ratio`` the Hamming ratio test, ``mutual``), then
    :func:`~retrieval.rerank.verification.verify` with ``min_inliers``, and the pair verified when its inliers'
    :func:`hamming_weights` (``sigma``) sum to at least ``min_weight``: a close correspondence counts for about one
    inlier, a distant one for little (calibrated with ``retrieval bench verify --evidence``, docs/results.md)."""

    multiple: int = 5
    hamming: int = 32
    ratio: float = 0.0
    mutual: bool = True
    sigma: float = 16.0
    min_inliers: int = 4
    min_weight: float = 1.875


@dataclass(frozen=True)
class EvidenceModel:
    """The vocabulary, projection and medians of the evidence (module docstring).

    Parameters
    ----------
    vocabulary : fitted :class:`~retrieval.aggregation.ApproximateKMeans` of the described space (RootSIFT)
    projection : (bits, d) float32, orthonormal rows
    medians : (K, bits) float32, the per-word medians of the projected training descriptors
    key : str — a digest of those arrays, computed when the model is made (evidence computed with one model is
        never read with another)
    """

    vocabulary: object
    projection: np.ndarray
    medians: np.ndarray
    key: str = ""

    def __post_init__(self):
        if not self.key:   # a digest of the arrays: evidence computed with one model is never read with another
            import hashlib

            h = hashlib.blake2b(digest_size=8)
            for a in (self.vocabulary.cluster_centers_, self.projection, self.medians):
                h.update(np.ascontiguousarray(a).tobytes())
            object.__setattr__(self, "key", h.hexdigest())

    @property
    def bits(self) -> int:
        return int(self.projection.shape[0])

    @property
    def n_words(self) -> int:
        return int(self.medians.shape[0])

    @classmethod
    def learn(cls, descriptors, *, n_words: int, bits: int = 64, n_iter: int = 10, random_state: int = 0,
              vocabulary=None) -> EvidenceModel:
        """Learn the model from described training descriptors (n, d) float32: AKM words (unless ``vocabulary``, a
        fitted one, is given), a seeded random orthogonal projection, and per-word medians (words with fewer than
        eight training descriptors take the medians of all of them)."""
        from retrieval.aggregation.large_vocabulary import ApproximateKMeans

        if bits not in SIGNATURE_BITS:
            raise ValueError(f"bits must be one of {SIGNATURE_BITS}; got {bits!r}.")
        check_scalar(n_words, "n_words", "EvidenceModel.learn", low=2)
        X = np.ascontiguousarray(descriptors, np.float32)
        rng = np.random.default_rng(random_state)
        if vocabulary is None:
            vocabulary = ApproximateKMeans(n_words, n_iter=n_iter, random_state=random_state).fit(X)
        d = X.shape[1]
        if bits > d:
            raise ValueError(f"EvidenceModel.learn: {bits}-bit signatures need descriptors of at least {bits} "
                             f"dimensions; got {d}.")
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        projection = np.ascontiguousarray(q[:bits], np.float32)
        labels = vocabulary.predict(X)
        proj = X @ projection.T
        K = int(vocabulary.cluster_centers_.shape[0])
        medians = np.tile(_split(proj), (K, 1))
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(K + 1))
        for w in range(K):
            lo, hi = bounds[w], bounds[w + 1]
            if hi - lo >= 8:
                medians[w] = _split(proj[order[lo:hi]])
        return cls(vocabulary, projection, medians)

    def save(self, folder) -> list[str]:
        """Save into a model folder (``evidence_words.npz``: the vocabulary; ``evidence.npz``: projection and
        medians, float32); returns the files written."""
        from pathlib import Path

        from retrieval.core.persistence import atomic_write

        folder = Path(folder)
        self.vocabulary.save(folder / "evidence_words.npz")
        with atomic_write(folder / "evidence.npz") as fh:
            np.savez(fh, projection=self.projection, medians=self.medians)
        return ["evidence_words.npz", "evidence.npz"]

    @classmethod
    def load(cls, folder) -> EvidenceModel:
        from pathlib import Path

        from retrieval.core.persistence import load_estimator

        folder = Path(folder)
        vocabulary = load_estimator(folder / "evidence_words.npz")
        with np.load(folder / "evidence.npz", allow_pickle=False) as z:
            projection, medians = np.asarray(z["projection"], np.float32), np.asarray(z["medians"], np.float32)
        if medians.shape != (vocabulary.cluster_centers_.shape[0], projection.shape[0]) or \
                projection.shape[0] not in SIGNATURE_BITS:
            raise ValueError(f"{folder}: evidence model arrays of inconsistent shapes {projection.shape}, "
                             f"{medians.shape}.")
        return cls(vocabulary, projection, medians)

    def signatures(self, described, words) -> np.ndarray:
        """Signatures (n,) (uint32 or uint64) of described descriptors (n, d) against ``words`` (n,) (eq. 5)."""
        X = np.asarray(described, np.float32)
        w = np.asarray(words, np.int64)
        above = (X @ self.projection.T) > self.medians[w]
        packed = np.packbits(above, axis=1, bitorder="little")
        return packed.view(np.uint32 if self.bits == 32 else np.uint64)[:, 0].copy()

    def database(self, described, frames, image_size) -> Evidence:
        """The evidence of a database image from its described descriptors (n, d) and frames (n, 6)."""
        X = np.asarray(described, np.float32)
        size = (int(image_size[0]), int(image_size[1]))
        if len(X) == 0:
            sig = np.uint32 if self.bits == 32 else np.uint64
            return Evidence(np.zeros(0, np.uint32), np.zeros(0, sig), np.zeros((0, 2), np.uint16),
                            np.zeros((0, 4), np.float16), size)
        words = self.vocabulary.predict(X)
        order = np.argsort(words, kind="stable")
        sigs = self.signatures(X[order], words[order])
        xy, shape = pack_frames(np.asarray(frames, np.float32)[order], size)
        return Evidence(words[order].astype(np.uint32), sigs, xy, shape, size)

    def query(self, described, frames, multiple: int = 1) -> QueryEvidence:
        """A query's side from its described descriptors (n, d) and frames (n, 6): ``multiple`` nearest words of
        each feature, a signature against each."""
        X = np.asarray(described, np.float32)
        n = len(X)
        if n == 0:
            return QueryEvidence(np.zeros((0, multiple), np.int64), np.zeros((0, multiple), np.uint64),
                                 np.zeros((0, 6), np.float32))
        _, words = self.vocabulary.kneighbors(X, multiple)
        sigs = np.zeros(words.shape, np.uint32 if self.bits == 32 else np.uint64)
        for a in range(words.shape[1]):
            ok = words[:, a] >= 0
            sigs[ok, a] = self.signatures(X[ok], words[ok, a])
        return QueryEvidence(words, sigs, np.asarray(frames, np.float32))


def _split(values) -> np.ndarray:
    """Per column, the median of ``values`` (n, bits) as a threshold that equals none of them: the midpoint of the
    two middle values (for an odd n, of the middle one and the next), so that a training descriptor is never on its
    word's threshold, where the last bit of a product would decide its signature."""
    v = np.sort(np.asarray(values, np.float64), axis=0)
    n = len(v)
    lo = v[(n - 1) // 2]
    hi = v[min(n // 2 + (n % 2), n - 1)]
    return ((lo + hi) / 2).astype(np.float32)


def evidence_matches(query: QueryEvidence, db: Evidence, max_distance: int, *, ratio: float = 0.0,
                     mutual: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Tentative correspondences of a query and a database image on their evidence: ``(matches (m, 2) int64 (query
    index, database index), distances (m,) int64)``.

    A candidate is a query feature and a database feature of one word (any of the query feature's assigned words)
    whose signatures differ in at most ``max_distance`` bits (Jegou et al. 2008, eq. 6). Each query feature keeps
    its closest candidate, and only when it is clearly closer than the next one: ``d1 <= ratio * d2`` (a ratio
    test on Hamming distances, the analogue of Lowe's; ``ratio`` 0: no test; no second candidate: kept); with
    ``mutual``, each database feature keeps only the closest of the query features that kept it (ties by index)."""
    empty = (np.zeros((0, 2), np.int64), np.zeros(0, np.int64))
    if len(db) == 0 or len(query.words) == 0:
        return empty
    n, multiple = query.words.shape
    qw = query.words.ravel()
    qs = query.signatures.ravel()
    qi = np.repeat(np.arange(n, dtype=np.int64), multiple)
    ok = qw >= 0
    qw, qs, qi = qw[ok], qs[ok], qi[ok]
    dbw = db.words.astype(np.int64)
    lo = np.searchsorted(dbw, qw, side="left")
    hi = np.searchsorted(dbw, qw, side="right")
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return empty
    rep = np.repeat(np.arange(len(qw)), counts)
    j = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(total)
    dist = np.bitwise_count(qs[rep] ^ db.signatures.astype(qs.dtype)[j]).astype(np.int64)
    a, b = qi[rep], j
    # per query feature: candidates by (distance, database index); the first kept when it passes the ratio test
    order = np.lexsort((b, dist, a))
    a, b, dist = a[order], b[order], dist[order]
    first = np.r_[0, np.flatnonzero(np.diff(a)) + 1]
    count = np.diff(np.r_[first, len(a)])
    d1 = dist[first]
    keep = d1 <= max_distance
    if ratio > 0:
        d2 = np.where(count > 1, dist[np.minimum(first + 1, len(a) - 1)], np.iinfo(np.int64).max)
        keep &= (count == 1) | (d1 <= ratio * d2)
    sel = first[keep]
    a, b, dist = a[sel], b[sel], dist[sel]
    if mutual and len(a):
        order = np.lexsort((a, dist, b))
        a, b, dist = a[order], b[order], dist[order]
        head = np.r_[True, np.diff(b) != 0]
        a, b, dist = a[head], b[head], dist[head]
    order = np.argsort(a, kind="stable")
    return np.stack([a[order], b[order]], axis=1).astype(np.int64), dist[order]


def hamming_weights(distances, sigma: float) -> np.ndarray:
    """The weight of a correspondence by its Hamming distance, ``exp(-h^2 / sigma^2)`` (Jegou, Douze and Schmid 2009,
    "On the burstiness of visual elements", section 3: sigma = 16 for 64-bit signatures)."""
    d = np.asarray(distances, np.float64)
    return np.exp(-(d / float(sigma)) ** 2)
