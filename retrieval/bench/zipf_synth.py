"""Synthetic bag-of-words data with Zipf-distributed words, for inverted-file benchmarks (Zhu et al. 2013, section 3.3).

Word ``l`` (0-based) has probability ``p_l = (l + 1)^-s / H`` over a vocabulary of ``n_words``. An image has
``words_per_image`` descriptors; the count of word ``l`` in an image is modelled as Poisson with mean
``lambda_l = words_per_image * p_l`` independently per word (the Poisson approximation of the multinomial), so
word ``l`` occurs in an image with probability ``1 - exp(-lambda_l)`` and, when it does, its term frequency is
``1 + Poisson(lambda_l)`` (an approximation of the zero-truncated Poisson). Postings are generated per word
directly in CSR order with image ids ascending, as an inverted file built image by image would hold them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval.core.checks import check_random_state, check_scalar

__all__ = ["zipf_probabilities", "zipf_postings", "zipf_query"]


def zipf_probabilities(n_words: int, s: float = 1.0) -> np.ndarray:
    """``p_l`` of shape (n_words,), float64, summing to one."""
    check_scalar(n_words, "n_words", "zipf_probabilities", low=1)
    p = np.arange(1, n_words + 1, dtype=np.float64) ** (-float(s))
    return p / p.sum()


@njit(cache=True)
def _fill(n_images, occ, lam, counts, seed, indptr, ids, tf):
    np.random.seed(seed)
    stamp = np.full(n_images, -1, dtype=np.int64)
    pos = 0
    for w in range(occ.shape[0]):
        q = occ[w]
        c = counts[w]
        start = pos
        if q > 0.05:
            # selection sampling (Knuth's algorithm S): exactly c ids, ascending, one pass
            got = 0
            for j in range(n_images):
                if np.random.random() * (n_images - j) < c - got:
                    ids[pos] = j
                    pos += 1
                    got += 1
        else:
            got = 0
            while got < c:
                j = np.random.randint(0, n_images)
                if stamp[j] != w:
                    stamp[j] = w
                    ids[pos] = j
                    pos += 1
                    got += 1
            ids[start:pos].sort()
        for p in range(start, pos):
            tf[p] = 1.0 + np.random.poisson(lam[w])
        indptr[w + 1] = pos
    return pos


def zipf_postings(n_images: int, words_per_image: int, n_words: int, *, s: float = 1.0, random_state=None):
    """CSR postings of a synthetic database.

    Returns
    -------
    indptr : ndarray of shape (n_words + 1,), dtype int64
    ids : ndarray of shape (P,), dtype uint32 -- image numbers, ascending within a word
    tf : ndarray of shape (P,), dtype float32
    """
    check_scalar(n_images, "n_images", "zipf_postings", low=1)
    check_scalar(words_per_image, "words_per_image", "zipf_postings", low=1)
    rng = check_random_state(random_state)
    lam = words_per_image * zipf_probabilities(n_words, s)
    occ = -np.expm1(-lam)
    counts = rng.binomial(n_images, occ)
    cap = int(counts.sum())
    ids = np.empty(cap, dtype=np.uint32)
    tf = np.empty(cap, dtype=np.float32)
    indptr = np.zeros(n_words + 1, dtype=np.int64)
    _fill(n_images, occ, lam, counts.astype(np.int64), int(rng.integers(2**31 - 1)), indptr, ids, tf)
    return indptr, ids, tf


def zipf_query(n_distinct: int, n_words: int, *, s: float = 1.0, random_state=None):
    """A query: descriptors' words drawn from the same Zipf law until ``n_distinct`` distinct words occur.

    Returns
    -------
    words : ndarray of shape (m,), dtype int64 -- one entry per descriptor (repetitions give the counts)
    """
    check_scalar(n_distinct, "n_distinct", "zipf_query", low=1, high=n_words)
    rng = check_random_state(random_state)
    cdf = np.cumsum(zipf_probabilities(n_words, s))
    out, seen = [], set()
    while len(seen) < n_distinct:
        batch = np.minimum(np.searchsorted(cdf, rng.random(4 * n_distinct)), n_words - 1)
        for w in batch.tolist():
            out.append(w)
            seen.add(w)
            if len(seen) >= n_distinct:
                break
    return np.asarray(out, dtype=np.int64)
