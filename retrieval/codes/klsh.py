"""Kernelized LSH (Bourrier et al. 2015, section 3.1, eq. 14-15; Kulis and Grauman 2009) as a binary embedding.

M landmarks Y are drawn from the training data; with the centred Gram matrix K_c = H K(Y) H, each bit uses
``w = K_c^{-1/2} e_S`` (eq. 15), e_S the indicator of Q landmarks drawn at random, and
``h(x) = sigma(sum_i w_i K_c(x, y_i))`` (eq. 14) where K_c(x, y_i) is the kernel centred in feature space
(Kulis-Grauman centre the data so that the random direction is a Gaussian around the mean). ``rank`` keeps
only the leading eigenvectors of K_c (the KLSH(rank) variant of Jiang et al. used in Kim and Choi 2017).

Being a :class:`~retrieval.codes.binary_embeddings.BinaryEmbedding`, it also has the asymmetric distances.
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.codes._landmark_hashing import LandmarkHashing
from retrieval.codes.kernels import kernel_matrix
from retrieval.core.checks import check_random_state, check_scalar


def _centred_gram_eig(Y, kernel, gamma):
    K = kernel_matrix(Y, Y, kernel, gamma=gamma).astype(np.float64)
    K = (K + K.T) / 2
    M = K.shape[0]
    H = np.eye(M) - 1.0 / M
    evals, evecs = np.linalg.eigh(H @ K @ H)
    order = np.argsort(evals)[::-1]
    return K, evals[order], evecs[:, order]


class KLSH(LandmarkHashing):
    """Kernelized LSH, h_k(x) = sigma(w_k' K_c(x, Y)) with w_k = K_c(Y)^{-1/2} e_S (Bourrier et al. 2015, eq. 14-15).

    Parameters
    ----------
    nbits : int
    kernel : {"chi2", "intersection", "hellinger", "rbf"}
    n_landmarks : int
        M (001: 1,024).
    n_subset : int
        Q, number of ones in e_S (Kulis-Grauman: t = 30).
    rank : int or None
        Keep the ``rank`` leading eigenpairs of K_c in K_c^{-1/2} (None: all numerically non-zero).
    gamma : float
        RBF bandwidth.

    Learnt: ``landmarks_`` (M, d) float32, ``weights_`` (M, nbits) float64 (H w_k as columns),
    ``bias_`` (nbits,) float64 so that g(x) = K(x, Y) @ weights_ - bias_.
    """

    def __init__(self, nbits: int = 64, *, kernel: str = "chi2", n_landmarks: int = 1024, n_subset: int = 30,
                 rank: int | None = None, gamma: float = 1.0, random_state=None):
        super().__init__(nbits, kernel=kernel, n_landmarks=n_landmarks, gamma=gamma, random_state=random_state)
        self.n_subset = n_subset
        self.rank = rank

    def _fit_g(self, X, rng):
        self._check_pool_params(X, "KLSH")
        check_scalar(self.n_subset, "n_subset", "KLSH", low=1, high=self.n_landmarks)
        check_scalar(self.gamma, "gamma", "KLSH", kind=numbers.Real, low=0, closed="neither")
        self._fit_landmarks(self._draw_pool(self._histograms(X), rng), rng)

    def fit_landmarks(self, Y, X_stats=None):
        """Fit from given landmarks ``Y`` (M, d); ``X_stats`` (n, d) (default Y) gives the d_E statistics."""
        Y = self._histograms(Y, "Y")
        rng = check_random_state(self.random_state)
        self.d_ = int(Y.shape[1])
        self.thresholds_ = np.zeros(self.nbits, dtype=np.float32)
        self._fit_landmarks(Y, rng)
        self._fit_alphas(Y if X_stats is None else np.asarray(X_stats, np.float32))
        self.codes_ = np.zeros((0, self.nbytes), dtype=np.uint8)
        return self

    def _fit_landmarks(self, Y, rng):
        M = Y.shape[0]
        K, evals, evecs = _centred_gram_eig(Y, self.kernel, self.gamma)
        keep = evals > max(evals[0], 0) * 1e-10
        r = int(keep.sum()) if self.rank is None else int(min(self.rank, keep.sum()))
        inv_sqrt = (evecs[:, :r] / np.sqrt(evals[:r])) @ evecs[:, :r].T     # K_c^{-1/2} (pseudo-inverse)
        Q = min(self.n_subset, M)
        E = np.zeros((M, self.nbits))
        for b in range(self.nbits):
            E[rng.choice(M, Q, replace=False), b] = 1.0
        W = inv_sqrt @ E
        H = np.eye(M) - 1.0 / M
        HW = H @ W
        self.landmarks_ = Y.astype(np.float32)
        self.weights_ = HW
        self.bias_ = K.mean(axis=1) @ HW   # centring: K_c(x, :) = H (k(x) - K 1 / M)

    def _g(self, X):
        return self._landmark_kernel(X) @ self.weights_ - self.bias_
