"""Candidate pairs of ``retrieval duplicates``: each photo's nearest photos by their compact global codes
(:mod:`retrieval.app.duplicates.codes`), over its quarter turns.

Below :data:`EXACT_BELOW` photos every photo's codes are compared with every upright code, in blocks (at 10,000
photos about 10 s on 2 cores). From there on, all against all grows with the square of the collection (18.6 min at
100,000), so the codes are searched through an inverted file, as IVFADC's coarse quantiser does (Jegou et al. 2011,
section IV.A, without the residual codes: the codes themselves are compared): the upright codes are cut into
k-means cells (:func:`cell_count`), and each turned code of a photo is compared with the photos of its
:data:`PROBES` nearest cells (a compiled loop, one photo per parallel iteration: 32-37 s at 100,000 photos). A pair is
missed only when neither photo's turned codes probe the other's cell. A copy's code is nearly its original's
(similarity above 0.9), so copies fall in one of the nearest cells; the share of a sample's exact candidates
found is reported by ``retrieval bench duplicates`` (:func:`sampled_recall`; docs/benchmarks.md "Duplicates")."""

from __future__ import annotations

import numpy as np

EXACT_BELOW = 20_000
"""Photos below which every code is compared with every other."""

PROBES = 16
"""Cells probed by each turned code of a photo (the inverted file)."""

BLOCK_VALUES = 50_000_000
"""Similarities computed at once (200 MB of float32)."""

KMEANS_ITERATIONS = 10
"""Lloyd iterations of the cells (trained on at most 64 codes per cell)."""


