"""The compact form of stored features: what the spatial verification reads, in 28 bytes per feature.

A full-size photo has about 2,000 Hessian-affine features; kept as float32 frames and uint8 SIFT they cost 152 bytes
each (300 KB per photo). The compact form keeps, per feature:

- the centre in 4 bytes: ``x`` and ``y`` as 16-bit fixed point over the image's width and height (a step of
  ``(w - 1) / 65535`` pixels: 0.06 px on a 4,000-pixel side);
- the shape ``A`` (the 2x2 matrix of the frame) as four float16 (relative error below 1e-3): 8 bytes;
- the SIFT descriptor as ``M = 16`` product-quantisation codes of one byte (Jegou et al. 2012, the quantiser of
  eq. 22 applied to the 128-d SIFT split into 16 sub-vectors of 8 components, each quantised by its own 256-centroid
  k-means codebook): 16 bytes, decoded as the concatenation of the chosen sub-centroids rounded to uint8.

The codebook (:class:`DescriptorCodebook`, 32 KB) is learnt once per feature store and extractor configuration
from the store's own photos and kept beside the entries; each compact entry names the codebook it was written with
by its digest, so an entry always decodes the same.

The verification reads this form (docs/results.md "The compact feature store"); the encodings of an index are
computed from the exact features at extraction, before a sync publishes them, so the compact form changes no
encoding (docs/differences.md).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np

__all__ = ["CODEBOOK_M", "DescriptorCodebook", "MIN_TRAINING_DESCRIPTORS", "as_stored", "pack_frames",
           "unpack_frames"]

CODEBOOK_M = 16
"""Sub-quantisers of the descriptor codebook: bytes per stored descriptor."""

KSUB = 256
"""Centroids per sub-quantiser (one byte per code)."""

MIN_TRAINING_DESCRIPTORS = 10_000
"""Descriptors a codebook is learnt from at the least (39 per centroid, faiss's warning threshold); a store holding
fewer keeps its features in full until it holds enough."""

TRAINING_DESCRIPTORS = KSUB * 256
"""Descriptors sampled to learn a codebook (256 per centroid, the k-means sub-sampling of faiss)."""


@dataclass(frozen=True)
class DescriptorCodebook:
    """Product-quantisation codebook of uint8 SIFT descriptors: ``centroids`` (M, 256, d / M) float32."""

    centroids: np.ndarray

    @property
    def M(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[0] * self.centroids.shape[2])

    @property
    def digest(self) -> str:
        """BLAKE2b of the centroids' bytes (16 hex digits): the name compact entries give their codebook."""
        c = np.ascontiguousarray(self.centroids, dtype="<f4")
        return hashlib.blake2b(c.tobytes() + str(c.shape).encode(), digest_size=8).hexdigest()

    @classmethod
    def learn(cls, descriptors, *, M: int = CODEBOOK_M, seed: int = 0, n_iter: int = 25) -> DescriptorCodebook:
        """Learn the ``M`` sub-space codebooks by k-means (Jegou et al. 2012, eq. 22) from ``descriptors`` (n, d)
        uint8, at least 256 (a store learns from :data:`MIN_TRAINING_DESCRIPTORS` at the least; sub-sampled to
        :data:`TRAINING_DESCRIPTORS`)."""
        from retrieval.core.kmeans import kmeans  # training only (numba)

        X = np.asarray(descriptors)
        if X.ndim != 2 or X.shape[1] % M:
            raise ValueError(f"descriptors must have shape (n, d) with d a multiple of {M}; got {X.shape}.")
        if X.shape[0] < KSUB:
            raise ValueError(f"a descriptor codebook needs at least {KSUB} descriptors; got {X.shape[0]}.")
        rng = np.random.default_rng(seed)
        if X.shape[0] > TRAINING_DESCRIPTORS:
            X = X[np.sort(rng.choice(X.shape[0], TRAINING_DESCRIPTORS, replace=False))]
        X = np.ascontiguousarray(X, dtype=np.float32)
        dsub = X.shape[1] // M
        books = np.empty((M, KSUB, dsub), np.float32)
        for m in range(M):
            books[m] = kmeans(np.ascontiguousarray(X[:, m * dsub:(m + 1) * dsub]), KSUB, rng=rng, n_iter=n_iter,
                              max_points_per_centroid=None)
        return cls(books)

    def encode(self, descriptors) -> np.ndarray:
        """Codes (n, M) uint8 of descriptors (n, d): the nearest sub-centroid in each sub-space."""
        from retrieval.core.nearest import nearest_centers

        X = np.asarray(descriptors)
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise ValueError(f"descriptors must have shape (n, {self.dim}); got {X.shape}.")
        X = np.ascontiguousarray(X, dtype=np.float32)
        dsub = self.centroids.shape[2]
        codes = np.empty((X.shape[0], self.M), np.uint8)
        for m in range(self.M):
            if len(X):
                codes[:, m] = nearest_centers(np.ascontiguousarray(X[:, m * dsub:(m + 1) * dsub]),
                                              self.centroids[m])[0]
        return codes

    def decode(self, codes) -> np.ndarray:
        """uint8 descriptors (n, d) of codes (n, M): the chosen sub-centroids, rounded and clipped to 0..255."""
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.M or codes.dtype != np.uint8:
            raise ValueError(f"codes must be uint8 of shape (n, {self.M}); got {codes.dtype} {codes.shape}.")
        out = self.centroids[np.arange(self.M)[None, :], codes.astype(np.intp)].reshape(len(codes), self.dim)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(self.centroids, dtype="<f4"), allow_pickle=False)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "codebook") -> DescriptorCodebook:
        try:
            c = np.load(io.BytesIO(data), allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{name}: not a descriptor codebook ({exc}).") from None
        if c.ndim != 3 or c.shape[1] != KSUB or c.dtype != np.float32:
            raise ValueError(f"{name}: expected float32 centroids of shape (M, {KSUB}, dsub); got {c.dtype} "
                             f"{c.shape}.")
        return cls(c)


def pack_frames(frames, image_size) -> tuple[np.ndarray, np.ndarray]:
    """``(xy, shape)``: the centres (n, 2) uint16 in fixed point over ``(w - 1, h - 1)`` and the shapes (n, 4)
    float16 of frames (n, 6)."""
    f = np.asarray(frames, np.float32)
    span = _span(image_size)
    xy = np.rint(np.clip(f[:, :2] / span, 0.0, 1.0) * 65535.0).astype(np.uint16)
    return xy, f[:, 2:].astype(np.float16)


def unpack_frames(xy, shape, image_size) -> np.ndarray:
    """Frames (n, 6) float32 from :func:`pack_frames`."""
    out = np.empty((len(xy), 6), np.float32)
    out[:, :2] = xy.astype(np.float32) * (_span(image_size) / 65535.0)
    out[:, 2:] = shape.astype(np.float32)
    return out


def _span(image_size) -> np.ndarray:
    w, h = (int(v) for v in image_size)
    return np.array([max(w - 1, 1), max(h - 1, 1)], np.float32)


def as_stored(features, codebook: DescriptorCodebook):
    """:class:`~retrieval.features.types.LocalFeatures` as a compact store entry written with ``codebook`` reads back
    (frames packed and unpacked, descriptors encoded and decoded): what benchmarks verify against."""
    from retrieval.features.types import LocalFeatures

    xy, shape = pack_frames(features.frames, features.image_size)
    return LocalFeatures(unpack_frames(xy, shape, features.image_size),
                         codebook.decode(codebook.encode(features.descriptors)), features.image_size, features.config)
