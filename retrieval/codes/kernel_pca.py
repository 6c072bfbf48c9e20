"""Kernel PCA explicit embedding (Bourrier et al. 2015, section 2.2.1, eq. 11, centred in feature space) and R(x) (eq. 21).

With ``M`` landmarks Y = {y_1..y_M}, Gram matrix K(Y) and its feature-space centring
``K_c = H K H`` (H = I - 11'/M), eigenpairs ``K_c u_i = sigma_i^2 u_i`` give the principal axes
``v_i = sum_j (u_ij / sigma_i) (Psi(y_j) - m)`` of the covariance operator, m = mean_j Psi(y_j). The embedding is

    phi_i(x) = <Psi(x) - m, v_i> = (1 / sigma_i) <K_c(x, :), u_i> = a_i' k(x) - c_i,         (eq. 11, centred)

with ``k(x) = [K(x, y_1) .. K(x, y_M)]``, ``a_i = u_i / sigma_i`` (``a_i`` is orthogonal to 1) and
``c_i = a_i' K(Y) 1 / M``. Distances are those of the projection: ``||phi(x) - phi(y)||^2 =
||P_V (Psi(x) - Psi(y))||^2``.

For the Cauchy-Schwarz bound of the exact search (Appendix A, eq. 20-27), the projection must be onto a linear
subspace: :meth:`KernelPCAEmbedding.transform_full` returns the coordinates of Psi(x) on V' = span(V, m), an
orthonormal basis made of the v_i and the component of m orthogonal to them, so that
``K~(x, y) = <transform_full(x), transform_full(y)> = <P_V' Psi(x), P_V' Psi(y)>`` and
``R(x) = sqrt(K(x, x) - ||transform_full(x)||^2)`` (eq. 21) bounds ``|K - K~| <= R(x) R(y)`` (eq. 22).
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.codes.kernels import KERNELS, check_histograms, kernel_diag, kernel_matrix
from retrieval.core.checks import check_array, check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.persistence import PersistableMixin


class KernelPCAEmbedding(PersistableMixin):
    """KPCA explicit embedding Psi~ : R^d -> R^E for a Mercer kernel (Bourrier et al. 2015, eq. 11, centred).

    Parameters
    ----------
    kernel : {"chi2", "intersection", "hellinger", "rbf"}
    n_landmarks : int
        M, number of training vectors drawn at random from the ``fit`` data (001: M = 1,024).
    n_components : int
        E, embedding dimension (components with a numerically zero eigenvalue are dropped:
        ``n_components_`` may be smaller).
    gamma : float
        RBF bandwidth.
    random_state : None, int or Generator

    Attributes
    ----------
    landmarks_ : ndarray of shape (M, d), float32
    coef_ : ndarray of shape (M, E), float64 — a_i = u_i / sigma_i as columns.
    offset_ : ndarray of shape (E,), float64 — c_i.
    eigenvalues_ : ndarray of shape (E,), float64 — sigma_i^2 of the centred Gram matrix.
    mean_coef_ : ndarray of shape (M,), float64 — coefficients of the unit vector e_0 along the part of m
        orthogonal to V (zeros when m lies in V).
    """

    def __init__(self, kernel: str = "chi2", n_landmarks: int = 1024, n_components: int = 64, *,
                 gamma: float = 1.0, random_state=None):
        self.kernel = kernel
        self.n_landmarks = n_landmarks
        self.n_components = n_components
        self.gamma = gamma
        self.random_state = random_state

    def fit(self, X, y=None):
        """Draw ``n_landmarks`` rows of ``X`` (n, d) and compute the centred KPCA (eq. 11)."""
        name = type(self).__name__
        check_choice(self.kernel, "kernel", name, KERNELS)
        check_scalar(self.n_landmarks, "n_landmarks", name, low=2)
        check_scalar(self.n_components, "n_components", name, low=1)
        check_scalar(self.gamma, "gamma", name, kind=numbers.Real, low=0, closed="neither")
        X = check_histograms(X, "X", nonneg=self.kernel != "rbf")
        if X.shape[0] < self.n_landmarks:
            raise ValueError(f"{name} needs at least n_landmarks={self.n_landmarks} rows; got {X.shape[0]}.")
        if self.n_components >= self.n_landmarks:
            raise ValueError(f"The 'n_components' parameter of {name} must be < n_landmarks="
                             f"{self.n_landmarks}; got {self.n_components}.")
        rng = check_random_state(self.random_state)
        idx = np.sort(rng.choice(X.shape[0], self.n_landmarks, replace=False))
        self.fit_landmarks(X[idx])
        return self

    def fit_landmarks(self, Y):
        """Compute the KPCA from given landmarks ``Y`` (M, d) (e.g. for the Kim and Choi 2017, Fig. 6 protocol)."""
        Y = check_histograms(Y, "Y", nonneg=self.kernel != "rbf")
        M = Y.shape[0]
        K = kernel_matrix(Y, Y, self.kernel, gamma=self.gamma).astype(np.float64)
        K = (K + K.T) / 2
        H = np.eye(M) - 1.0 / M
        Kc = H @ K @ H
        evals, evecs = np.linalg.eigh((Kc + Kc.T) / 2)
        order = np.argsort(evals)[::-1]
        evals, evecs = evals[order], evecs[:, order]
        keep = evals > max(evals[0], 0) * 1e-10
        E = int(min(self.n_components, keep.sum()))
        if E == 0:
            raise ValueError("KernelPCAEmbedding: the centred Gram matrix of the landmarks is zero "
                             "(are all landmarks identical?).")
        A = evecs[:, :E] / np.sqrt(evals[:E])
        kmean = K.mean(axis=1)            # K(Y) 1 / M
        c = A.T @ kmean                   # <m, v_i>
        m_perp2 = K.mean() - float(c @ c)  # ||m||^2 - sum <m, v_i>^2
        if m_perp2 > 1e-12 * max(K.mean(), 1e-30):
            mean_coef = (np.full(M, 1.0 / M) - A @ c) / np.sqrt(m_perp2)
        else:
            mean_coef = np.zeros(M)
        self.landmarks_ = Y.astype(np.float32)
        self.coef_ = A
        self.offset_ = c
        self.eigenvalues_ = evals[:E].copy()
        self.mean_coef_ = mean_coef
        self.n_components_ = E
        self.d_ = int(Y.shape[1])
        return self

    def landmark_kernel(self, X) -> np.ndarray:
        """k(x) = [K(x, y_1) .. K(x, y_M)] for each row. ndarray (n, M) float32."""
        check_is_fitted(self, "coef_")
        X = check_array(X, "X", n_features=self.d_)
        return kernel_matrix(X, self.landmarks_, self.kernel, gamma=self.gamma)

    def transform(self, X, *, kx=None) -> np.ndarray:
        """Centred KPCA embedding phi(x) (eq. 11). ``kx`` may pass precomputed :meth:`landmark_kernel` values.

        Returns
        -------
        ndarray of shape (n, n_components_), dtype float32
        """
        kx = self.landmark_kernel(X) if kx is None else np.asarray(kx)
        return (kx.astype(np.float64) @ self.coef_ - self.offset_).astype(np.float32)

    def transform_full(self, X, *, kx=None) -> np.ndarray:
        """Coordinates of Psi(x) on the orthonormal basis (v_1..v_E, e_0) of V' = span(V, m).

        ``<transform_full(x), transform_full(y)> = K~(x, y)`` (eq. 12 on V'), used by the exact search.

        Returns
        -------
        ndarray of shape (n, n_components_ + 1), dtype float64
        """
        kx = (self.landmark_kernel(X) if kx is None else np.asarray(kx)).astype(np.float64)
        return np.hstack([kx @ self.coef_, (kx @ self.mean_coef_)[:, None]])

    def residual_norm(self, X, *, kx=None, full=None) -> np.ndarray:
        """R(x) = sqrt(K(x, x) - ||P_V' Psi(x)||^2) (Appendix A eq. 21), clipped at 0.

        Returns
        -------
        ndarray of shape (n,), dtype float64
        """
        if full is None:
            full = self.transform_full(X, kx=kx)
        kxx = kernel_diag(X, self.kernel, gamma=self.gamma).astype(np.float64)
        return np.sqrt(np.maximum(kxx - (full * full).sum(axis=1), 0.0))
