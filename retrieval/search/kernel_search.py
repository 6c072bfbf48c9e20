"""Approximate kernel NN search by explicit embedding then a Euclidean code (Bourrier et al. 2015, section 4, Fig. 1).

- :class:`KPCAPQ` — KPCA (eq. 11) -> pre-processing (random permutation of the components, 5.2.1; or random
  rotation; or none: Table 2) -> product quantisation (:class:`retrieval.codes.pq.ProductQuantizer`) with
  ADC; optional re-ranking of a shortlist with the true kernel (4.3, online step 3).
- :class:`KPCALSH` — KPCA (E = B by default, as in 5.2.2) -> random-hyperplane LSH, a
  :class:`~retrieval.codes.binary_embeddings.BinaryEmbedding` (Hamming or asymmetric distances).
"""

from __future__ import annotations

import numpy as np

from retrieval.codes.binary_embeddings import BinaryEmbedding, random_orthogonal
from retrieval.codes.kernel_pca import KernelPCAEmbedding
from retrieval.codes.kernels import check_histograms
from retrieval.core.checks import check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.persistence import PersistableMixin
from retrieval.search.kernel_exact import rerank

PREPROCESSING = ("permutation", "rotation", "none")


class KPCAPQ(PersistableMixin):
    """KPCA + PQ for kernel NN search (Bourrier et al. 2015, 4.1-4.3, 5.2.1).

    Parameters
    ----------
    kernel : str
    n_landmarks : int
        M (001: 1,024).
    n_components : int
        E (001: 128 for KPCA+PQ in Fig. 4; 64 in Table 2).
    M : int
        PQ sub-quantisers (code of M * nbits bits; 001 writes D for it).
    nbits : int
        Bits per sub-quantiser (8).
    preprocessing : {"permutation", "rotation", "none"}
    keep_vectors : bool
        Keep the added vectors for re-ranking with the true kernel.

    Attributes: ``kpca_`` (KernelPCAEmbedding), ``transform_`` (E, E) float32 (permutation or rotation
    matrix; identity for "none"), ``pq_`` (ProductQuantizer), ``base_`` (n, d) float32 when kept.
    ``save``/``load`` store the nested KPCA and PQ arrays as ``kpca_*`` / ``pq_*`` members.
    """

    def __init__(self, kernel: str = "chi2", n_landmarks: int = 1024, n_components: int = 128, *, M: int = 16,
                 nbits: int = 8, preprocessing: str = "permutation", keep_vectors: bool = True, gamma: float = 1.0,
                 random_state=None):
        self.kernel = kernel
        self.n_landmarks = n_landmarks
        self.n_components = n_components
        self.M = M
        self.nbits = nbits
        self.preprocessing = preprocessing
        self.keep_vectors = keep_vectors
        self.gamma = gamma
        self.random_state = random_state

    def embed(self, X, *, kx=None) -> np.ndarray:
        """KPCA embedding followed by the pre-processing. ndarray (n, E) float32."""
        check_is_fitted(self, "pq_")
        return (self.kpca_.transform(X, kx=kx) @ self.transform_).astype(np.float32)

    def fit(self, X, y=None):
        """Learn KPCA on ``n_landmarks`` rows of X, then PQ on the embedded X (n, d)."""
        from retrieval.codes.pq import ProductQuantizer

        check_choice(self.preprocessing, "preprocessing", "KPCAPQ", PREPROCESSING)
        rng = check_random_state(self.random_state)
        X = check_histograms(X, "X", nonneg=self.kernel != "rbf")
        self.kpca_ = KernelPCAEmbedding(self.kernel, self.n_landmarks, self.n_components, gamma=self.gamma,
                                        random_state=rng).fit(X)
        E = self.kpca_.n_components_
        if E % self.M:
            raise ValueError(f"KPCAPQ: the embedding dimension {E} must be a multiple of M={self.M}.")
        if self.preprocessing == "permutation":
            T = np.eye(E, dtype=np.float32)[:, rng.permutation(E)]
        elif self.preprocessing == "rotation":
            T = random_orthogonal(E, rng).astype(np.float32)
        else:
            T = np.eye(E, dtype=np.float32)
        self.transform_ = T
        Z = (self.kpca_.transform(X) @ T).astype(np.float32)
        self.pq_ = ProductQuantizer(self.M, self.nbits, random_state=rng).fit(Z)
        self.base_ = None
        return self

    @property
    def ntotal(self) -> int:
        """Number of database codes."""
        return self.pq_.ntotal if hasattr(self, "pq_") else 0

    def _extra_state(self):
        attrs, arrays = _kpca_state(self.kpca_)
        arrays.update({"pq_codebooks": self.pq_.codebooks_, "pq_codes": self.pq_.codes_})
        return attrs, arrays

    def _set_extra_state(self, attributes, arrays):
        from retrieval.codes.pq import ProductQuantizer

        self.kpca_ = _kpca_from_state(self.kernel, self.n_components, self.gamma, attributes, arrays)
        pq = ProductQuantizer(self.M, self.nbits)
        books = arrays["pq_codebooks"]
        pq.codebooks_ = books
        pq.d_, pq.dsub_, pq.ksub_ = int(books.shape[0] * books.shape[2]), int(books.shape[2]), int(books.shape[1])
        pq.codes_ = arrays["pq_codes"]
        pq.forget_tables()
        self.pq_ = pq

    def add(self, X) -> None:
        """Embed, encode and store ``X`` (n, d); keep the vectors when ``keep_vectors``."""
        X = check_histograms(X, "X", nonneg=self.kernel != "rbf")
        self.pq_.add(self.embed(X))
        if self.keep_vectors:
            self.base_ = X.copy() if self.base_ is None else np.concatenate([self.base_, X])

    def search(self, x, k: int = 10, *, rerank_size: int = 0, threads: int = 1
               ) -> tuple[np.ndarray, np.ndarray]:
        """ADC search in the embedded space; with ``rerank_size`` > 0, re-rank that shortlist by the kernel.

        Returns
        -------
        distances : ndarray (nq, k) float32 — squared Euclidean ADC distance in the embedded space, or d_K
            (Bourrier et al. 2015, eq. 4) after re-ranking. ids : ndarray (nq, k) int64.
        """
        check_scalar(k, "k", "KPCAPQ", low=1)
        check_scalar(rerank_size, "rerank_size", "KPCAPQ", low=0)
        Z = self.embed(x)
        if not rerank_size:
            return self.pq_.search(Z, k, threads=threads)
        if self.base_ is None:
            raise ValueError("KPCAPQ: re-ranking needs the vectors; build it with keep_vectors=True.")
        _, short = self.pq_.search(Z, max(rerank_size, k), threads=threads)
        return rerank(np.asarray(x, np.float32), self.base_, short, k, self.kernel, gamma=self.gamma)


