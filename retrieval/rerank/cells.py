"""The ratio test of verification in a fraction of the brute-force time, keeping only matches the exact test keeps.

The exact test (:func:`retrieval.rerank.matching.tentative_matches`) compares every query descriptor with every
database descriptor: about 3,000 x 3,000 products per pair of 1,024-pixel photos, 15 ms per pair in 64 dimensions,
which made spatial re-ranking of a 100-image shortlist cost a second on real photos. Here the descriptor space is cut
into :class:`MatchCells` (k-means centres learnt with the model, :data:`N_CELLS`), and for each pair:

1. **probe**: each query descriptor is compared only with the database descriptors of its ``probes`` nearest
   cells (the database side sorted by cell once, when it is described); the two nearest found give the ratio test
   (Lowe 2004, section 7.1) on that subset;
2. **confirm**: a query descriptor that passes is kept at once when no database descriptor outside its probed cells
   can be near enough to change the decision: a descriptor of cell ``c`` lies on ``c``'s side of the bisecting
   hyperplane between ``c`` and the query's nearest centre ``c1``, at least ``(|q - c|^2 - |q - c1|^2) / (2 |c -
   c1|)`` from ``q``; when the smallest such bound ``b`` over the unprobed cells has ``d1 < ratio^2 b^2``, the
   subset's nearest is the true nearest and the true second nearest cannot undo the test. The others are compared
   with *every* database descriptor (exact nearest two) and kept only when the exact ratio test keeps them.

So every match returned is a match of the exact test (same pair, same decision, up to float rounding in the
bound), and a match of the exact test is missed only when the query descriptor's true nearest neighbour lies
outside its probed cells: if it is inside, the subset's nearest is the true nearest and its second nearest is no
nearer than the true second, so the subset's test passes whenever the exact one does. The bound settles most
true matches (their nearest is much nearer than anything else), so near-copies, whose descriptors nearly all
match, cost no more than unrelated pairs. The share kept is measured in docs/results.md ("Verification on real
photos"); probing every cell gives exactly the exact test's matches. Pairs of small images (fewer than
:data:`EXACT_BELOW` comparisons) are matched exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.rerank.matching import nearest_two

__all__ = ["EXACT_BELOW", "N_CELLS", "PROBES", "MatchCells", "probed_matches", "with_probes"]

N_CELLS = 256
"""Cells learnt per model (k-means on its training descriptors in the compared space)."""
PROBES = 8
"""Cells visited per query descriptor."""
BOUND_MARGIN = 0.999
"""The bound is trusted with this margin (float32 distances to the centres)."""
EXACT_BELOW = 1_000_000
"""Pairs with fewer descriptor comparisons than this (query descriptors x database descriptors: about 1,000 x
1,000, 2 ms) are matched by the exact test: on thumbnails the probed test saves little, and on Holidays-805 (about
350 features a photo) its missed matches cost 0.005-0.007 mAP (docs/results.md, "Verification on real photos")."""


@dataclass(frozen=True, eq=False)
class MatchCells:
    """Centres (k, d) float32 of the cells of the compared space, and how many a query descriptor probes
    (compared by identity: the centres are an array)."""

    centres: np.ndarray
    probes: int = PROBES

    def __post_init__(self):
        C = np.asarray(self.centres, np.float64)
        sq = np.einsum("ij,ij->i", C, C)
        gap2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (C @ C.T), 0.0)   # |c_i - c_j|^2
        object.__setattr__(self, "_gap2", np.ascontiguousarray(4.0 * gap2, np.float32))
        centres = np.ascontiguousarray(self.centres, np.float32)
        object.__setattr__(self, "_sq", np.einsum("ij,ij->i", centres, centres))   # |c|^2, float32

    @classmethod
    def fit(cls, X, k: int = N_CELLS, *, seed: int = 0, probes: int = PROBES) -> MatchCells:
        """k-means (Lloyd, k-means++-free: k distinct rows then 15 iterations on at most 256 rows per centre) of
        the rows of ``X`` (training descriptors already in the compared space); fewer rows than ``4 k`` give
        ``len(X) // 4`` cells (at least 1)."""
        from retrieval.core.kmeans import kmeans

        X = np.ascontiguousarray(X, np.float32)
        k = max(1, min(int(k), len(X) // 4))
        C = kmeans(X, k, rng=np.random.default_rng(seed), n_iter=15)
        return cls(np.ascontiguousarray(C, np.float32), int(probes))

    def _distances(self, desc: np.ndarray) -> np.ndarray:
        """``|c|^2 - 2 x.c`` (n, k) float32 for the rows ``x`` of ``desc``: the squared distances to the centres up to
        the row's own ``|x|^2``, computed in place (the same values as ``|c|^2 - 2 (x @ C.T)``)."""
        D = desc @ np.asarray(self.centres, np.float32).T
        D *= np.float32(-2.0)
        D += self._sq
        return D

    def place_query(self, desc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One image's descriptors ``desc`` (n, d) as a query: ``(probes, bound)``, the ``probes`` nearest cells of
        each row, (n, probes) int32 (all cells when there are fewer), and the smallest squared distance from the
        row to any unprobed cell, (n,) float32 (module docstring; inf when every cell is probed)."""
        from retrieval.rerank._cells_kernels import smallest_columns, unprobed_bound

        desc = np.ascontiguousarray(desc, np.float32)
        p = min(self.probes, len(self.centres))
        if len(desc) == 0:
            return np.zeros((0, p), np.int32), np.zeros(0, np.float32)
        D = self._distances(desc)
        probes = smallest_columns(D, p)
        return probes, unprobed_bound(D, probes, self._gap2)

    def place_database(self, desc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One image's descriptors ``desc`` (n, d) as the database side: ``(perm, starts)``, its rows listed by
        nearest cell, ``perm[starts[c]:starts[c + 1]]`` the rows of cell ``c`` (int32, and k + 1 int64 offsets)."""
        desc = np.ascontiguousarray(desc, np.float32)
        k = len(self.centres)
        if len(desc) == 0:
            return np.zeros(0, np.int32), np.zeros(k + 1, np.int64)
        cell = np.argmin(self._distances(desc), axis=1)
        perm = np.argsort(cell, kind="stable")
        starts = np.searchsorted(cell[perm], np.arange(k + 1)).astype(np.int64)
        return perm.astype(np.int32), starts

    def save(self, path) -> None:
        np.savez(path, centres=self.centres, probes=np.int64(self.probes))

    @classmethod
    def load(cls, path) -> MatchCells:
        with np.load(path, allow_pickle=False) as z:
            return cls(np.ascontiguousarray(z["centres"], np.float32), int(z["probes"]))


def probed_matches(query_desc, query_cells, db_desc, db_perm, db_starts, *, ratio: float,
                   query_bound=None) -> np.ndarray:
    """Tentative matches ``(query index, database index)`` (m, 2) int64, sorted by query index (module docstring):
    probe, then keep what the bound ``query_bound`` (:meth:`MatchCells.place_query`; None: no bound) settles and confirm
    the rest (the exact test's own computation on those rows)."""
    from retrieval.rerank._cells_kernels import probe_nearest_two

    q = np.ascontiguousarray(query_desc, np.float32)
    db = np.ascontiguousarray(db_desc, np.float32)
    if len(q) == 0 or len(db) == 0:
        return np.empty((0, 2), np.int64)
    r2 = float(ratio) ** 2
    d1, d2, j1 = probe_nearest_two(q, query_cells, db, db_perm, db_starts)
    d1 = d1.astype(np.float64)
    passed = d1 < r2 * d2.astype(np.float64)
    sure = passed & (d1 < r2 * BOUND_MARGIN * np.asarray(query_bound, np.float64)) if query_bound is not None \
        else np.zeros(len(q), bool)
    rows, cols = [np.flatnonzero(sure)], [j1[sure].astype(np.int64)]
    check = np.flatnonzero(passed & ~sure)
    if len(check):
        dist, idx = nearest_two(q[check], db)
        d1e, d2e = dist[:, 0].astype(np.float64), dist[:, 1].astype(np.float64)
        keep = (idx[:, 0] >= 0) & (d1e < r2 * d2e)
        rows.append(check[keep])
        cols.append(idx[keep, 0])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    order = np.argsort(rows, kind="stable")
    return np.stack([rows[order], cols[order]], axis=1).astype(np.int64).reshape(-1, 2)


def with_probes(cells: MatchCells | None, probes: int) -> MatchCells | None:
    """``cells`` probing ``probes`` cells per query descriptor; None (the exact test) without cells or with 0."""
    if cells is None or int(probes) <= 0:
        return None
    return cells if cells.probes == int(probes) else MatchCells(cells.centres, int(probes))
