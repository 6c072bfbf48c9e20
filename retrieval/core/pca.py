"""The one PCA of the library: mean and principal axes of a data matrix, the whitening scale and a random rotation.

Every PCA of the package goes through :func:`fit_pca`: :class:`retrieval.features.LocalPCA` (local descriptors,
Jegou et al. 2012, sec. III-D), :class:`retrieval.aggregation.PCAProjection` (image vectors, sec. IV and V-B), the
PCA embeddings of :mod:`retrieval.codes.binary_embeddings` (Gordo et al. 2014, sec. 2.2) and the candidate-ranking
subspace of :class:`retrieval.aggregation.large_vocabulary.ApproximateKMeans`.

Conventions, the same for all of them:

- the covariance is the unbiased one (``n - 1`` denominator); eigenvalues below 0 (round-off) are set to 0;
- axes come by decreasing variance, each with its largest-magnitude coefficient positive (deterministic signs);
- the solver: eigen-decomposition of the D x D covariance (accumulated in float64 over row chunks) when
  ``n >= D``, thin SVD of the centred data when ``n < D`` (when that yields fewer than the requested axes, the
  rest is an orthonormal completion with variance 0), or Halko et al.'s randomised SVD (scikit-learn) on request;
- whitening (:func:`whitening_scale`) divides component ``i`` by ``sqrt(lambda_i + eps * lambda_1)``: a
  regulariser *added* to every eigenvalue (as in the whitening of Jegou and Chum, ECCV 2012, where it keeps the
  near-zero-variance components from being blown up), *relative* to the largest eigenvalue so that the result does
  not depend on the scale of the data;
- random rotations (:func:`random_rotation`) are Haar-distributed orthogonal matrices: the orthogonal polar factor
  U V^T of a standard Gaussian matrix G = U S V^T (the rule of the ITQ / PCAE-RR code). The random
  orthogonal matrix of Jegou et al. 2012, sec. V-B (balancing variance across PQ sub-vectors) and of Gordo et al.
  2014, sec. 2.2.2-2.2.3 (PCAE-RR, initial rotation of ITQ) is this one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.core.checks import check_choice, check_random_state, check_scalar

__all__ = ["PCABasis", "fit_pca", "random_rotation", "whitening_scale"]

_CHUNK = 8192


@dataclass
class PCABasis:
    """Result of :func:`fit_pca` (all float64).

    Attributes
    ----------
    mean : ndarray of shape (D,)
    components : ndarray of shape (k, D) -- orthonormal rows by decreasing variance, signs fixed.
    variances : ndarray of shape (k,) -- eigenvalues ``lambda_i`` (>= 0).
    total_variance : float -- sum of all D eigenvalues (the trace of the covariance).
    solver : str -- the solver used ("eigh", "svd" or "randomized").
    """

    mean: np.ndarray
    components: np.ndarray
    variances: np.ndarray
    total_variance: float
    solver: str


def _fix_signs(Vt: np.ndarray) -> np.ndarray:
    """Rows of Vt with their largest-magnitude entry made positive."""
    if Vt.size == 0:
        return Vt
    signs = np.sign(Vt[np.arange(Vt.shape[0]), np.argmax(np.abs(Vt), axis=1)])
    signs[signs == 0] = 1.0
    return Vt * signs[:, None]


def fit_pca(X, n_components: int, *, solver: str = "auto", random_state=None) -> PCABasis:
    """Mean and top ``n_components`` principal axes of the rows of ``X``.

    Parameters
    ----------
    X : ndarray of shape (n, D), real (float32 or float64; products and sums are computed in float64)
    n_components : int in [1, D]
    solver : {"auto", "full", "randomized"}
        "full": eigen-decomposition of the covariance when n >= D, else thin SVD of the centred data;
        "randomized": randomised SVD (for k << min(n, D)); "auto": "randomized" when min(n, D) > 4096 and
        k < 0.5 min(n, D), else "full".
    random_state : None, int or numpy.random.Generator
        Seeds the randomised SVD only (one draw from the generator).

    Returns
    -------
    PCABasis
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"fit_pca expects a non-empty 2-d array of shape (n, D); got shape {X.shape}.")
    n, D = X.shape
    k = n_components
    check_scalar(k, "n_components", "fit_pca", low=1, high=D)
    check_choice(solver, "solver", "fit_pca", ("auto", "full", "randomized"))
    mean = X.mean(axis=0, dtype=np.float64)
    denom = max(n - 1, 1)
    if solver == "auto":
        solver = "randomized" if min(n, D) > 4096 and k < 0.5 * min(n, D) else "full"
    if solver == "randomized":
        from sklearn.utils.extmath import randomized_svd

        Xc = np.asarray(X, dtype=np.float64) - mean
        seed = int(check_random_state(random_state).integers(2**31 - 1))
        _, s, Vt = randomized_svd(Xc, k, n_oversamples=max(10, k // 10), n_iter=7, random_state=seed)
        var, total, used = s**2 / denom, float(np.einsum("ij,ij->", Xc, Xc)) / denom, "randomized"
    elif n >= D:
        cov = np.zeros((D, D))
        for start in range(0, n, _CHUNK):
            chunk = np.asarray(X[start:start + _CHUNK], dtype=np.float64) - mean
            cov += chunk.T @ chunk
        cov /= denom
        w, V = np.linalg.eigh(cov)
        w = np.maximum(w, 0.0)
        order = np.argsort(w)[::-1]
        var, Vt, total, used = w[order[:k]], V[:, order[:k]].T, float(w.sum()), "eigh"
    else:
        Xc = np.asarray(X, dtype=np.float64) - mean
        _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
        allvar = s**2 / denom
        var, Vt, total, used = allvar[:k], Vt[:k], float(allvar.sum()), "svd"
        if Vt.shape[0] < k:              # fewer samples than axes: complete with an orthonormal basis of the rest
            q, _ = np.linalg.qr(Vt.T, mode="complete")
            Vt = np.vstack([Vt, q[:, Vt.shape[0]:k].T])
            var = np.concatenate([var, np.zeros(k - var.size)])
    return PCABasis(mean=mean, components=_fix_signs(np.ascontiguousarray(Vt)), variances=np.asarray(var),
                    total_variance=total, solver=used)


def whitening_scale(variances, eps: float) -> np.ndarray:
    """Per-component whitening factors ``1 / sqrt(lambda_i + eps * lambda_1)`` (the module's one rule).

    Parameters
    ----------
    variances : ndarray of shape (k,), the eigenvalues ``lambda_i`` (``lambda_1`` = the largest)
    eps : float >= 0, relative regulariser

    Returns
    -------
    ndarray of shape (k,), float64 (0 for a component of zero variance when eps * lambda_1 is 0)
    """
    var = np.asarray(variances, dtype=np.float64)
    reg = var + float(eps) * (float(var.max()) if var.size else 0.0)
    with np.errstate(divide="ignore"):
        return np.where(reg > 0, 1.0 / np.sqrt(np.where(reg > 0, reg, 1.0)), 0.0)


def random_rotation(n: int, random_state=None) -> np.ndarray:
    """A random orthogonal matrix, uniformly (Haar) distributed: the orthogonal polar factor ``U V^T`` of an n x n
    standard Gaussian matrix ``G = U S V^T`` (its distribution is invariant under left and right orthogonal
    multiplication, so is the factor's). The rule of the ITQ / PCAE-RR code of Gordo et al. 2014, sec. 2.2.2, used
    for every random rotation of the library (Jegou et al. 2012, sec. III-D too).

    Parameters
    ----------
    n : int >= 1
    random_state : None, int or numpy.random.Generator (one n x n Gaussian draw)

    Returns
    -------
    R : ndarray of shape (n, n), dtype float64, with R @ R.T == I.
    """
    check_scalar(n, "n", "random_rotation", low=1)
    rng = check_random_state(random_state)
    u, _, vt = np.linalg.svd(rng.standard_normal((n, n)))
    return u @ vt