class KPCALSH(BinaryEmbedding):
    """KPCA + LSH (Bourrier et al. 2015, 5.2.2): g(x) = r_k' phi(x) on the centred KPCA embedding, r_k ~ N(0, I).

    ``n_components=None`` uses E = nbits (the paper's choice). Learnt: ``kpca_`` and ``projections_`` (E, nbits).
    """

    def __init__(self, nbits: int = 64, *, kernel: str = "chi2", n_landmarks: int = 1024,
                 n_components: int | None = None, gamma: float = 1.0, random_state=None):
        super().__init__(nbits, random_state=random_state)
        self.kernel = kernel
        self.n_landmarks = n_landmarks
        self.n_components = n_components
        self.gamma = gamma

    def _fit_g(self, X, rng):
        E = self.nbits if self.n_components is None else self.n_components
        self.kpca_ = KernelPCAEmbedding(self.kernel, self.n_landmarks, E, gamma=self.gamma,
                                        random_state=rng).fit(X)
        self.projections_ = rng.standard_normal((self.kpca_.n_components_, self.nbits)).astype(np.float32)

    def _g(self, X):
        return self.kpca_.transform(X) @ self.projections_

    def _extra_state(self):
        return _kpca_state(self.kpca_)

    def _set_extra_state(self, attributes, arrays):
        E = self.nbits if self.n_components is None else self.n_components
        self.kpca_ = _kpca_from_state(self.kernel, E, self.gamma, attributes, arrays)


def _kpca_state(k):
    return ({"kpca_ncomp": k.n_components_, "kpca_dim": k.d_},
            {"kpca_landmarks": k.landmarks_, "kpca_coef": k.coef_, "kpca_offset": k.offset_,
             "kpca_eigenvalues": k.eigenvalues_, "kpca_mean_coef": k.mean_coef_})


def _kpca_from_state(kernel, E, gamma, attributes, arrays):
    k = KernelPCAEmbedding(kernel, len(arrays["kpca_landmarks"]), E, gamma=gamma)
    k.landmarks_, k.coef_, k.offset_ = arrays["kpca_landmarks"], arrays["kpca_coef"], arrays["kpca_offset"]
    k.eigenvalues_, k.mean_coef_ = arrays["kpca_eigenvalues"], arrays["kpca_mean_coef"]
    k.n_components_, k.d_ = attributes["kpca_ncomp"], attributes["kpca_dim"]
    return k
