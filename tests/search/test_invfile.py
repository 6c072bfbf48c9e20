"""Inverted-file scores == dense brute force of Zhu et al. 2013, eq. 1, 8-11 (to 1e-9; delta2 to 1e-6, see below), idf,
add/remove, persistence."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from retrieval.search.dissimilarities import dissimilarity, idf_weights
from retrieval.search.invfile import InvertedFile, histogram_rows


def dense(rows, k, f32=True):
    # the inverted file stores term frequencies as float32 (8 bytes per posting): the oracle uses the same values
    H = np.zeros((len(rows), k))
    for i, (w, tf) in enumerate(rows):
        H[i, w] = tf.astype(np.float32) if f32 else tf
    return H


def random_images(rng, n, k, soft):
    items = []
    for _ in range(n):
        m = int(rng.integers(0, 25))
        if soft:
            # soft assignment: each feature to 3 words with weights summing to 1 (Philbin et al. 2008)
            words = rng.integers(0, k, (m, 3))
            w = rng.random((m, 3)) + 0.01
            w /= w.sum(1, keepdims=True)
            items.append((words.ravel(), w.ravel()))
        else:
            # Zipf-like skew so that some words are shared by most images
            items.append(np.minimum(rng.zipf(1.6, m) - 1, k - 1))
    return items


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), soft=st.booleans(), idf=st.booleans(),
       method=st.sampled_from(["l1", "l2", "delta1", "delta2"]), alpha=st.sampled_from([0.1, 0.5, 1.0, 3.0]))
@example(seed=0, soft=False, idf=True, method="delta2", alpha=0.1)  # a cancellation case, relative error 1.1e-8
@example(seed=36038099, soft=False, idf=False, method="l2", alpha=0.5)   # an image equal to the query: 2.1e-8 for 0
def test_scores_equal_dense(seed, soft, idf, method, alpha):
    rng = np.random.default_rng(seed)
    k, n = 40, int(rng.integers(1, 30))
    items = random_images(rng, n, k, soft)
    inv = InvertedFile(k, idf=idf).add(np.arange(n) * 3 + 7, items)
    rows = histogram_rows(items, k)
    H = dense(rows, k)
    weights = idf_weights((H > 0).sum(0), n) if idf else np.ones(k)
    Hw = H * weights
    q = random_images(rng, 1, k, soft)[0]
    qd = dense(histogram_rows([q], k), k, f32=False)[0] * weights
    s, _ = inv.scores(q, method=method, alpha=alpha)
    # eq. 10 (delta2) takes the square root of |Q|^2 - 2 Q.m + |m|^2, a difference that nearly cancels when the
    # query is close to an image's histogram: summing the same terms in another order (postings vs dense rows)
    # then moves the result by ~eps * |Q|^2 / sqrt(...), up to ~1e-8 relative. l2 is sqrt(2 - 2 Qh.Th): for an
    # image whose histogram equals the query's the argument is a few eps instead of 0, and its root a few
    # sqrt(eps) = 1.5e-8 in absolute terms. l1 and delta1 take no root of a difference.
    rtol, atol = {"delta2": (1e-6, 1e-6), "l2": (1e-9, 1e-7)}.get(method, (1e-9, 1e-9))
    np.testing.assert_allclose(s, dissimilarity(qd, Hw, method, alpha), rtol=rtol, atol=atol)
    np.testing.assert_allclose(inv.idf_, weights, atol=1e-12)
    np.testing.assert_allclose(inv.norm1_, Hw.sum(1), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(inv.norm2_, np.linalg.norm(Hw, axis=1), rtol=1e-6, atol=1e-9)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), method=st.sampled_from(["l1", "l2", "delta1", "delta2"]))
def test_incremental_add_remove_equals_fresh_build(seed, method):
    rng = np.random.default_rng(seed)
    k, n = 30, 24
    items = random_images(rng, n, k, soft=False)
    ids = rng.permutation(1000)[:n]
    inv = InvertedFile(k)
    inv.add(ids[:10], items[:10])
    inv.search(items[0], 3)                      # forces a commit between the two adds
    inv.add(ids[10:], items[10:])
    gone = ids[rng.random(n) < 0.3]
    assert inv.remove(np.concatenate([gone, [10_000]])) == len(gone)
    keep = ~np.isin(ids, gone)
    fresh = InvertedFile(k).add(ids[keep], [it for it, kp in zip(items, keep, strict=True) if kp])
    q = items[int(rng.integers(n))]
    d1, i1 = inv.search(q, 5, method=method)
    d2, i2 = fresh.search(q, 5, method=method)
    np.testing.assert_allclose(d1, d2, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(i1, i2)


def test_search_padding_sparse_input_and_persistence(tmp_path):
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    items = random_images(rng, 5, 12, soft=True)
    inv = InvertedFile(12).add([5, 6, 7, 8, 9], items)
    X = sp.csr_matrix(dense(histogram_rows(items, 12), 12))
    D, ids = inv.search(X[:2], 8, method="l2")
    assert D.shape == (2, 8) and ids.shape == (2, 8)
    assert (ids[:, 5:] == -1).all() and np.isinf(D[:, 5:]).all()
    assert ids[0, 0] == 5 and ids[1, 0] == 6 and D[0, 0] == pytest.approx(0.0, abs=1e-7)
    assert np.all(np.diff(D[:, :5], axis=1) >= 0)
    inv.save(tmp_path / "inv")
    back = InvertedFile.load(tmp_path / "inv")
    assert isinstance(back.postings_ids_, np.memmap)
    assert back.bytes_per_posting == 8 and back.n_postings == inv.n_postings
    for m in ("l1", "delta1", "delta2"):
        np.testing.assert_array_equal(back.search(X, 3, method=m)[1], inv.search(X, 3, method=m)[1])
    back.add([100], [np.array([1, 2, 3])])       # adding to a memory-mapped index copies it
    back.remove([5])
    assert back.ntotal == 5 and sorted(back.ids_.tolist()) == [6, 7, 8, 9, 100]


def test_bad_input_messages():
    inv = InvertedFile(10)
    with pytest.raises(ValueError, match=r"in \[0, 10\)"):
        inv.add([1], [np.array([3, 10])])
    with pytest.raises(ValueError, match="duplicates"):
        inv.add([1, 1], [np.array([1]), np.array([2])])
    inv.add([1], [np.array([1])])
    with pytest.raises(ValueError, match="already indexed"):
        inv.add([1], [np.array([2])])
    with pytest.raises(ValueError, match="'method' parameter"):
        inv.search(np.array([1]), 1, method="cosine")
    with pytest.raises(ValueError, match="'n_words' parameter"):
        InvertedFile(0)
    with pytest.raises(FileNotFoundError):
        InvertedFile.load("/nonexistent/inv")
