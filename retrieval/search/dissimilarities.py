"""Dense reference formulas of Zhu et al. 2013 (Zhu, Jegou, Satoh, ICCV 2013): l_p (eq. 1), delta_p (eq. 4-11).

These work on full (dense) histograms and touch every component: they are the oracle against which the inverted
file (:mod:`retrieval.search.invfile`) is tested, and what the object searcher uses to re-rank its shortlist
exactly. All computations are in float64.

Notation: ``Q`` is a query histogram of shape (k,), ``T`` a matrix of database histograms of shape (N, k); both are
non-negative and already weighted by idf when idf is used (Zhu et al. 2013, section 2.2).
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.core.checks import check_choice, check_scalar

__all__ = [
    "idf_weights",
    "lp_distance",
    "delta_p",
    "delta1",
    "delta1_wbar",
    "delta2",
    "delta2_w",
    "dissimilarity",
]


def _prep(Q, T):
    Q = np.asarray(Q, dtype=np.float64)
    T = np.asarray(T, dtype=np.float64)
    if T.ndim == 1:
        T = T[None, :]
    if Q.ndim != 1 or T.ndim != 2 or T.shape[1] != Q.shape[0]:
        raise ValueError(f"Q must have shape (k,) and T shape (N, k) with the same k; got {Q.shape} and {T.shape}.")
    if (Q < 0).any() or (T < 0).any():
        raise ValueError("histograms Q and T must be non-negative.")
    return Q, T


def idf_weights(df, n_images: int) -> np.ndarray:
    """Inverse document frequency ``idf_l = log(N / n_l)`` (Zhu et al. 2013, section 2.2; Sivic & Zisserman 2003).

    Parameters
    ----------
    df : ndarray of shape (k,), integer
        Number of database images in which word ``l`` occurs.
    n_images : int
        Number of database images N.

    Returns
    -------
    idf : ndarray of shape (k,), dtype float64
        ``log(N / df)``; 0 for words that occur in no image (they cannot match anything).
    """
    df = np.asarray(df, dtype=np.float64)
    out = np.zeros(df.shape, dtype=np.float64)
    nz = df > 0
    if n_images > 0:
        out[nz] = np.log(n_images / df[nz])
    return out


def lp_distance(Q, T, p: int = 1) -> np.ndarray:
    """Symmetric baseline, Zhu et al. 2013, eq. 1: ``|| Q/||Q||_p - T_j/||T_j||_p ||_p``.

    Parameters
    ----------
    Q : ndarray of shape (k,)
    T : ndarray of shape (N, k) (or (k,))
    p : {1, 2}

    Returns
    -------
    d : ndarray of shape (N,), dtype float64
        An all-zero histogram is left as zero (its normalised version is the zero vector).
    """
    check_choice(p, "p", "lp_distance", (1, 2))
    Q, T = _prep(Q, T)
    qn = np.linalg.norm(Q, ord=p)
    tn = np.linalg.norm(T, ord=p, axis=1)
    qh = Q / qn if qn > 0 else Q
    th = T / np.where(tn > 0, tn, 1.0)[:, None]
    return np.linalg.norm(th - qh[None, :], ord=p, axis=1)


def delta_p(Q, T, w: float, p: int = 1) -> np.ndarray:
    """Asymmetric dissimilarity, Zhu et al. 2013, eq. 4-5: ``|| w max(Q - T_j, 0) + max(T_j - Q, 0) ||_p``.

    ``w = inf`` is the limit case of Table 4 divided by ``w``: ``|| max(Q - T_j, 0) ||_p`` (the query outliers
    Qout only), as in Fig. 2 where ``delta_1(Q, T_1, inf) = 1``.

    Parameters
    ----------
    Q : ndarray of shape (k,)
    T : ndarray of shape (N, k)
    w : float >= 0 or inf
    p : {1, 2}

    Returns
    -------
    d : ndarray of shape (N,), dtype float64
    """
    check_choice(p, "p", "delta_p", (1, 2))
    check_scalar(w, "w", "delta_p", kind=numbers.Real, low=0)
    Q, T = _prep(Q, T)
    qout = np.maximum(Q[None, :] - T, 0.0)
    if np.isinf(w):
        return np.linalg.norm(qout, ord=p, axis=1)
    dout = np.maximum(T - Q[None, :], 0.0)
    return np.linalg.norm(w * qout + dout, ord=p, axis=1)


def delta1(Q, T, wbar: float) -> np.ndarray:
    """Zhu et al. 2013, eq. 8: ``delta_1(Q, T_j, wbar) = ||T_j||_1 - wbar ||min(Q, T_j)||_1``.

    Equal to eq. 4 (p = 1) with ``w = wbar - 1`` minus the constant ``w ||Q||_1``.

    Parameters
    ----------
    Q : ndarray of shape (k,)
    T : ndarray of shape (N, k)
    wbar : float

    Returns
    -------
    d : ndarray of shape (N,), dtype float64
    """
    Q, T = _prep(Q, T)
    return T.sum(axis=1) - wbar * np.minimum(Q[None, :], T).sum(axis=1)


def delta1_wbar(Q, T, alpha: float = 0.5) -> float:
    """Zhu et al. 2013, eq. 9: ``wbar = alpha_1 sum_j ||T_j||_1 / sum_j ||min(Q, T_j)||_1`` over the N database images.

    Returns 0.0 when the query shares no word with the database (every image then scores ``||T_j||_1``).
    """
    check_scalar(alpha, "alpha", "delta1_wbar", kind=numbers.Real, low=0)
    Q, T = _prep(Q, T)
    den = np.minimum(Q[None, :], T).sum()
    return float(alpha * T.sum() / den) if den > 0 else 0.0


def _delta2_terms(Q, T):
    m = np.minimum(Q[None, :], T)
    mm = (m * m).sum(axis=1)
    qterm = np.sqrt(np.maximum((Q * Q).sum() - 2.0 * (m @ Q) + mm, 0.0))
    tterm = np.sqrt(np.maximum((T * T).sum(axis=1) - 2.0 * (T * m).sum(axis=1) + mm, 0.0))
    return qterm, tterm


def delta2(Q, T, w: float) -> np.ndarray:
    """Zhu et al. 2013, eq. 10: ``w ||Q - min(Q, T_j)||_2 + ||T_j - min(Q, T_j)||_2`` expanded into dot products.

    Parameters
    ----------
    Q : ndarray of shape (k,)
    T : ndarray of shape (N, k)
    w : float

    Returns
    -------
    d : ndarray of shape (N,), dtype float64
    """
    Q, T = _prep(Q, T)
    qterm, tterm = _delta2_terms(Q, T)
    return w * qterm + tterm


def delta2_w(Q, T, alpha: float = 0.5) -> float:
    """Zhu et al. 2013, eq. 11: ``w = alpha_2 sum_j ||T_j - min(Q,T_j)||_2 / sum_j ||Q - min(Q,T_j)||_2``.

    Returns 0.0 when the denominator is zero (the query is contained in every image).
    """
    check_scalar(alpha, "alpha", "delta2_w", kind=numbers.Real, low=0)
    Q, T = _prep(Q, T)
    qterm, tterm = _delta2_terms(Q, T)
    den = qterm.sum()
    return float(alpha * tterm.sum() / den) if den > 0 else 0.0


def dissimilarity(Q, T, method: str = "delta1", alpha: float = 0.5) -> np.ndarray:
    """Dispatch to the dense formula named by ``method`` ("l1", "l2", "delta1", "delta2"), smaller is better.

    For delta1/delta2 the weight is set per query from ``alpha`` by eq. 9 / eq. 11 over the rows of ``T``.

    Returns
    -------
    d : ndarray of shape (N,), dtype float64
    """
    check_choice(method, "method", "dissimilarity", ("l1", "l2", "delta1", "delta2"))
    if method == "l1":
        return lp_distance(Q, T, 1)
    if method == "l2":
        return lp_distance(Q, T, 2)
    if method == "delta1":
        return delta1(Q, T, delta1_wbar(Q, T, alpha))
    return delta2(Q, T, delta2_w(Q, T, alpha))
