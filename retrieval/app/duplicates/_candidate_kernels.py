"""Compiled kernel of the duplicate finder's inverted file over the global codes
(:mod:`retrieval.app.duplicates.candidates`): each photo's ``k`` nearest photos among the cells its turned codes
probe, one photo per parallel iteration."""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(inline="always")
def _offer(best_s, best_j, best_t, s, j, t):
    """Offer photo ``j`` at similarity ``s`` (turn ``t``) to the descending top list: each photo at most once,
    with its best similarity over the turns."""
    k = best_s.shape[0]
    at = -1
    for q in range(k):
        if best_j[q] == j:
            at = q
            break
    if at >= 0:
        if s <= best_s[at]:
            return
        q = at                      # moved up from where it was
    else:
        q = k - 1
    while q > 0 and best_s[q - 1] < s:
        best_s[q] = best_s[q - 1]
        best_j[q] = best_j[q - 1]
        best_t[q] = best_t[q - 1]
        q -= 1
    best_s[q] = s
    best_j[q] = j
    best_t[q] = t


@njit(parallel=True, fastmath=True, cache=True)
def probed_top(Q, C, probed, perm, starts, self_index, out_s, out_j, out_t):
    """For each query photo ``i``: the ``k = out_s.shape[1]`` photos of largest similarity ``<Q[i, t], C[j]>`` over
    its turns ``t``, among the codes of the cells ``probed[i, t]`` (``perm[starts[c]:starts[c + 1]]``), skipping
    ``self_index[i]``; written to ``out_s`` (descending; -inf when fewer), ``out_j`` (-1 when fewer), ``out_t``.

    Q (n, T, D) float32; C (m, D) float32; probed (n, T, P) int64; perm (m,) int64; starts (cells + 1,) int64;
    self_index (n,) int64 (-1: none).
    """
    n, T, D = Q.shape
    P = probed.shape[2]
    for i in prange(n):
        bs = out_s[i]
        bj = out_j[i]
        bt = out_t[i]
        bs[:] = -np.inf
        bj[:] = -1
        bt[:] = 0
        for t in range(T):
            q = Q[i, t]
            for p in range(P):
                c = probed[i, t, p]
                for m in range(starts[c], starts[c + 1]):
                    j = perm[m]
                    if j == self_index[i]:
                        continue
                    s = np.float32(0.0)
                    cj = C[j]
                    for d in range(D):
                        s += q[d] * cj[d]
                    if s > bs[-1]:
                        _offer(bs, bj, bt, s, j, t)
