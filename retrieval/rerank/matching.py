"""Tentative matches between two sets of local descriptors and robust homography estimation.

Tentative matches (:func:`tentative_matches`, the one ratio test of the library, also used by spatial re-ranking):
nearest neighbours filtered by Lowe's ratio test (Lowe 2004, section 7.1: distance to the nearest over distance to
the second nearest < ``ratio``) and/or mutual nearest neighbours; :func:`match_descriptors` runs it in RootSIFT
space (Arandjelovic & Zisserman 2012). Verification: :func:`retrieval.rerank.verification.verify` (the one geometric verification); the homography of a
verified pair is refined with OpenCV's USAC framework (MAGSAC++ by default; Barath et al. 2020).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from retrieval.core.checks import check_choice, check_scalar
from retrieval.features.extractor import FeatureExtractor
from retrieval.features.rootsift import root_sift

_BLOCK = 2048


def _prepare(desc, rootsift: bool) -> np.ndarray:
    d = np.asarray(desc)
    if d.ndim != 2:
        raise ValueError(f"descriptors must be a 2-d array (n, d); got shape {d.shape}.")
    if rootsift:
        return root_sift(d)
    return d.astype(np.float32)


def nearest_two(qa: np.ndarray, db: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two nearest rows of ``db`` for every row of ``qa`` (squared Euclidean distance, exact, blockwise).

    One matrix product per block gives ``|b|^2 - 2 q.b``; the arg-min of a row is the nearest row (``|q|^2`` is
    constant per row and is added to the two kept values only), the second pass with the first one masked gives
    the second nearest. Ties go to the lowest index of ``db``.

    Parameters
    ----------
    qa : ndarray of shape (n, d), float32
    db : ndarray of shape (m, d), float32

    Returns
    -------
    dist : ndarray of shape (n, 2), float32 (squared distances, inf when m < 2)
    idx : ndarray of shape (n, 2), int64 (-1 when missing)
    """
    n, m = len(qa), len(db)
    dist = np.full((n, 2), np.inf, np.float32)
    idx = np.full((n, 2), -1, np.int64)
    if n == 0 or m == 0:
        return dist, idx
    db_sq = np.einsum("ij,ij->i", db, db)
    for s in range(0, n, _BLOCK):
        q = qa[s:s + _BLOCK]
        rows = np.arange(len(q))
        q_sq = np.einsum("ij,ij->i", q, q)
        D = q @ db.T
        D *= -2.0
        D += db_sq[None, :]
        j1 = np.argmin(D, axis=1)
        idx[s:s + len(q), 0] = j1
        dist[s:s + len(q), 0] = np.maximum(D[rows, j1] + q_sq, 0.0)
        if m >= 2:
            D[rows, j1] = np.inf
            j2 = np.argmin(D, axis=1)
            idx[s:s + len(q), 1] = j2
            dist[s:s + len(q), 1] = np.maximum(D[rows, j2] + q_sq, 0.0)
    return dist, idx


