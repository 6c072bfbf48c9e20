"""Exact kernel nearest-neighbour search with the KPCA Cauchy-Schwarz bound (Bourrier et al. 2015, Appendix A.2, steps 1-5).

With K~(q, x) = <P_V' Psi(q), P_V' Psi(x)> and R(x) = ||P_V'perp Psi(x)|| (eq. 21), |K - K~| <= R(q) R(x)
(eq. 22). The search

1. embeds the query: K~ coordinates and R(q) (eq. 11, 21) — M kernel evaluations;
2. computes K~(q, x) for every database x (dot products);
3. takes tau, a lower bound of the k-th best true kernel value: the k-th largest of K~(q, x) - R(q) R(x)
   over the base (for k = 1 this is >= the paper's K~(q, x~1) - R(q) R(x~1) with x~1 = argmax K~, eq. 24,
   so it never evaluates more kernels; ``bound="paper"`` uses the paper's threshold literally);
4. keeps the candidates with K~(q, y) + R(q) R(y) >= tau (eq. 25-26);
5. evaluates the true kernel on the candidates only and returns the k best,

and reports the number of exact kernel evaluations of step 5 (``n_kernel_evals``; step 1 adds M per query).
A slack ``tol`` absorbs float rounding in the bound.
"""

from __future__ import annotations

import numpy as np

from retrieval.codes.kernel_pca import KernelPCAEmbedding
from retrieval.codes.kernels import kernel_diag, kernel_matrix
from retrieval.core.checks import check_array, check_choice, check_is_fitted, check_scalar


class ExactKernelSearch:
    """Exact k-NN for a Mercer kernel (largest K(q, x)) pruned by the KPCA bound (Bourrier et al. 2015, Appendix A).

    Parameters
    ----------
    embedding : KernelPCAEmbedding
        A fitted KPCA (its kernel is the kernel searched).
    tol : float
        Slack added to the Cauchy-Schwarz bound for float rounding.
    bound : {"kth", "paper"}
        Step-3 threshold (see module docstring); "paper" requires k = 1.

    Attributes (after ``add``)
    --------------------------
    base_ : ndarray of shape (n, d), float32 — the database vectors (needed by step 5).
    full_ : ndarray of shape (n, E + 1), float64 — P_V' Psi(x) coordinates.
    residuals_ : ndarray of shape (n,), float64 — R(x).
    last_n_kernel_evals_ : ndarray of shape (nq,), int64 — step-5 evaluations of the last search.
    """

    def __init__(self, embedding: KernelPCAEmbedding, *, tol: float = 1e-5, bound: str = "kth"):
        self.embedding = embedding
        self.tol = tol
        self.bound = bound

    def add(self, X) -> None:
        """Store ``X`` (n, d) with its embedding and residual norms (offline step of Appendix A.2)."""
        check_is_fitted(self.embedding, "coef_")
        X = check_array(X, "X", n_features=self.embedding.d_)
        full = self.embedding.transform_full(X)
        res = self.embedding.residual_norm(X, full=full)
        if getattr(self, "base_", None) is None:
            self.base_, self.full_, self.residuals_ = X.copy(), full, res
        else:
            self.base_ = np.concatenate([self.base_, X])
            self.full_ = np.concatenate([self.full_, full])
            self.residuals_ = np.concatenate([self.residuals_, res])

    @property
    def ntotal(self) -> int:
        """Number of database vectors."""
        b = getattr(self, "base_", None)
        return 0 if b is None else int(b.shape[0])

    def search(self, x, k: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact k largest kernel values for each query (steps 1-5).

        Parameters
        ----------
        x : array-like of shape (nq, d)
        k : int

        Returns
        -------
        values : ndarray of shape (nq, k), float32 — K(q, x), descending; -inf padding.
        ids : ndarray of shape (nq, k), int64 — -1 padding.
        n_kernel_evals : ndarray of shape (nq,), int64 — exact kernel evaluations of step 5.
        """
        check_scalar(k, "k", "ExactKernelSearch", low=1)
        check_choice(self.bound, "bound", "ExactKernelSearch", ("kth", "paper"))
        if self.bound == "paper" and k != 1:
            raise ValueError(f"bound='paper' is the k = 1 procedure of Appendix A.2; got k={k}.")
        if self.ntotal == 0:
            raise ValueError("ExactKernelSearch: the database is empty; call add() first.")
        emb = self.embedding
        x = check_array(x, "x", n_features=emb.d_)
        nq, n = x.shape[0], self.ntotal
        kk = min(k, n)
        fq = emb.transform_full(x)                       # step 1
        rq = emb.residual_norm(x, full=fq)
        values = np.full((nq, k), -np.inf, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        evals = np.zeros(nq, dtype=np.int64)
        for i in range(nq):
            kt = self.full_ @ fq[i]                       # step 2
            slack = rq[i] * self.residuals_ + self.tol
            if self.bound == "paper":
                j = int(np.argmax(kt))                    # step 3
                tau = kt[j] - slack[j]
            else:
                lower = kt - slack
                tau = lower.max() if kk == 1 else np.partition(lower, n - kk)[n - kk]
            cand = np.flatnonzero(kt + slack >= tau)      # step 4
            kv = kernel_matrix(x[i:i + 1], self.base_[cand], emb.kernel, gamma=emb.gamma)[0]   # step 5
            evals[i] = cand.size
            order = np.lexsort((cand, -kv))[:kk]
            values[i, :kk] = kv[order]
            ids[i, :kk] = cand[order]
        self.last_n_kernel_evals_ = evals
        return values, ids, evals


def kernel_distance(kq, kxx, kqx):
    """d_K(q, x) = K(q, q) + K(x, x) - 2 K(q, x) (Bourrier et al. 2015, eq. 4); arrays broadcast, float32."""
    return (np.asarray(kq, np.float32) + np.asarray(kxx, np.float32) - 2 * np.asarray(kqx, np.float32))


def rerank(x, base, shortlist, k: int, kernel: str, *, gamma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank a shortlist with the true kernel (Bourrier et al. 2015, section 4.3, online step 3).

    Parameters
    ----------
    x : ndarray of shape (nq, d) — queries.
    base : ndarray of shape (n, d) — database vectors.
    shortlist : ndarray of shape (nq, R), int64 — candidate ids (-1 padding ignored).
    k : int

    Returns
    -------
    distances : ndarray of shape (nq, k), float32 — d_K (eq. 4), ascending, +inf padding.
    ids : ndarray of shape (nq, k), int64 — -1 padding.
    """
    x = np.asarray(x, np.float32)
    D = np.full((x.shape[0], k), np.inf, dtype=np.float32)
    ids = np.full((x.shape[0], k), -1, dtype=np.int64)
    kq = kernel_diag(x, kernel, gamma=gamma)
    for i in range(x.shape[0]):
        cand = shortlist[i][shortlist[i] >= 0]
        if cand.size == 0:
            continue
        kv = kernel_matrix(x[i:i + 1], base[cand], kernel, gamma=gamma)[0]
        d = kernel_distance(kq[i], kernel_diag(base[cand], kernel, gamma=gamma), kv)
        order = np.lexsort((cand, d))[:k]
        D[i, :order.size] = d[order]
        ids[i, :order.size] = cand[order]
    return D, ids