def cell_count(n: int) -> int:
    """Cells of the inverted file over ``n`` codes: about ``4 sqrt(n)`` (1,265 at 100,000: about 80 photos each;
    4,000 at 1,000,000), at least 2 and at most ``n // 8``."""
    return int(max(2, min(n // 8, round(4 * np.sqrt(n)))))


class CodeCells:
    """k-means cells of unit codes ``codes`` (m, D) and the codes of each cell (module docstring)."""

    def __init__(self, codes: np.ndarray, n_cells: int, *, seed: int = 0):
        from retrieval.core.kmeans import kmeans

        codes = np.ascontiguousarray(codes, np.float32)
        self.centres = kmeans(codes, int(n_cells), rng=np.random.default_rng(seed), n_iter=KMEANS_ITERATIONS,
                              max_points_per_centroid=64)
        self.assign = self.nearest(codes, 1)[:, 0]
        self.perm = np.argsort(self.assign, kind="stable")
        self.starts = np.searchsorted(self.assign[self.perm], np.arange(len(self.centres) + 1))

    def nearest(self, X: np.ndarray, p: int) -> np.ndarray:
        """The ``p`` cells nearest to each row of ``X`` (n, D) (L2 to the centres), (n, p)."""
        out = np.empty((len(X), p), np.int64)
        c2 = (self.centres.astype(np.float64) ** 2).sum(1).astype(np.float32)
        step = max(1, BLOCK_VALUES // (4 * len(self.centres)))
        p = min(p, len(self.centres))
        for s in range(0, len(X), step):
            d = c2[None, :] - 2 * (X[s:s + step] @ self.centres.T)
            top = np.argpartition(d, p - 1, axis=1)[:, :p] if p < d.shape[1] else np.argsort(d, axis=1)
            out[s:s + step, :p] = top[:, :p]
        return out[:, :p]


def _exact_blocks(Q: np.ndarray, C: np.ndarray):
    """``(rows, S)``: blocks of query rows and their similarities (rows, T, m) to every code."""
    n, T, _ = Q.shape
    Ct = np.ascontiguousarray(C.T)
    block = max(1, BLOCK_VALUES // max(1, T * len(C)))
    for s in range(0, n, block):
        q = Q[s:s + block]
        S = np.einsum("ntd,dm->ntm", q, Ct, optimize=True) if T > 1 else (q[:, 0] @ Ct)[:, None]
        yield np.arange(s, s + len(q)), S


def _cell_top(Q: np.ndarray, C: np.ndarray, cells: CodeCells, probes: int, k: int, exclude_self: bool):
    """``(rows, S, cols, turns)``: every query photo's ``k`` nearest codes among the cells its turned codes probe
    (compiled: :func:`retrieval.app.duplicates._candidate_kernels.probed_top`)."""
    from retrieval.app.duplicates._candidate_kernels import probed_top

    n, T, D = Q.shape
    Q = np.ascontiguousarray(Q, np.float32)
    probed = cells.nearest(Q.reshape(n * T, D), probes).reshape(n, T, -1)
    k = min(k, len(C))
    S, cols, turns = np.empty((n, k), np.float32), np.empty((n, k), np.int64), np.empty((n, k), np.int64)
    own = np.arange(n, dtype=np.int64) if exclude_self else np.full(n, -1, np.int64)
    probed_top(Q, np.ascontiguousarray(C, np.float32), probed, cells.perm.astype(np.int64),
               cells.starts.astype(np.int64), own, S, cols, turns)
    return np.arange(n), S, cols, turns


def candidate_pairs(query_codes: np.ndarray, codes: np.ndarray, *, k: int, threshold: float,
                    exclude_self: bool = True, cells: CodeCells | None = None,
                    probes: int = PROBES) -> list[tuple[int, int, float, int, int]]:
    """Candidate pairs of photos by their codes.

    Parameters
    ----------
    query_codes : (n, T, D) — each photo's unit codes turned by 0, 1, ... T - 1 quarter turns
    codes : (m, D) — the upright unit codes compared with (the same photos when ``exclude_self``)
    k : nearest photos kept for each query photo
    threshold : the least similarity kept
    cells : the inverted file over ``codes`` (None: every code compared; :func:`search_cells` decides)
    probes : cells probed by each turned code

    Returns
    -------
    list of ``(i, j, similarity, turn, rank)``: query photo ``i``, compared photo ``j``, the best similarity over
    the turns and its turn (quarter turns of ``i``), the rank of ``j`` among the query's candidates (from 0; for an
    unordered pair the better of its two), by decreasing similarity; with ``exclude_self`` each unordered pair once
    (the turn then expressed for the smaller index, ``(4 - turn) % 4`` when swapped).
    """
    out: dict = {}
    if cells is None:
        for rows, S in _exact_blocks(query_codes, codes):
            best_turn = S.argmax(axis=1)
            best = np.take_along_axis(S, best_turn[:, None, :], axis=1)[:, 0]
            if exclude_self:
                best[np.arange(len(rows)), rows] = -np.inf
            kk = min(k, best.shape[1])
            if kk <= 0:
                continue
            top = np.argpartition(-best, kk - 1, axis=1)[:, :kk]
            top = np.take_along_axis(top, np.argsort(-np.take_along_axis(best, top, 1), axis=1, kind="stable"), 1)
            _merge(out, rows, np.take_along_axis(best, top, 1), top, np.take_along_axis(best_turn, top, 1),
                   threshold, exclude_self)
    else:
        _merge(out, *_cell_top(query_codes, codes, cells, probes, k, exclude_self), threshold, exclude_self)
    pairs = [(a, b, sim, turn, rank) for (a, b), (sim, turn, rank) in out.items()]
    pairs.sort(key=lambda p: (-p[2], p[0], p[1]))
    return pairs


def _merge(out: dict, rows, sims, cols, turns, threshold: float, exclude_self: bool) -> None:
    """Add each query row's ranked candidates (``sims``/``cols``/``turns`` per row, best first) to ``out``
    (``{(i, j): (similarity, turn, rank)}``; one key per unordered pair with ``exclude_self``)."""
    for r, i in enumerate(np.asarray(rows).tolist()):
        for rank, (sim, j, turn) in enumerate(zip(sims[r].tolist(), cols[r].tolist(), turns[r].tolist(),
                                                  strict=True)):
            if not sim >= threshold or j < 0:
                continue
            key = (i, j)
            if exclude_self:
                if i == j:
                    continue
                if i > j:
                    key, turn = (j, i), (4 - turn) % 4
            if key not in out or out[key][0] < sim or (out[key][0] == sim and out[key][2] > rank):
                out[key] = (sim, turn, min(rank, out[key][2]) if key in out else rank)
            elif out[key][2] > rank:
                out[key] = (out[key][0], out[key][1], rank)


def search_cells(codes: np.ndarray, *, exact_below: int | None = None, seed: int = 0) -> CodeCells | None:
    """The inverted file :func:`candidate_pairs` searches ``codes`` (m, D) through: None (all against all) below
    ``exact_below`` codes (default :data:`EXACT_BELOW`) or 16."""
    if len(codes) < max(EXACT_BELOW if exact_below is None else exact_below, 16):
        return None
    return CodeCells(codes, cell_count(len(codes)), seed=seed)


def sampled_recall(query_codes: np.ndarray, codes: np.ndarray, pairs, *, k: int, threshold: float,
                   sample: int = 2000, seed: int = 0) -> dict:
    """How many of the exact candidates :func:`candidate_pairs` returned through the inverted file: for a random
    sample of photos (``query_codes`` and ``codes`` the same photos), their ``k`` most similar photos with every
    code compared, and the share of those pairs that ``pairs`` hold; ``{"sampled", "sampled_pairs", "recall",
    "sampled_pairs_above", "recall_above"}`` (``_above``: pairs of similarity ``threshold`` or more)."""
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(codes), min(sample, len(codes)), replace=False))
    found = {(a, b) for a, b, *_ in pairs}
    total = hit = total_above = hit_above = 0
    for s in range(0, len(pick), 256):
        rows = pick[s:s + 256]
        best = np.einsum("ntd,md->ntm", query_codes[rows], codes, optimize=True).max(axis=1)
        best[np.arange(len(rows)), rows] = -np.inf
        top = np.argpartition(-best, k - 1, axis=1)[:, :k]
        for r, i in enumerate(rows.tolist()):
            for j in top[r].tolist():
                ok = (min(i, j), max(i, j)) in found
                total, hit = total + 1, hit + ok
                if best[r, j] >= threshold:
                    total_above, hit_above = total_above + 1, hit_above + ok
    return {"sampled": int(len(pick)), "sampled_pairs": total, "recall": hit / max(total, 1),
            "sampled_pairs_above": total_above, "recall_above": hit_above / max(total_above, 1)}
