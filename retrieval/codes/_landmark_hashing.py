"""The part shared by KLSH and RMMH (Bourrier et al. 2015, section 3): hash functions that are kernel expansions
over a pool of landmarks drawn from the training data, g_k(x) = sum_i W_ik K(x, y_i) + c_k (eq. 14 and 16)."""

from __future__ import annotations

import numpy as np

from retrieval.codes.binary_embeddings import BinaryEmbedding
from retrieval.codes.kernels import KERNELS, check_histograms, kernel_matrix
from retrieval.core.checks import check_choice, check_scalar


class LandmarkHashing(BinaryEmbedding):
    """Base of :class:`~retrieval.codes.klsh.KLSH` and :class:`~retrieval.codes.rmmh.RMMH`: the ``kernel``, the
    ``n_landmarks`` pool and ``gamma`` (RBF bandwidth); subclasses learn ``landmarks_`` (M, d) float32 and
    ``weights_`` (M, nbits) float64."""

    def __init__(self, nbits: int = 64, *, kernel: str = "chi2", n_landmarks: int = 1024, gamma: float = 1.0,
                 random_state=None):
        super().__init__(nbits, random_state=random_state)
        self.kernel = kernel
        self.n_landmarks = n_landmarks
        self.gamma = gamma

    def _check_pool_params(self, X, owner: str) -> None:
        """``kernel`` one of :data:`KERNELS` and ``n_landmarks`` in [2, n] for training data X (n, d)."""
        check_choice(self.kernel, "kernel", owner, KERNELS)
        check_scalar(self.n_landmarks, "n_landmarks", owner, low=2, high=X.shape[0])

    def _histograms(self, X, name: str = "X") -> np.ndarray:
        """X checked as float32 (n, d), non-negative unless the kernel is ``"rbf"``."""
        return check_histograms(X, name, nonneg=self.kernel != "rbf")

    def _draw_pool(self, X, rng) -> np.ndarray:
        """``n_landmarks`` rows of X drawn without replacement (in row order)."""
        return X[np.sort(rng.choice(X.shape[0], self.n_landmarks, replace=False))]

    def _landmark_kernel(self, X) -> np.ndarray:
        """K(X, landmarks_), ndarray of shape (n, M), float64."""
        return kernel_matrix(X, self.landmarks_, self.kernel, gamma=self.gamma).astype(np.float64)
