"""Explicit feature maps for additive homogeneous kernels (Vedaldi-Zisserman) and BE-AHK (Kim and Choi 2017).

A homogeneous kernel k(x, y) = sqrt(x y) kappa(log y - log x) has a closed-form spectrum kappa^(omega)
(Fourier transform of its signature kappa). Sampling it with step L = 2 pi / period gives the finite map
(Vedaldi-Zisserman, uniform window; Kim and Choi 2017, eq. 4 and "2m + 1 dimensional feature maps"):

    Psi_0(x)      = sqrt(x L kappa^(0))
    Psi_{2j-1}(x) = sqrt(2 x L kappa^(j L)) cos(j L log x)
    Psi_{2j}(x)   = sqrt(2 x L kappa^(j L)) sin(j L log x),        j = 1 .. n

so that sum over dimensions of <Psi(x_i), Psi(y_i)> ~ K(x, y). Spectra (kernel definitions as in
:mod:`retrieval.codes.kernels`): chi2 2xy/(x+y): kappa^(w) = sech(pi w); intersection min(x, y):
kappa^(w) = (2/pi) / (1 + 4 w^2); Hellinger sqrt(xy): kappa^ = delta, whose map is exactly sqrt(x).

BE-AHK (Kim and Choi 2017, eq. 5): h(x) = sigma(w' Psi(x)), w ~ N(0, I) — random hyperplanes on the map, no training.
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.codes.binary_embeddings import BinaryEmbedding
from retrieval.codes.kernels import check_histograms
from retrieval.core.checks import check_choice, check_scalar

HOMOGENEOUS_KERNELS = ("chi2", "intersection", "hellinger")


def kernel_spectrum(kernel: str, omega) -> np.ndarray:
    """Closed-form spectrum kappa^(omega) of a homogeneous kernel's signature. ndarray like ``omega``, float64."""
    omega = np.asarray(omega, dtype=np.float64)
    if kernel == "chi2":
        return 1.0 / np.cosh(np.pi * omega)
    if kernel == "intersection":
        return (2.0 / np.pi) / (1.0 + 4.0 * omega * omega)
    raise ValueError(f"kernel_spectrum: kernel must be 'chi2' or 'intersection'; got {kernel!r}.")


def default_period(kernel: str, n: int) -> float:
    """VLFeat's default signature period for ``n`` samples (vl_homogeneouskernelmap_new heuristics)."""
    if kernel == "chi2":
        return 5.86 * np.sqrt(n) + 3.65
    if kernel == "intersection":
        return 2.38 * np.log(n + 0.8) + 5.6
    return 1.0


class HomogeneousKernelMap:
    """Vedaldi-Zisserman explicit map of an additive homogeneous kernel (Kim and Choi 2017, eq. 4, Table 1).

    Parameters
    ----------
    kernel : {"chi2", "intersection", "hellinger"}
    n_samples_per_dim : int
        n: each input dimension becomes 2n + 1 features (Hellinger: 1 feature, sqrt(x), exact).
    period : float or None
        Signature period Lambda (sampling step L = 2 pi / Lambda); None uses VLFeat's default for n.

    Data independent: ``fit`` only checks the input; ``transform`` works unfitted.
    """

    def __init__(self, kernel: str = "chi2", n_samples_per_dim: int = 3, period: float | None = None):
        self.kernel = kernel
        self.n_samples_per_dim = n_samples_per_dim
        self.period = period

    def _check(self):
        check_choice(self.kernel, "kernel", "HomogeneousKernelMap", HOMOGENEOUS_KERNELS)
        check_scalar(self.n_samples_per_dim, "n_samples_per_dim", "HomogeneousKernelMap", low=0)
        if self.period is not None:
            check_scalar(self.period, "period", "HomogeneousKernelMap", kind=numbers.Real, low=0, closed="neither")

    @property
    def dims_per_input(self) -> int:
        """Output features per input dimension: 2n + 1 (1 for Hellinger)."""
        return 1 if self.kernel == "hellinger" else 2 * self.n_samples_per_dim + 1

    def fit(self, X=None, y=None):
        """Check the parameters (the map is data independent); returns self."""
        self._check()
        return self

    def transform(self, X) -> np.ndarray:
        """Map ``X`` (n, d) non-negative to (n, d * (2n + 1)) float32, features of dimension i contiguous.

        Layout: for input dimension i, columns i*(2n+1) + [0, 1..2n] hold Psi_0, then (cos, sin) pairs for
        j = 1..n.
        """
        self._check()
        X = check_histograms(X, "X").astype(np.float64)
        if self.kernel == "hellinger":
            return np.sqrt(X).astype(np.float32)
        n = self.n_samples_per_dim
        period = default_period(self.kernel, n) if self.period is None else float(self.period)
        L = 2 * np.pi / period
        pos = X > 0
        logx = np.log(np.where(pos, X, 1.0))
        out = np.zeros(X.shape + (2 * n + 1,), dtype=np.float64)
        out[..., 0] = np.sqrt(X * L * kernel_spectrum(self.kernel, 0.0))
        for j in range(1, n + 1):
            amp = np.sqrt(2 * X * L * kernel_spectrum(self.kernel, j * L))
            out[..., 2 * j - 1] = amp * np.cos(j * L * logx)
            out[..., 2 * j] = amp * np.sin(j * L * logx)
        out[~pos] = 0.0
        return out.reshape(X.shape[0], -1).astype(np.float32)


class BEAHK(BinaryEmbedding):
    """Binary embedding with additive homogeneous kernels (Kim and Choi 2017, eq. 5): h(x) = sigma(w' Psi_m(x)).

    Random hyperplanes w ~ N(0, I) on the Vedaldi-Zisserman map; no training data is needed for the codes
    (``fit`` uses X only for its dimension and for the d_E statistics alpha).

    Learnt: ``projections_`` (d (2n+1), nbits) float32.
    """

    def __init__(self, nbits: int = 64, *, kernel: str = "chi2", n_samples_per_dim: int = 3,
                 period: float | None = None, random_state=None):
        super().__init__(nbits, random_state=random_state)
        self.kernel = kernel
        self.n_samples_per_dim = n_samples_per_dim
        self.period = period

    def _map(self):
        return HomogeneousKernelMap(self.kernel, self.n_samples_per_dim, self.period)

    def _fit_g(self, X, rng):
        m = self._map().fit()
        check_histograms(X[:1], "X")
        self.projections_ = rng.standard_normal((X.shape[1] * m.dims_per_input, self.nbits)).astype(np.float32)

    def _g(self, X):
        return self._map().transform(X) @ self.projections_
