"""Fast spatial verification from single affine-frame correspondences (Philbin, Chum, Isard, Sivic & Zisserman,
"Object retrieval with large vocabularies and fast spatial matching", CVPR 2007, section 4).

Every tentative match between two affine regions defines by itself a full affine hypothesis
``T = F_db F_q^{-1}`` (``F = [[A, x], [0, 1]]`` maps the unit circle onto the region): no sampling is needed, every
match is tried (or ``max_hypotheses`` of them), and each hypothesis is scored by the number of matches whose
query centre it maps within ``threshold`` pixels of the database centre. With upright frames (lower-triangular
``A``, the default of the Hessian-affine detector) ``T`` preserves the vertical direction, Philbin's gravity
assumption. The best hypothesis is then refined by a few local-optimisation steps (Chum, Matas & Kittler 2003):
least-squares affine fit on its inliers, re-scored, kept while the inlier count does not drop.
"""

from __future__ import annotations

import numbers

import numpy as np

from retrieval.core.checks import check_scalar
from retrieval.features.frames import frame_matrices


def affine_from_frames(frames_q, frames_db) -> np.ndarray:
    """Single-correspondence hypotheses ``T_i = F_db,i F_q,i^{-1}``.

    Parameters
    ----------
    frames_q, frames_db : ndarray of shape (m, 6)
        Corresponding frames (the i-th rows match).

    Returns
    -------
    ndarray of shape (m, 2, 3), float64
        ``[M | t]`` with ``x_db = M x_q + t``; rows for degenerate frames (det A = 0) are NaN.
    """
    Fq = frame_matrices(frames_q)
    Fd = frame_matrices(frames_db)
    Aq, Ad = Fq[:, :2, :2], Fd[:, :2, :2]
    det = Aq[:, 0, 0] * Aq[:, 1, 1] - Aq[:, 0, 1] * Aq[:, 1, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.stack([np.stack([Aq[:, 1, 1], -Aq[:, 0, 1]], -1), np.stack([-Aq[:, 1, 0], Aq[:, 0, 0]], -1)], 1)
        inv = inv / det[:, None, None]
    M = Ad @ inv
    t = Fd[:, :2, 2] - np.einsum("mij,mj->mi", M, Fq[:, :2, 2])
    T = np.concatenate([M, t[:, :, None]], axis=2)
    T[~np.isfinite(T).all(axis=(1, 2))] = np.nan
    return T


def _fit_affine(q: np.ndarray, d: np.ndarray) -> np.ndarray | None:
    """Least-squares affine ``d ~ M q + t`` (>= 3 non-collinear points), (2, 3) float64 or None."""
    if len(q) < 3:
        return None
    X = np.c_[q, np.ones(len(q))]
    sol, _, rank, _ = np.linalg.lstsq(X, d, rcond=None)
    if rank < 3:
        return None
    return sol.T


def verify_affine(frames_q, frames_db, matches, *, threshold: float = 15.0, max_hypotheses: int = 500,
                  lo_iterations: int = 3, max_scale_change: float = 10.0, block: int = 256):
    """Spatial verification of tentative matches with single-correspondence affine hypotheses (Philbin 2007).

    Parameters
    ----------
    frames_q : ndarray of shape (n_q, 6)
        Query frames (see :class:`LocalFeatures`).
    frames_db : ndarray of shape (n_db, 6)
        Database-image frames.
    matches : ndarray of shape (m, 2), int
        ``(index into frames_q, index into frames_db)``.
    threshold : float, default 15
        Inlier threshold: ``||T x_q - x_db|| < threshold`` in pixels of the database image.
    max_hypotheses : int, default 500
        Hypotheses tried: every match when ``m <= max_hypotheses``, otherwise an evenly spaced subset of the
        matches (deterministic).
    lo_iterations : int, default 3
        Least-squares refinements on the inliers.
    max_scale_change : float, default 10
        Hypotheses whose linear part changes areas by more than ``max_scale_change**2`` (or less than its
        inverse) are discarded as degenerate.
    block : int
        Hypotheses scored at a time (memory ``block * m``).

    Returns
    -------
    inliers : ndarray of shape (m,), bool
    transform : ndarray of shape (3, 3), float64, or None
        Affine ``[[M, t], [0, 0, 1]]`` mapping query pixels to database pixels; None when ``m == 0`` or no
        valid hypothesis exists.
    """
    owner = "verify_affine"
    check_scalar(threshold, "threshold", owner, kind=numbers.Real, low=0.0, closed="neither")
    check_scalar(max_hypotheses, "max_hypotheses", owner, low=1)
    check_scalar(lo_iterations, "lo_iterations", owner, low=0)
    check_scalar(max_scale_change, "max_scale_change", owner, kind=numbers.Real, low=1.0)
    check_scalar(block, "block", owner, low=1)
    fq = np.asarray(frames_q, dtype=np.float64).reshape(-1, 6)
    fd = np.asarray(frames_db, dtype=np.float64).reshape(-1, 6)
    mt = np.asarray(matches).reshape(-1, 2)
    if mt.size and (mt.dtype.kind not in "iu" or mt.min() < 0 or mt[:, 0].max() >= len(fq)
                    or mt[:, 1].max() >= len(fd)):
        raise ValueError(f"matches must be integer pairs (i_q, i_db) with 0 <= i_q < {len(fq)} and "
                         f"0 <= i_db < {len(fd)}; got dtype {mt.dtype} and range "
                         f"[{mt.min(initial=0)}, {mt.max(initial=0)}].")
    m = len(mt)
    if m == 0:
        return np.zeros(0, bool), None
    q = fq[mt[:, 0]]
    d = fd[mt[:, 1]]
    pq, pd = q[:, :2], d[:, :2]
    hyp_idx = np.arange(m) if m <= max_hypotheses else np.unique(np.linspace(0, m - 1, max_hypotheses).astype(int))
    T = affine_from_frames(q[hyp_idx], d[hyp_idx])
    detM = T[:, 0, 0] * T[:, 1, 1] - T[:, 0, 1] * T[:, 1, 0]
    valid = np.isfinite(detM) & (np.abs(detM) <= max_scale_change ** 2) & (
        np.abs(detM) >= 1.0 / max_scale_change ** 2)
    T = T[valid]
    if len(T) == 0:
        return np.zeros(m, bool), None
    thr2 = float(threshold) ** 2
    best_count, best_cost, best_T = -1, np.inf, None
    qx, qy = pq[:, 0].astype(np.float32), pq[:, 1].astype(np.float32)
    dx, dy = pd[:, 0].astype(np.float32), pd[:, 1].astype(np.float32)
    T32 = T.astype(np.float32)
    for s in range(0, len(T), block):
        Tb = T32[s:s + block]
        ex = Tb[:, 0, 0, None] * qx + Tb[:, 0, 1, None] * qy + (Tb[:, 0, 2, None] - dx)
        ey = Tb[:, 1, 0, None] * qx + Tb[:, 1, 1, None] * qy + (Tb[:, 1, 2, None] - dy)
        e2 = ex * ex + ey * ey
        inl = e2 < thr2
        counts = inl.sum(axis=1)
        top = counts.max()
        cand = np.flatnonzero(counts == top)
        cost = np.minimum(e2[cand], thr2).sum(axis=1)  # truncated quadratic breaks ties
        k = cand[np.argmin(cost)]
        if top > best_count or (top == best_count and cost.min() < best_cost):
            best_count, best_cost, best_T = int(top), float(cost.min()), T[s + k]

    def score(T2):
        e2 = np.sum((pq @ T2[:, :2].T + T2[:, 2] - pd) ** 2, axis=1)
        return e2 < thr2

    inliers = score(best_T)
    for _ in range(lo_iterations):
        T2 = _fit_affine(pq[inliers], pd[inliers])
        if T2 is None:
            break
        new = score(T2)
        if new.sum() < inliers.sum():
            break
        same = np.array_equal(new, inliers)
        best_T, inliers = T2, new
        if same:
            break
    H = np.eye(3)
    H[:2] = best_T
    return inliers, H
