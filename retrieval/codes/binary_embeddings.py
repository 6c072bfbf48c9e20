"""Binary embeddings h(x) = q(g(x)) (Gordo et al. 2014, section 2) with symmetric and asymmetric search (section 3).

Every embedding has the same contract:

- ``fit(X)`` learns the real-valued embedding ``g`` (eq. 1) on training signatures ``X`` and, on the same
  set, the per-bit statistics of the asymmetric distances: ``alpha_k^0, alpha_k^1`` (eq. 22-23) and
  ``hat alpha_k^0, hat alpha_k^1`` (eq. 28-29);
- ``project(X) -> g(X)``, ``encode(X) -> packed codes`` (bit order: :mod:`retrieval.codes.binary_scan`,
  ``np.packbits(..., bitorder="little")``: bit k in byte k // 8 at bit position k % 8 from the LSB);
- ``add(X)`` / ``add_codes(codes)`` store database codes (``codes_``, ``ntotal``);
- ``search(x, k, distance=...)`` with ``distance`` one of ``"hamming"`` (symmetric, popcount),
  ``"expectation"`` (d_E, eq. 21-26), ``"expectation_hat"`` (d_E-hat, eq. 27-29) or ``"lower_bound"``
  (d_LB, eq. 30-33). The asymmetric ones build one 256-entry table per byte and go through the shared scan
  kernel :func:`retrieval.codes.scan.lut_scan_topk`.

The binarisation of every method is written ``q_k(u) = sigma(u - t_k)`` with ``t_k = 0`` except LSBC
(eq. 7); ITQ and SH's ``2 sigma(u) - 1`` (eq. 14) are stored as the same 0/1 bit.
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.codes import binary_scan as binary_search
from retrieval.core.checks import (
    check_array,
    check_choice,
    check_is_fitted,
    check_random_state,
    check_scalar,
)
from retrieval.core.pca import fit_pca, random_rotation
from retrieval.core.persistence import PersistableMixin

DISTANCES = ("hamming", "expectation", "expectation_hat", "lower_bound")


def _pca(X: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean (D,), top principal directions (D, n_components) and their variances (n_components,), float64, by the
    library's one PCA (:func:`retrieval.core.pca.fit_pca`: deterministic signs, orthonormal completion when there
    are fewer training vectors than directions)."""
    basis = fit_pca(X, n_components, solver="full")
    return basis.mean, basis.components.T, basis.variances


def random_orthogonal(K: int, rng: np.random.Generator) -> np.ndarray:
    """Random orthogonal K x K matrix (Gordo et al. 2014, 2.2.2; the initial rotation of ITQ): the library's one
    Haar-distributed rotation, :func:`retrieval.core.pca.random_rotation` (U V^T of the SVD of a N(0, 1) matrix).

    Returns
    -------
    ndarray of shape (K, K), dtype float64
    """
    return random_rotation(K, rng)


