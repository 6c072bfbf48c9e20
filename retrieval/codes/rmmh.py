"""Random Maximum Margin Hashing (Bourrier et al. 2015, section 3.2, eq. 16-18; Joly and Buisson 2011).

Each bit draws ``n_per_hash`` (even) training vectors from a pool of ``n_landmarks``, labels half of them +1 and
half -1 at random, and trains a C-SVM on the precomputed kernel (scikit-learn's ``SVC(kernel="precomputed")``,
eq. 17-18); the hash function is ``h(x) = sigma(sum_i alpha_i eps_i K(x, y_i) + b)`` (eq. 16).
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.codes._landmark_hashing import LandmarkHashing
from retrieval.codes.kernels import kernel_matrix
from retrieval.core.checks import check_scalar


class RMMH(LandmarkHashing):
    """RMMH binary embedding (Bourrier et al. 2015, eq. 16-18).

    Parameters
    ----------
    nbits : int
    kernel : {"chi2", "intersection", "hellinger", "rbf"}
    n_landmarks : int
        Size of the pool the per-bit training sets are drawn from (001: M = 1,024 learning vectors).
    n_per_hash : int
        Even number of vectors per hash function (Joly-Buisson's M; 32 by default).
    C : float
        SVM soft-margin parameter of eq. 17 (large C: close to the hard margin of the original RMMH).

    Learnt: ``landmarks_`` (pool, d) float32, ``weights_`` (pool, nbits) float64 (alpha_i eps_i of each bit,
    zero outside its support vectors), ``intercepts_`` (nbits,) float64.
    """

    def __init__(self, nbits: int = 64, *, kernel: str = "chi2", n_landmarks: int = 1024, n_per_hash: int = 32,
                 C: float = 100.0, gamma: float = 1.0, random_state=None):
        super().__init__(nbits, kernel=kernel, n_landmarks=n_landmarks, gamma=gamma, random_state=random_state)
        self.n_per_hash = n_per_hash
        self.C = C

    def _fit_g(self, X, rng):
        from sklearn.svm import SVC

        self._check_pool_params(X, "RMMH")
        check_scalar(self.n_per_hash, "n_per_hash", "RMMH", low=2, high=self.n_landmarks)
        if self.n_per_hash % 2:
            raise ValueError(f"The 'n_per_hash' parameter of RMMH must be even; got {self.n_per_hash}.")
        check_scalar(self.C, "C", "RMMH", kind=numbers.Real, low=0, closed="neither")
        pool = self._draw_pool(self._histograms(X), rng)
        K = kernel_matrix(pool, pool, self.kernel, gamma=self.gamma).astype(np.float64)
        W = np.zeros((self.n_landmarks, self.nbits))
        b = np.zeros(self.nbits)
        half = self.n_per_hash // 2
        for k in range(self.nbits):
            sel = rng.choice(self.n_landmarks, self.n_per_hash, replace=False)
            labels = np.r_[np.ones(half), -np.ones(half)]
            svm = SVC(kernel="precomputed", C=self.C).fit(K[np.ix_(sel, sel)], labels)
            W[sel[svm.support_], k] = svm.dual_coef_[0]
            b[k] = svm.intercept_[0]
        self.landmarks_ = pool.astype(np.float32)
        self.weights_ = W
        self.intercepts_ = b

    def _g(self, X):
        return self._landmark_kernel(X) @ self.weights_ + self.intercepts_