def tentative_matches(desc_a, desc_b, *, ratio: float | None = 0.8, mutual: bool = False,
                      return_ratios: bool = False):
    """Tentative matches from A to B: the ratio test of the library (Lowe 2004, section 7.1), on descriptors
    already in the space where they are compared (RootSIFT, RootSIFT + local PCA, ...).

    Each row ``a`` of A is paired with its nearest row ``b1`` of B (exact squared Euclidean distances, ties to
    the lowest index of B). The pair is kept when ``d(a, b1)^2 < ratio^2 d(a, b2)^2``, ``b2`` the second nearest
    (``ratio=None`` skips this test), i.e. ``||a - b1|| < ratio ||a - b2||`` with a strict inequality: a pair
    whose two nearest distances are both 0 (duplicate descriptors) is rejected, a pair with no second neighbour
    (B has one row) is kept. With ``mutual``, ``a`` must also be the nearest row of A to ``b1``.

    Parameters
    ----------
    desc_a : ndarray of shape (n_a, d), float (converted to float32)
    desc_b : ndarray of shape (n_b, d), float (converted to float32)
    ratio : float in (0, 1] or None
    mutual : bool
    return_ratios : bool
        Also return ``||a - b1|| / ||a - b2||`` for each kept match (lower = more distinctive; 0 without a
        second neighbour, 1 when both distances are 0).

    Returns
    -------
    matches : ndarray of shape (m, 2), int64
        ``(index in A, index in B)``, sorted by index in A.
    ratios : ndarray of shape (m,), float32 (only when ``return_ratios``)
    """
    if ratio is not None:
        check_scalar(ratio, "ratio", "tentative_matches", kind=numbers.Real, low=0.0, high=1.0, closed="right")
    if ratio is None and not mutual:
        raise ValueError("tentative matches need a ratio test (ratio) and/or mutual=True; got neither.")
    a = np.ascontiguousarray(desc_a, dtype=np.float32)
    b = np.ascontiguousarray(desc_b, dtype=np.float32)
    for name, x in (("desc_a", a), ("desc_b", b)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2-d array (n, d); got shape {x.shape}.")
    if len(a) and len(b) and a.shape[1] != b.shape[1]:
        raise ValueError(f"descriptors of A and B differ in dimension: {a.shape[1]} vs {b.shape[1]}.")
    dist, idx = nearest_two(a, b)
    d1, d2 = dist[:, 0].astype(np.float64), dist[:, 1].astype(np.float64)
    keep = idx[:, 0] >= 0
    if ratio is not None:
        keep &= d1 < (float(ratio) ** 2) * d2
    if mutual and len(a) and len(b):
        _, back = nearest_two(b, a)
        keep &= back[np.maximum(idx[:, 0], 0), 0] == np.arange(len(a))
    ia = np.flatnonzero(keep)
    matches = np.stack([ia, idx[ia, 0]], axis=1).astype(np.int64).reshape(-1, 2)
    if not return_ratios:
        return matches
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(d1[ia] / d2[ia])
    r = np.where(d2[ia] == 0.0, 1.0, np.where(np.isinf(d2[ia]), 0.0, r))
    return matches, r.astype(np.float32)


def match_descriptors(desc_a, desc_b, *, ratio: float | None = 0.8, mutual: bool = False,
                      rootsift: bool = True, return_ratios: bool = False):
    """Tentative matches from A to B on RootSIFT: both sets turned into RootSIFT, then :func:`tentative_matches`.

    Distances are Euclidean on RootSIFT when ``rootsift`` (uint8 SIFT input), on the raw descriptors otherwise;
    the ratio test and the mutual check are those of :func:`tentative_matches`.

    Parameters
    ----------
    desc_a : ndarray of shape (n_a, d)
    desc_b : ndarray of shape (n_b, d)
    ratio : float in (0, 1] or None
    mutual : bool
    rootsift : bool
    return_ratios : bool

    Returns
    -------
    matches : ndarray of shape (m, 2), int64
        ``(index in A, index in B)``, sorted by index in A.
    ratios : ndarray of shape (m,), float32 (only when ``return_ratios``)
    """
    return tentative_matches(_prepare(desc_a, rootsift), _prepare(desc_b, rootsift), ratio=ratio, mutual=mutual,
                             return_ratios=return_ratios)


_METHODS = {"magsac": "USAC_MAGSAC", "usac_default": "USAC_DEFAULT", "usac_accurate": "USAC_ACCURATE",
            "usac_prosac": "USAC_PROSAC", "ransac": "RANSAC", "lmeds": "LMEDS"}


def find_homography(xy_a, xy_b, *, method: str = "magsac", threshold: float = 3.0, confidence: float = 0.9999,
                    max_iters: int = 10000, random_state=None) -> tuple[np.ndarray | None, np.ndarray]:
    """Robust homography ``H`` with ``xy_b ~ H xy_a`` (OpenCV ``findHomography``, USAC framework).

    Parameters
    ----------
    xy_a, xy_b : ndarray of shape (m, 2), float
        Corresponding points (pixels of A and of B).
    method : {"magsac", "usac_default", "usac_accurate", "usac_prosac", "ransac", "lmeds"}
        OpenCV's ``USAC_MAGSAC`` (MAGSAC++) by default. For ``usac_prosac`` the points must be sorted by
        decreasing quality.
    threshold : float
        Reprojection threshold in pixels (for MAGSAC++ the maximum noise scale).
    confidence : float in (0, 1)
    max_iters : int
    random_state : None or int
        OpenCV's RNG is global: an int re-seeds it (``cv2.setRNGSeed``) for reproducible results.

    Returns
    -------
    H : ndarray of shape (3, 3), float64, or None (fewer than 4 points or no model)
    inliers : ndarray of shape (m,), bool
        As reported by the estimator.
    """
    import cv2

    check_choice(method, "method", "find_homography", list(_METHODS))
    check_scalar(threshold, "threshold", "find_homography", kind=numbers.Real, low=0.0, closed="neither")
    check_scalar(confidence, "confidence", "find_homography", kind=numbers.Real, low=0.0, high=1.0,
                 closed="neither")
    check_scalar(max_iters, "max_iters", "find_homography", low=1)
    a = np.asarray(xy_a, dtype=np.float64).reshape(-1, 2)
    b = np.asarray(xy_b, dtype=np.float64).reshape(-1, 2)
    if len(a) != len(b):
        raise ValueError(f"xy_a and xy_b must have the same length; got {len(a)} and {len(b)}.")
    m = len(a)
    if m < 4:
        return None, np.zeros(m, bool)
    if random_state is not None:
        cv2.setRNGSeed(int(random_state))
    H, mask = cv2.findHomography(a, b, getattr(cv2, _METHODS[method]), float(threshold), maxIters=int(max_iters),
                                 confidence=float(confidence))
    if H is None or mask is None or not np.all(np.isfinite(H)):
        return None, np.zeros(m, bool)
    return H / H[2, 2] if H[2, 2] != 0 else H, mask.ravel().astype(bool)


def apply_homography(H, xy) -> np.ndarray:
    """``H`` applied to points: ndarray of shape (n, 2), float64 (inf where the point maps to infinity)."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    p = np.c_[xy, np.ones(len(xy))] @ np.asarray(H, dtype=np.float64).T
    with np.errstate(divide="ignore", invalid="ignore"):
        out = p[:, :2] / p[:, 2:3]
    out[~np.isfinite(out)] = np.inf
    return out


def transfer_error(H, xy_a, xy_b) -> np.ndarray:
    """One-way transfer error ``||H a - b||`` in pixels of B, ndarray of shape (m,), float64."""
    return np.hypot(*(apply_homography(H, xy_a) - np.asarray(xy_b, dtype=np.float64).reshape(-1, 2)).T)


def guided_candidates(desc_a, desc_b, xy_a, xy_b, H, radius: float, *, rootsift: bool = True) -> np.ndarray:
    """Guided matching: for each feature of A, the descriptor-nearest feature of B within ``radius`` pixels of
    ``H x_a``, kept when the choice is mutual (the feature of A is also the nearest among those whose
    prediction falls within ``radius`` of that feature of B) (Hartley & Zisserman 2004, section 4.8).

    Returns
    -------
    ndarray of shape (m, 2), int64: ``(index in A, index in B)``.
    """
    from scipy.spatial import cKDTree

    pa = apply_homography(H, xy_a)
    ok = np.isfinite(pa).all(axis=1)
    if not ok.any() or len(xy_b) == 0:
        return np.zeros((0, 2), np.int64)
    tree = cKDTree(np.asarray(xy_b, dtype=np.float64))
    ia_ok = np.flatnonzero(ok)
    lists = tree.query_ball_point(pa[ok], r=float(radius))
    lens = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
    if lens.sum() == 0:
        return np.zeros((0, 2), np.int64)
    ia = np.repeat(ia_ok, lens)
    ib = np.fromiter((j for v in lists for j in v), dtype=np.int64, count=int(lens.sum()))
    a, b = _prepare(desc_a, rootsift), _prepare(desc_b, rootsift)
    d = np.einsum("ij,ij->i", a[ia] - b[ib], a[ia] - b[ib])
    order = np.lexsort((d, ia))
    first_a = np.r_[True, ia[order][1:] != ia[order][:-1]]
    best_a = order[first_a]
    order_b = np.lexsort((d, ib))
    first_b = np.r_[True, ib[order_b][1:] != ib[order_b][:-1]]
    best_b = set(order_b[first_b].tolist())
    keep = np.array([k for k in best_a if k in best_b], dtype=np.int64)
    return np.stack([ia[keep], ib[keep]], axis=1).reshape(-1, 2)


MATCH_DEFAULTS = {"detector": "hesaff", "max_side": 2048, "ratio": 0.9, "mutual": True, "method": "magsac",
                  "threshold": 3.0, "guided": True, "guided_radius": 6.0}
"""Defaults of :func:`match_images` / ``retrieval match`` (chosen on graf1->graf3 and the 16 homogr pairs,
docs/benchmarks.md "Features")."""


@dataclass
class MatchResult:
    """The outcome of :func:`match_features` / :func:`match_images`.

    Attributes
    ----------
    n_features : (int, int)
    tentative : int
        Candidate matches the inliers are drawn from: the ratio-test / mutual matches, plus the guided matches
        when guided matching ran (so ``inliers <= tentative`` always).
    inliers : int
        One-to-one matches consistent with ``homography`` (0 when not verified).
    homography : ndarray of shape (3, 3), float64, or None
        Maps pixels of A to pixels of B (original coordinates after EXIF orientation); None unless ``verified``.
    inlier_pairs : ndarray of shape (inliers, 2), int64
        ``(index in A, index in B)``.
    tentative_pairs : ndarray of shape (tentative, 2), int64
    verified : bool
        The decision of :func:`retrieval.rerank.verification.verify` (the one geometric verification).
    reason : str or None
        Why the pair is not verified.
    features_a, features_b : LocalFeatures or None
    """

    n_features: tuple[int, int]
    tentative: int
    inliers: int
    homography: np.ndarray | None
    inlier_pairs: np.ndarray
    tentative_pairs: np.ndarray
    features_a: object = None
    features_b: object = None
    params: dict = field(default_factory=dict)
    verified: bool = False
    reason: str | None = None

    def to_json(self) -> dict:
        """The stable ``--json`` schema of ``retrieval match`` (docs/cli.md)."""
        return {"verified": bool(self.verified), "reason": self.reason,
                "n_features": [int(v) for v in self.n_features], "tentative": int(self.tentative),
                "inliers": int(self.inliers),
                "homography": None if self.homography is None else [[float(v) for v in r] for r in self.homography],
                "params": self.params}


def _agrees(H_new, H_verified, xy_inliers_a, xy_b) -> bool:
    """The refit keeps the verified model: at the verified inliers of A, the two maps differ by less than 3 % of
    the extent of B's features (the verifier's inlier tolerance) in median."""
    ext = float(np.hypot(*(xy_b.max(axis=0) - xy_b.min(axis=0))))
    diff = np.linalg.norm(apply_homography(H_new, xy_inliers_a) - apply_homography(H_verified, xy_inliers_a), axis=1)
    return bool(np.median(diff) < 0.03 * ext)


def match_features(fa, fb, *, ratio: float | None = 0.9, mutual: bool = True, method: str = "magsac",
                   threshold: float = 3.0, guided: bool = True, guided_radius: float = 6.0,
                   random_state: int | None = 0, min_inliers: int | None = None) -> MatchResult:
    """Match two :class:`LocalFeatures`, verify the pair and estimate the homography A -> B.

    1. tentative matches on RootSIFT (:func:`match_descriptors`: ratio test and/or mutual NN);
    2. the decision: :func:`retrieval.rerank.verification.verify` (affine hypotheses from single frame
       correspondences, local optimisation, homography refit, degenerate models rejected, one-to-one inliers,
       ``min_inliers``, default ``DEFAULT_MIN_INLIERS``); an unverified pair gets no homography;
    3. precise refit of a verified pair: OpenCV USAC (:func:`find_homography`, MAGSAC++ by default, ``threshold``
       px) on the tentative matches, kept when it agrees with the verified model at its inliers, then, when ``guided``, guided matching (:func:`guided_candidates` within
       ``guided_radius`` px of the prediction) adds the correspondences the ratio test rejected and the
       homography is estimated again on them; a refit is kept only when it is not degenerate
       (:func:`retrieval.rerank.verification.model_problem`) and keeps at least as many inliers, else the
       verified model stays.

    Returns
    -------
    MatchResult
    """
    from retrieval.rerank.verification import DEFAULT_MIN_INLIERS, model_problem, one_to_one, verify

    check_scalar(guided_radius, "guided_radius", "match_features", kind=numbers.Real, low=0.0, closed="neither")
    min_inliers = DEFAULT_MIN_INLIERS if min_inliers is None else min_inliers
    na, nb = len(fa), len(fb)
    params = {"ratio": ratio, "mutual": mutual, "method": method, "threshold": threshold, "guided": guided,
              "guided_radius": guided_radius, "min_inliers": min_inliers}
    empty = np.zeros((0, 2), np.int64)
    if na == 0 or nb == 0:
        return MatchResult((na, nb), 0, 0, None, empty, empty, fa, fb, params, False, "no features")
    m = match_descriptors(fa.descriptors, fb.descriptors, ratio=ratio, mutual=mutual)
    v = verify(fa.frames, fb.frames, m, min_inliers=min_inliers)
    if not v.verified:
        return MatchResult((na, nb), len(m), 0, None, empty, m, fa, fb, params, False, v.reason)
    region = (*fa.xy.min(axis=0), *fa.xy.max(axis=0))
    H, pairs, cands = v.transform, m[v.inlier_mask], m

    def refit(c):
        H2, inl2 = find_homography(fa.xy[c[:, 0]], fb.xy[c[:, 1]], method=method, threshold=threshold,
                                   random_state=random_state)
        if H2 is None or model_problem(H2, region) is not None:
            return None, empty
        r = transfer_error(H2, fa.xy[c[:, 0]], fb.xy[c[:, 1]])
        return H2, c[one_to_one(c, inl2, r)]

    H2, p2 = refit(m)
    if H2 is not None and len(p2) >= min_inliers and _agrees(H2, H, fa.xy[pairs[:, 0]], fb.xy):
        H, pairs = H2, p2
        if guided:
            g = guided_candidates(fa.descriptors, fb.descriptors, fa.xy, fb.xy, H, guided_radius)
            c = np.unique(np.concatenate([g, pairs]), axis=0) if len(g) else pairs
            H3, p3 = refit(c)
            if H3 is not None and len(p3) >= len(pairs):
                H, pairs, cands = H3, p3, c
    return MatchResult((na, nb), len(cands), len(pairs), H, pairs, cands, fa, fb, params, True, None)


def match_images(path_a, path_b, *, extractor=None, store=None, **params) -> MatchResult:
    """Extract (or read from ``store``) the features of two image files and :func:`match_features` them.

    Parameters
    ----------
    path_a, path_b : image files
    extractor : FeatureExtractor or None
        Default: ``FeatureExtractor(MATCH_DEFAULTS["detector"], max_side=MATCH_DEFAULTS["max_side"])``
        (upright Hessian-affine at up to 2048 px: not rotation invariant; pass an extractor with
        ``rotation_invariance=True`` for rotated images).
    store : FeatureStore or None
    **params
        :func:`match_features` parameters (defaults in ``MATCH_DEFAULTS``).
    """
    if extractor is None:
        extractor = FeatureExtractor(MATCH_DEFAULTS["detector"], max_side=MATCH_DEFAULTS["max_side"])
    kw = {k: v for k, v in MATCH_DEFAULTS.items() if k not in ("detector", "max_side")}
    unknown = set(params) - set(kw) - {"random_state", "min_inliers"}
    if unknown:
        raise ValueError(f"Unknown parameter(s) {sorted(unknown)} for match_images; expected some of {sorted(kw)}.")
    kw.update(params)
    if store is not None:
        fa, fb = store.get_or_extract(path_a, extractor), store.get_or_extract(path_b, extractor)
    else:
        fa, fb = extractor(path_a), extractor(path_b)
    res = match_features(fa, fb, **kw)
    res.params = {**res.params, "extractor": extractor.config}
    return res
