"""The one geometric verification of the library: :func:`verify`, used by ``retrieval match``, spatial re-ranking
(``retrieval query``, the global backends), the object search and the Python API.

Designed for affine frames (Hessian-affine): every tentative match between two affine regions defines by itself a
full affine hypothesis ``T = F_db F_q^{-1}`` (``F = [[A, x], [0, 1]]`` maps the unit circle onto the region), as in
the fast spatial verification of Philbin, Chum, Isard, Sivic & Zisserman, "Object retrieval with large vocabularies
and fast spatial matching", CVPR 2007, section 4. No sampling is needed: every match (or ``max_hypotheses`` of
them) is tried and scored by the number of matches it maps within ``threshold`` pixels. With upright frames
(lower-triangular ``A``, the default of the Hessian-affine detector) ``T`` preserves the vertical direction,
Philbin's gravity assumption.

Then:

1. degenerate hypotheses are discarded before scoring (see :func:`model_problem`: mirrored or collapsed, extreme
   scale, extreme shear);
2. local optimisation (Chum, Matas & Kittler, "Locally optimized RANSAC", DAGM 2003): least-squares affine fit on
   the inliers of the best hypothesis, re-scored, kept while the inlier count does not drop;
3. optional homography refit (``refit="homography"``): least-squares homography on the affine inliers (normalised
   DLT, OpenCV ``findHomography`` with method 0), re-scored and iterated the same way, kept when it is sane and
   has at least as many inliers as the affine model;
4. inliers counted one-to-one: among the inlier matches, each query feature and each database feature is used
   once (smallest residual first), so ``inliers <= tentative`` always;
5. the decision: ``verified`` when the model is sane, the inliers are spread over the query region (the area of
   their convex hull is at least ``min_spread`` of the bounding box of all query features) and there are at
   least ``min_inliers`` of them. ``DEFAULT_MIN_INLIERS`` was chosen on real unrelated pairs (UKBench and
   Holidays, ``retrieval bench verify``) so that their false-verification rate is below 0.1 %; the trade-off is
   in docs/results.md, "Geometric verification".
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from retrieval.core.checks import check_choice, check_scalar
from retrieval.features.frames import frame_matrices

DEFAULT_MIN_INLIERS = 9
"""One-to-one inliers needed for ``verified`` (chosen on real unrelated pairs, docs/results.md)."""

VERIFY_DEFAULTS = {"min_inliers": DEFAULT_MIN_INLIERS, "threshold": None, "relative_threshold": 0.03,
                   "refit": "homography", "max_hypotheses": 300, "lo_iterations": 4, "max_scale": 10.0,
                   "min_singular_ratio": 0.1, "min_spread": 0.01}
"""Defaults of :func:`verify`."""

_NEXT, _PREV = np.array([1, 2, 3, 0]), np.array([3, 0, 1, 2])
"""The next and the previous corner of a four-corner outline."""


@dataclass
class Verification:
    """The outcome of :func:`verify`.

    Attributes
    ----------
    verified : bool
        The evidence passed every check (sane model, spread inliers, at least ``min_inliers`` one-to-one inliers).
    inliers : int
        One-to-one inliers of the best sane model (0 when there is none); always ``<= tentative``.
    tentative : int
        Tentative matches given.
    inlier_mask : ndarray of shape (tentative,), bool
        The one-to-one inlier matches (``inlier_mask.sum() == inliers``).
    transform : ndarray of shape (3, 3), float64, or None
        Query pixels -> database pixels (affine ``[[M, t], [0, 0, 1]]`` or homography), only when ``verified``.
    kind : {"affine", "homography"} or None
        The kind of ``transform``.
    spread : float
        Area of the convex hull of the inlier query points over the area of the bounding box of all query features.
    sane : bool
        A non-degenerate model was found (the inlier count and the spread are meaningful).
    reason : str or None
        Why the pair is not verified (None when verified).
    """

    verified: bool
    inliers: int
    tentative: int
    inlier_mask: np.ndarray
    transform: np.ndarray | None = None
    kind: str | None = None
    spread: float = 0.0
    sane: bool = False
    reason: str | None = None
    params: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"verified": bool(self.verified), "inliers": int(self.inliers), "tentative": int(self.tentative),
                "spread": round(float(self.spread), 4), "kind": self.kind,
                "transform": None if self.transform is None else [[float(v) for v in r] for r in self.transform],
                "reason": self.reason}


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


def _linear_ok(M: np.ndarray, max_scale: float, min_singular_ratio: float) -> np.ndarray:
    """Vectorised sanity of linear parts ``M`` (k, 2, 2): det > 0, sqrt(det) in [1/max_scale, max_scale],
    smaller / larger singular value >= min_singular_ratio."""
    a, b, c, d = M[:, 0, 0], M[:, 0, 1], M[:, 1, 0], M[:, 1, 1]
    det = a * d - b * c
    fro2 = a * a + b * b + c * c + d * d
    with np.errstate(invalid="ignore", divide="ignore"):
        disc = np.sqrt(np.maximum(fro2 * fro2 - 4.0 * det * det, 0.0))
        s1 = np.sqrt((fro2 + disc) / 2.0)
        s2 = np.sqrt(np.maximum((fro2 - disc) / 2.0, 0.0))
        ok = (np.isfinite(det) & (det > 0) & (det <= max_scale ** 2) & (det >= max_scale ** -2)
              & (s2 >= min_singular_ratio * s1))
    return ok


def model_problem(transform, region, *, max_scale: float = 10.0, min_singular_ratio: float = 0.1) -> str | None:
    """Why a query -> database transform is degenerate, or None when it is sane.

    The four corners of ``region`` (the query box) are mapped by ``transform``: the model is rejected when a
    corner goes to infinity or behind the camera, when the outline is mirrored, collapsed or not convex (the
    signed areas of its corner triangles must all be positive), when it changes areas by more than
    ``max_scale**2`` (or less than its inverse), or when the local linear map at the region's centre has a
    singular-value ratio below ``min_singular_ratio`` (extreme shear or anisotropic scale).

    Parameters
    ----------
    transform : ndarray of shape (2, 3) or (3, 3)
    region : (x1, y1, x2, y2) in query pixels
    """
    T = np.asarray(transform, dtype=np.float64)
    if T.shape == (2, 3):
        T = np.vstack([T, [0.0, 0.0, 1.0]])
    if T.shape != (3, 3) or not np.all(np.isfinite(T)):
        return "transform is not a finite 2x3 or 3x3 matrix"
    x1, y1, x2, y2 = (float(v) for v in region)
    if not (x2 > x1 and y2 > y1):
        return "empty query region"
    P = np.array([[x1, y1, 1.0], [x2, y1, 1.0], [x2, y2, 1.0], [x1, y2, 1.0]]) @ T.T
    if np.any(P[:, 2] <= 1e-9 * np.abs(P[:, :2]).max(initial=1.0)):
        return "outline maps to infinity"
    Q = P[:, :2] / P[:, 2:3]
    e1 = Q[_NEXT] - Q   # the outline's edges: from each corner to the next, and from the previous to it
    e0 = Q - Q[_PREV]
    cross = e0[:, 0] * e1[:, 1] - e0[:, 1] * e1[:, 0]
    area0 = (x2 - x1) * (y2 - y1)
    if np.any(cross <= 1e-6 * area0):
        return "outline mirrored, collapsed or not convex"
    area = 0.5 * abs(float(np.sum(Q[:, 0] * Q[_NEXT, 1] - Q[:, 1] * Q[_NEXT, 0])))
    if not max_scale ** -2 <= area / area0 <= max_scale ** 2:
        return f"extreme scale change (area x{area / area0:.3g})"
    cx, cy = (x1 + x2) / 2.0, (y1 + y2) / 2.0
    w = T[2, 0] * cx + T[2, 1] * cy + T[2, 2]
    u = (T[0, 0] * cx + T[0, 1] * cy + T[0, 2]) / w
    v = (T[1, 0] * cx + T[1, 1] * cy + T[1, 2]) / w
    J = np.array([[T[0, 0] - u * T[2, 0], T[0, 1] - u * T[2, 1]], [T[1, 0] - v * T[2, 0], T[1, 1] - v * T[2, 1]]]) / w
    s = np.linalg.svd(J, compute_uv=False)
    if not s[1] >= min_singular_ratio * s[0]:
        return f"extreme shear (singular value ratio {s[1] / s[0]:.3g})"
    return None


def one_to_one(matches: np.ndarray, mask: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """The inlier ``mask`` reduced so that each query and each database feature is used once: for each query
    index the inlier with the smallest residual, then the same for each database index.

    Returns
    -------
    ndarray of shape (m,), bool, a subset of ``mask``.
    """
    out = np.zeros(len(mask), bool)
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return out
    for col in (0, 1):
        order = idx[np.lexsort((residual[idx], matches[idx, col]))]
        keys = matches[order, col]
        first = np.r_[True, keys[1:] != keys[:-1]]
        idx = order[first]
    out[idx] = True
    return out


def hull_area(points: np.ndarray) -> float:
    """Area of the convex hull of 2-d points (0 for fewer than 3)."""
    if len(points) < 3:
        return 0.0
    import cv2

    hull = cv2.convexHull(np.ascontiguousarray(points, dtype=np.float32))
    return float(cv2.contourArea(hull))


def _fit_affine(q: np.ndarray, d: np.ndarray) -> np.ndarray | None:
    """Least-squares affine ``d ~ M q + t`` (>= 3 non-collinear points), (3, 3) float64 or None."""
    if len(q) < 3:
        return None
    X = np.c_[q, np.ones(len(q))]
    sol, _, rank, _ = np.linalg.lstsq(X, d, rcond=None)
    if rank < 3:
        return None
    return np.vstack([sol.T, [0.0, 0.0, 1.0]])


def _fit_homography(q: np.ndarray, d: np.ndarray) -> np.ndarray | None:
    """Least-squares homography (normalised DLT, OpenCV method 0) on >= 8 points, or None."""
    if len(q) < 8:
        return None
    import cv2

    H, _ = cv2.findHomography(q.astype(np.float64), d.astype(np.float64), 0)
    if H is None or not np.all(np.isfinite(H)) or H[2, 2] == 0:
        return None
    return H / H[2, 2]


def _residual2(T: np.ndarray, pq: np.ndarray, pd: np.ndarray) -> np.ndarray:
    p = pq @ T[:2, :2].T + T[:2, 2]
    if T[2, 0] != 0.0 or T[2, 1] != 0.0:
        w = pq @ T[2, :2] + T[2, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            p = p / w[:, None]
        p[~(w > 0)] = np.inf
    r = np.sum((p - pd) ** 2, axis=1)
    r[~np.isfinite(r)] = np.inf
    return r


def _local_optimisation(T, fit, pq, pd, thr2, iterations, ok):
    """Refit on the inliers while their count does not drop; returns (T, inliers mask, residual2)."""
    r2 = _residual2(T, pq, pd)
    inl = r2 < thr2
    for _ in range(iterations):
        T2 = fit(pq[inl], pd[inl])
        if T2 is None or not ok(T2):
            break
        r2n = _residual2(T2, pq, pd)
        new = r2n < thr2
        if new.sum() < inl.sum():
            break
        same = np.array_equal(new, inl)
        T, inl, r2 = T2, new, r2n
        if same:
            break
    return T, inl, r2


COMPILED_FROM = 100_000
"""Hypotheses x matches from which the first step runs compiled (:mod:`retrieval.rerank._verify_kernels`, the same
counts and costs); smaller pairs (thumbnails) never load it."""


def score_hypotheses(T32, pq, pd, thr2: float, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """The first step of :func:`verify`: for each affine hypothesis ``T32`` (k, 2, 3) float32, the tentative
    matches (query points ``pq``, database points ``pd``) it maps within ``sqrt(thr2)`` pixels and its truncated
    quadratic cost ``sum min(e^2, thr2)``; residuals in float32, costs summed in float64 in match order, so
    that the compiled loop (large pairs) and the vectorised form (``block`` hypotheses at a time) agree exactly."""
    qx, qy = pq[:, 0].astype(np.float32), pq[:, 1].astype(np.float32)
    dx, dy = pd[:, 0].astype(np.float32), pd[:, 1].astype(np.float32)
    t2 = np.float32(thr2)
    counts = np.empty(len(T32), np.int64)
    costs = np.empty(len(T32), np.float64)
    if len(T32) * len(qx) >= COMPILED_FROM:
        from retrieval.rerank._verify_kernels import score_hypotheses as compiled

        compiled(np.ascontiguousarray(T32), qx, qy, dx, dy, t2, counts, costs)
        return counts, costs
    for s in range(0, len(T32), block):
        Tb = T32[s:s + block]
        ex = Tb[:, 0, 0, None] * qx + Tb[:, 0, 1, None] * qy + (Tb[:, 0, 2, None] - dx)
        ey = Tb[:, 1, 0, None] * qx + Tb[:, 1, 1, None] * qy + (Tb[:, 1, 2, None] - dy)
        e2 = np.minimum(ex * ex + ey * ey, t2)
        counts[s:s + block] = (e2 < t2).sum(axis=1)
        costs[s:s + block] = np.cumsum(e2, axis=1, dtype=np.float64)[:, -1]   # in match order, as the loop
    return counts, costs


def verify(frames_q, frames_db, matches, *, min_inliers: int = DEFAULT_MIN_INLIERS, threshold: float | None = None,
           relative_threshold: float = 0.03, refit: str = "homography", max_hypotheses: int = 300,
           lo_iterations: int = 4, max_scale: float = 10.0, min_singular_ratio: float = 0.1,
           min_spread: float = 0.01, query_region=None, block: int = 256) -> Verification:
    """Geometric verification of tentative matches between a query and a database image (see the module doc).

    Parameters
    ----------
    frames_q : ndarray of shape (n_q, 6)
        All query frames (:class:`LocalFeatures` ``frames``, original pixels).
    frames_db : ndarray of shape (n_db, 6)
        All database-image frames.
    matches : ndarray of shape (m, 2), int
        Tentative matches ``(index into frames_q, index into frames_db)``.
    min_inliers : int, default ``DEFAULT_MIN_INLIERS``
        One-to-one inliers needed for ``verified`` (the decision threshold; docs/results.md gives its measured
        false- and true-verification rates).
    threshold : float or None
        Inlier threshold in database pixels; None = ``relative_threshold`` times the diagonal of the bounding
        box of all database features (about the image diagonal).
    relative_threshold : float, default 0.03
    refit : {"homography", "affine"}
        Final model: a homography refitted on the affine inliers when it is sane and keeps at least as many
        inliers, else the affine model; "affine" skips the refit.
    max_hypotheses : int
        Single-correspondence hypotheses tried (an evenly spaced subset when there are more matches).
    lo_iterations : int
        Least-squares refinements of the local optimisation (and of the homography refit).
    max_scale : float
        Models changing lengths by more than this factor (areas by its square) are degenerate.
    min_singular_ratio : float in (0, 1]
        Models whose local linear map has a smaller / larger singular value below this are degenerate.
    min_spread : float in [0, 1]
        Inliers whose convex hull covers less than this fraction of the query region do not verify.
    query_region : (x1, y1, x2, y2) or None
        The query region (box); None = the bounding box of all query features.
    block : int
        Hypotheses scored at a time (memory ``block * m``).

    Returns
    -------
    Verification
    """
    owner = "verify"
    check_scalar(min_inliers, "min_inliers", owner, low=1)
    if threshold is not None:
        check_scalar(threshold, "threshold", owner, kind=numbers.Real, low=0.0, closed="neither")
    check_scalar(relative_threshold, "relative_threshold", owner, kind=numbers.Real, low=0.0, closed="neither")
    check_choice(refit, "refit", owner, ["homography", "affine"])
    check_scalar(max_hypotheses, "max_hypotheses", owner, low=1)
    check_scalar(lo_iterations, "lo_iterations", owner, low=0)
    check_scalar(max_scale, "max_scale", owner, kind=numbers.Real, low=1.0)
    check_scalar(min_singular_ratio, "min_singular_ratio", owner, kind=numbers.Real, low=0.0, high=1.0,
                 closed="right")
    check_scalar(min_spread, "min_spread", owner, kind=numbers.Real, low=0.0, high=1.0)
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
    params = {"min_inliers": int(min_inliers), "threshold": threshold, "relative_threshold": relative_threshold,
              "refit": refit, "min_spread": min_spread, "max_scale": max_scale,
              "min_singular_ratio": min_singular_ratio}

    def fail(reason, inliers=0, mask=None, spread=0.0, sane=False, kind=None):
        return Verification(False, int(inliers), m, np.zeros(m, bool) if mask is None else mask, None, kind,
                            float(spread), sane, reason, params)

    if m < min_inliers or m < 3:
        return fail(f"too few tentative matches ({m} < {max(min_inliers, 3)})")
    if query_region is None:
        lo, hi = fq[:, :2].min(axis=0), fq[:, :2].max(axis=0)
        query_region = (lo[0], lo[1], max(hi[0], lo[0] + 1.0), max(hi[1], lo[1] + 1.0))
    if threshold is None:
        ext = fd[:, :2].max(axis=0) - fd[:, :2].min(axis=0)
        threshold = max(float(relative_threshold) * float(np.hypot(*ext)), 1.0)
    thr2 = float(threshold) ** 2
    q, d = fq[mt[:, 0]], fd[mt[:, 1]]
    pq, pd = q[:, :2], d[:, :2]

    # 1. single-correspondence hypotheses, degenerate ones discarded, scored by raw inlier counts
    hyp = np.arange(m) if m <= max_hypotheses else np.unique(np.linspace(0, m - 1, max_hypotheses).astype(int))
    T = affine_from_frames(q[hyp], d[hyp])
    T = T[_linear_ok(T[:, :, :2], max_scale, min_singular_ratio)]
    if len(T) == 0:
        return fail("no sane hypothesis (every single-match hypothesis is degenerate)")
    counts, costs = score_hypotheses(T.astype(np.float32), pq, pd, thr2, block)
    top = counts.max()
    cand = np.flatnonzero(counts == top)
    A = np.vstack([T[cand[np.argmin(costs[cand])]], [0.0, 0.0, 1.0]])   # the truncated quadratic breaks ties

    # 2. local optimisation of the affine model
    def affine_ok(T2):
        return bool(_linear_ok(T2[None, :2, :2], max_scale, min_singular_ratio)[0])

    A, inl, r2 = _local_optimisation(A, _fit_affine, pq, pd, thr2, lo_iterations, affine_ok)
    model, kind = A, "affine"

    # 3. optional homography refit, kept when sane and not worse
    if refit == "homography" and inl.sum() >= 8:
        def homography_ok(H2):
            return model_problem(H2, query_region, max_scale=max_scale, min_singular_ratio=min_singular_ratio) is None

        H = _fit_homography(pq[inl], pd[inl])
        if H is not None and homography_ok(H):
            H, inl_h, r2_h = _local_optimisation(H, _fit_homography, pq, pd, thr2, lo_iterations, homography_ok)
            if inl_h.sum() >= inl.sum():
                model, kind, inl, r2 = H, "homography", inl_h, r2_h

    # 4. one-to-one inliers, model sanity, spread, decision
    mask = one_to_one(mt, inl, r2)
    n_in = int(mask.sum())
    problem = model_problem(model, query_region, max_scale=max_scale, min_singular_ratio=min_singular_ratio)
    if problem is not None:
        return fail(f"degenerate model: {problem}", 0, np.zeros(m, bool), kind=kind)
    x1, y1, x2, y2 = query_region
    spread = min(hull_area(pq[mask]) / max((x2 - x1) * (y2 - y1), 1e-12), 1.0)
    if spread < min_spread:
        return fail(f"inliers not spread (hull {spread:.2%} of the query region < {min_spread:.2%})", n_in, mask,
                    spread, True, kind)
    if n_in < min_inliers:
        return fail(f"too few inliers ({n_in} < {min_inliers})", n_in, mask, spread, True, kind)
    return Verification(True, n_in, m, mask, model, kind, float(spread), True, None, params)


def verify_affine(frames_q, frames_db, matches, **params):
    """:func:`verify` with ``refit="affine"``, in the former two-value form: ``(inlier_mask, transform)``.

    ``inlier_mask`` holds the one-to-one inliers; ``transform`` (3, 3) is the affine model only when the pair is
    verified (None otherwise). Kept for callers that count the inliers themselves.
    """
    params.setdefault("refit", "affine")
    v = verify(frames_q, frames_db, matches, **params)
    return v.inlier_mask, v.transform