class BinaryEmbedding(PersistableMixin):
    """Base class: h(x) = q(g(x)) (Gordo et al. 2014, eq. 1), the asymmetric statistics and the searches.

    Subclasses implement ``_fit_g(X, rng)`` (learn g) and ``_g(X)`` (evaluate it, (n, nbits) float64).

    Learnt attributes (besides the subclass ones)
    ---------------------------------------------
    thresholds_ : ndarray of shape (nbits,), float32 — t_k of q_k(u) = sigma(u - t_k).
    alpha0_, alpha1_ : ndarray of shape (nbits,), float32 — eq. 22-23 (mean of g_k over training samples
        with bit 0 / 1; ``t_k`` when no training sample has that bit value).
    alpha0_sq_, alpha1_sq_ : ndarray of shape (nbits,), float32 — eq. 28-29 (mean of g_k^2).
    codes_ : ndarray of shape (ntotal, nbytes), uint8 — database codes.
    """

    def __init__(self, nbits: int = 64, *, random_state=None):
        self.nbits = nbits
        self.random_state = random_state

    # -- subclass hooks -------------------------------------------------------------------------
    def _fit_g(self, X, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    def _g(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def _max_bits(self, D: int) -> int | None:
        return None

    # -- fit / encode -----------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes per code, ceil(nbits / 8)."""
        return (self.nbits + 7) // 8

    @property
    def ntotal(self) -> int:
        """Number of database codes."""
        codes = getattr(self, "codes_", None)
        return 0 if codes is None else int(codes.shape[0])

    def fit(self, X, y=None):
        """Learn g on ``X`` (n, d) float32, then the alpha statistics of d_E / d_E-hat on the same set."""
        name = type(self).__name__
        check_scalar(self.nbits, "nbits", name, low=1)
        X = check_array(X, "X", min_rows=2)
        cap = self._max_bits(X.shape[1])
        if cap is not None and self.nbits > cap:
            raise ValueError(
                f"The 'nbits' parameter of {name} must be at most {cap} for {X.shape[1]}-d input "
                f"(one bit per principal direction); got {self.nbits}."
            )
        rng = check_random_state(self.random_state)
        self.d_ = int(X.shape[1])
        self.thresholds_ = np.zeros(self.nbits, dtype=np.float32)
        self._fit_g(X, rng)
        self._fit_alphas(X)
        self.codes_ = np.zeros((0, self.nbytes), dtype=np.uint8)
        return self

    def fit_statistics(self, X):
        """Re-estimate alpha_k^b (eq. 22-23) and hat alpha_k^b (eq. 28-29) on another sample ``X`` (n, d),
        keeping g and the thresholds learnt by ``fit``.

        Eq. 21 defines the alphas as expectations over the distribution p of the database signatures; ``fit``
        estimates them on its training set (Gordo et al. 2014, section 4.2). When that set is small or not drawn from
        the database's distribution (e.g. PCA directions fitted to few training vectors, whose in-sample
        variance exceeds the database's), the vectors being indexed are a better sample of p. Returns self.
        """
        check_is_fitted(self, "thresholds_")
        self._fit_alphas(check_array(X, "X", n_features=self.d_, min_rows=1))
        return self

    def _fit_alphas(self, X, batch: int = 65536):
        """alpha_k^b (eq. 22-23) and hat alpha_k^b (eq. 28-29) on the training set."""
        s = np.zeros((2, self.nbits))
        s2 = np.zeros((2, self.nbits))
        cnt = np.zeros((2, self.nbits))
        for start in range(0, X.shape[0], batch):
            G = self._g(X[start:start + batch])
            b = G >= self.thresholds_
            for v, m in ((0, ~b), (1, b)):
                s[v] += np.where(m, G, 0).sum(axis=0)
                s2[v] += np.where(m, G * G, 0).sum(axis=0)
                cnt[v] += m.sum(axis=0)
        t = self.thresholds_.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            a = np.where(cnt > 0, s / np.maximum(cnt, 1), t)
            a2 = np.where(cnt > 0, s2 / np.maximum(cnt, 1), t * t)
        self.alpha0_, self.alpha1_ = a[0].astype(np.float32), a[1].astype(np.float32)
        self.alpha0_sq_, self.alpha1_sq_ = a2[0].astype(np.float32), a2[1].astype(np.float32)

    def _check_X(self, X, name="X"):
        check_is_fitted(self, "thresholds_")
        return check_array(X, name, n_features=self.d_)

    def project(self, X) -> np.ndarray:
        """Real-valued embedding g(X) (eq. 1).

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n, nbits), dtype float32
        """
        return self._g(self._check_X(X)).astype(np.float32)

    def encode(self, X) -> np.ndarray:
        """Binary codes h(X) = q(g(X)) packed in bytes (bit k in byte k // 8, position k % 8 from the LSB).

        Returns
        -------
        ndarray of shape (n, ceil(nbits / 8)), dtype uint8
        """
        return binary_search.pack_bits(self.project(X) >= self.thresholds_)

    def decode_bits(self, codes) -> np.ndarray:
        """Unpack codes into bits, ndarray of shape (n, nbits), dtype uint8."""
        return binary_search.unpack_bits(codes, self.nbits)

    # -- database ----------------------------------------------------------------------------------
    def add(self, X) -> None:
        """Encode ``X`` (n, d) and append the codes to the database (ids continue from ``ntotal``)."""
        self.add_codes(self.encode(X))

    def add_codes(self, codes) -> None:
        """Append already-encoded codes, ndarray of shape (n, nbytes) uint8."""
        check_is_fitted(self, "thresholds_")
        codes = check_array(codes, "codes", dtype=np.uint8, n_features=self.nbytes)
        self.codes_ = np.concatenate([self.codes_, codes]) if self.ntotal else codes.copy()

    def reset(self) -> None:
        """Remove every database code."""
        self.codes_ = np.zeros((0, self.nbytes), dtype=np.uint8)

    # -- search ------------------------------------------------------------------------------------
    def asymmetric_costs(self, G: np.ndarray, distance: str) -> tuple[np.ndarray, np.ndarray]:
        """Per-bit costs of database bit 0 / 1 for queries with real-valued embeddings ``G``.

        ``"expectation"``: beta_k^b = (g_k(x) - alpha_k^b)^2 (eq. 24-25);
        ``"expectation_hat"``: E[(g_k(x) - g_k(u))^2 | h_k(u) = b] = g_k(x)^2 - 2 g_k(x) alpha_k^b +
        hat alpha_k^b (eq. 27-29); ``"lower_bound"``: gamma_k^b = [h_k(x) != b] (g_k(x) - t_k)^2 (eq. 31-32).

        Parameters
        ----------
        G : ndarray of shape (nq, nbits), float
        distance : str

        Returns
        -------
        cost0, cost1 : ndarrays of shape (nq, nbits), dtype float32
        """
        G = np.asarray(G, dtype=np.float64)
        if distance == "expectation":
            c0 = (G - self.alpha0_) ** 2
            c1 = (G - self.alpha1_) ** 2
        elif distance == "expectation_hat":
            c0 = G * G - 2 * G * self.alpha0_ + self.alpha0_sq_
            c1 = G * G - 2 * G * self.alpha1_ + self.alpha1_sq_
        elif distance == "lower_bound":
            t = self.thresholds_.astype(np.float64)
            d = (G - t) ** 2
            hx = G >= t
            c0 = np.where(hx, d, 0.0)   # h_k(x) = 1 != 0
            c1 = np.where(hx, 0.0, d)
        else:
            raise ValueError(f"distance must be one of {DISTANCES[1:]!r} for asymmetric costs; got {distance!r}.")
        return c0.astype(np.float32), c1.astype(np.float32)

    def search(self, x, k: int, distance: str = "hamming", *, threads: int = 1
               ) -> tuple[np.ndarray, np.ndarray]:
        """k nearest database codes of the queries ``x``.

        Parameters
        ----------
        x : array-like of shape (nq, d)
            Queries, not binarised (the asymmetric distances use g(x)).
        k : int
        distance : {"hamming", "expectation", "expectation_hat", "lower_bound"}
        threads : int

        Returns
        -------
        distances : ndarray of shape (nq, k), dtype float32 — ascending, padded with +inf.
        ids : ndarray of shape (nq, k), dtype int64 — padded with -1.
        """
        return self.search_codes(x, self.codes_, k, distance, threads=threads)

    def search_codes(self, x, codes, k: int, distance: str = "hamming", *, threads: int = 1
                     ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` over the database ``codes`` (ntotal, nbytes) uint8 given by the caller (e.g. memory-mapped
        from an index generation) instead of the stored ``codes_``; reads the embedding only, so any number of
        threads may call it at once. Row numbers of ``codes`` are returned as ids."""
        check_choice(distance, "distance", type(self).__name__, DISTANCES)
        check_scalar(k, "k", type(self).__name__, low=1)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        G = self.project(x)
        if distance == "hamming":
            q = binary_search.pack_bits(G >= self.thresholds_)
            return binary_search.hamming_topk(q, codes, k, threads=threads)
        c0, c1 = self.asymmetric_costs(G, distance)
        return binary_search.asymmetric_topk(c0, c1, codes, k, threads=threads)


class LSH(BinaryEmbedding):
    """Random-hyperplane LSH (Gordo et al. 2014, 2.1.1, eq. 3-5): g_k(x) = r_k'(x - mu), r_k ~ N(0, I_D), t_k = 0.

    ``center=True`` subtracts the training mean mu (the mean centring the paper recommends); with
    ``center=False`` mu = 0 and Pr[h_k(x) = h_k(y)] = 1 - theta(x, y) / pi (eq. 2).

    Learnt: ``mean_`` (D,) float32, ``projections_`` (D, nbits) float32.
    """

    def __init__(self, nbits: int = 64, *, center: bool = True, random_state=None):
        super().__init__(nbits, random_state=random_state)
        self.center = center

    def _fit_g(self, X, rng):
        self.mean_ = (X.mean(axis=0) if self.center else np.zeros(X.shape[1])).astype(np.float32)
        self.projections_ = rng.standard_normal((X.shape[1], self.nbits)).astype(np.float32)

    def _g(self, X):
        return (np.asarray(X, np.float32) - self.mean_) @ self.projections_


class LSBC(BinaryEmbedding):
    """Locality-sensitive binary codes for the Gaussian kernel (Gordo et al. 2014, 2.1.2, eq. 6-7; Raginsky-Lazebnik).

    g_k(x) = cos(r_k'x + b_k), q_k(u) = sigma(u - t_k), r_k ~ N(0, gamma I_D), b_k ~ U[0, 2 pi],
    t_k ~ U[-1, 1]. ``gamma`` is the kernel bandwidth (inverse variance: K(x, y) = exp(-gamma ||x - y||^2 / 2));
    ``gamma=None`` sets it to 1 / median squared distance between random training pairs (``gamma_``).

    Learnt: ``gamma_`` float, ``projections_`` (D, nbits), ``offsets_`` (nbits,), ``thresholds_`` (nbits,).
    """

    def __init__(self, nbits: int = 64, *, gamma: float | None = None, random_state=None):
        super().__init__(nbits, random_state=random_state)
        self.gamma = gamma

    def _fit_g(self, X, rng):
        if self.gamma is None:
            i = rng.integers(0, X.shape[0], 2000)
            j = rng.integers(0, X.shape[0], 2000)
            d2 = ((X[i].astype(np.float64) - X[j]) ** 2).sum(axis=1)
            med = float(np.median(d2[d2 > 0])) if np.any(d2 > 0) else 1.0
            self.gamma_ = 1.0 / med
        else:
            check_scalar(self.gamma, "gamma", "LSBC", kind=numbers.Real, low=0, closed="neither")
            self.gamma_ = float(self.gamma)
        D = X.shape[1]
        self.projections_ = (rng.standard_normal((D, self.nbits)) * np.sqrt(self.gamma_)).astype(np.float32)
        self.offsets_ = rng.uniform(0, 2 * np.pi, self.nbits).astype(np.float32)
        self.thresholds_ = rng.uniform(-1, 1, self.nbits).astype(np.float32)

    def _g(self, X):
        return np.cos(np.asarray(X, np.float32) @ self.projections_ + self.offsets_)


class PCAE(BinaryEmbedding):
    """PCA embedding (Gordo et al. 2014, 2.2.1, eq. 8-9): g_k(x) = w_k'(x - mu), t_k = 0, w_k the k-th principal axis.

    At most one bit per input dimension. Learnt: ``mean_`` (D,), ``components_`` (D, nbits) float32.
    """

    def _max_bits(self, D):
        return D

    def _fit_pca(self, X):
        mean, W, var = _pca(X, self.nbits)
        self.mean_ = mean.astype(np.float32)
        self.explained_variance_ = var.astype(np.float32)
        return W

    def _fit_g(self, X, rng):
        self.components_ = self._fit_pca(X).astype(np.float32)

    def _g(self, X):
        return (np.asarray(X, np.float32) - self.mean_) @ self.components_


class PCAERR(PCAE):
    """PCA embedding + random rotation (Gordo et al. 2014, 2.2.2, eq. 10-11): W~ = W R, R random orthogonal.

    Learnt: ``mean_``, ``components_`` = W R (D, nbits) float32, ``rotation_`` R (nbits, nbits) float32.
    """

    def _fit_g(self, X, rng):
        W = self._fit_pca(X)
        R = random_orthogonal(self.nbits, rng)
        self.rotation_ = R.astype(np.float32)
        self.components_ = (W @ R).astype(np.float32)


class PCAEITQ(PCAE):
    """PCA embedding + iterative quantisation (Gordo et al. 2014, 2.2.3, eq. 12-14; Gong-Lazebnik ITQ).

    Minimises sum ||q(g(x)) - g(x)||^2 over orthogonal R by alternating B = sign(V R) and the orthogonal
    Procrustes solution R = U_A U_B' from the SVD of B'V = U_B S U_A', starting from a random orthogonal R;
    ``n_iter`` iterations (50 as in ITQ). Learnt: ``mean_``, ``components_`` = W R, ``rotation_``,
    ``quantization_loss_`` (final value of eq. 12 per training sample, float).
    """

    def __init__(self, nbits: int = 64, *, n_iter: int = 50, random_state=None):
        super().__init__(nbits, random_state=random_state)
        self.n_iter = n_iter

    def _fit_g(self, X, rng):
        check_scalar(self.n_iter, "n_iter", "PCAEITQ", low=0)
        W = self._fit_pca(X)
        V = (X.astype(np.float64) - self.mean_) @ W
        R = random_orthogonal(self.nbits, rng)
        for _ in range(self.n_iter):
            B = np.where(V @ R >= 0, 1.0, -1.0)
            ub, _, uat = np.linalg.svd(B.T @ V)
            R = uat.T @ ub.T
        VR = V @ R
        self.quantization_loss_ = float(((np.where(VR >= 0, 1.0, -1.0) - VR) ** 2).sum(axis=1).mean())
        self.rotation_ = R.astype(np.float32)
        self.components_ = (W @ R).astype(np.float32)


class SH(BinaryEmbedding):
    """Spectral hashing (Gordo et al. 2014, 2.2.4; Weiss-Torralba-Fergus) with the analytical 1-d eigenfunctions.

    PCA to ``n_pca = min(nbits, D)`` directions; on each direction i the data range [a_i, b_i] is taken as
    uniform and the eigenfunctions of the Laplace-Beltrami operator are
    ``sin(pi/2 + m pi / (b_i - a_i) * (y_i - a_i))`` with eigenvalue ordering by ``(m pi / (b_i - a_i))^2``;
    the ``nbits`` smallest non-constant ones are kept. g_k(x) is that eigenfunction, q_k(u) = sigma(u)
    (eq. 19 relaxation, binarised at 0).

    Learnt: ``mean_`` (D,), ``pca_`` (D, n_pca), ``mins_`` (n_pca,), ``dims_`` (nbits,) int64 (direction of
    each bit), ``omegas_`` (nbits,) float32 (m pi / (b - a)).
    """

    def _fit_g(self, X, rng):
        n_pca = min(self.nbits, X.shape[1])
        mean, W, _ = _pca(X, n_pca)
        self.mean_ = mean.astype(np.float32)
        self.pca_ = W.astype(np.float32)
        Y = (X - self.mean_) @ self.pca_
        eps = np.finfo(np.float32).eps
        mn = Y.min(axis=0) - eps
        mx = Y.max(axis=0) + eps
        R = np.maximum(mx - mn, 1e-12)
        max_mode = np.ceil((self.nbits + 1) * R / R.max()).astype(int)
        dims, omegas = [], []
        for i in range(n_pca):
            m = np.arange(1, max_mode[i] + 1)
            dims.append(np.full(m.size, i))
            omegas.append(m * np.pi / R[i])
        dims = np.concatenate(dims)
        omegas = np.concatenate(omegas)
        order = np.lexsort((dims, omegas))[: self.nbits]
        self.mins_ = mn.astype(np.float32)
        self.dims_ = dims[order].astype(np.int64)
        self.omegas_ = omegas[order].astype(np.float32)

    def _g(self, X):
        Y = (np.asarray(X, np.float32) - self.mean_) @ self.pca_
        return np.sin(np.pi / 2 + self.omegas_ * (Y[:, self.dims_] - self.mins_[self.dims_]))


EMBEDDINGS = {"LSH": LSH, "LSBC": LSBC, "SH": SH, "PCAE": PCAE, "PCAE-RR": PCAERR, "PCAE-ITQ": PCAEITQ}


def make_embedding(name: str, nbits: int, **params) -> BinaryEmbedding:
    """Build one of the six embeddings by its paper name (``"LSH"``, ``"LSBC"``, ``"SH"``, ``"PCAE"``,
    ``"PCAE-RR"``, ``"PCAE-ITQ"``)."""
    check_choice(name, "name", "make_embedding", tuple(EMBEDDINGS))
    return EMBEDDINGS[name](nbits, **params)
