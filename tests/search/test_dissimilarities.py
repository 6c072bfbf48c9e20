"""Zhu et al. 2013, Fig. 2 toy example and hand-checked identities of the dense formulas (eq. 1, 4-11)."""

import numpy as np
import pytest

from retrieval.search.dissimilarities import (
    delta1,
    delta1_wbar,
    delta2,
    delta2_w,
    delta_p,
    dissimilarity,
    idf_weights,
    lp_distance,
)
from retrieval.search.invfile import InvertedFile

# words: 0 star, 1 circle, 2..4 background shapes
Q = np.array([1, 1, 0, 0, 0], float)            # the query object: a star and a circle
T1 = np.array([1, 0, 0, 0, 0], float)           # image 1: only the star
T2 = np.array([1, 1, 1, 1, 1], float)           # image 2: star, circle and three background features


def test_fig2_l1():
    d = lp_distance(Q, np.stack([T1, T2]), 1)
    np.testing.assert_allclose(d, [1.0, 1.2], atol=1e-12)


def test_fig2_delta1_infinite_w():
    d = delta_p(Q, np.stack([T1, T2]), np.inf, 1)
    np.testing.assert_allclose(d, [1.0, 0.0], atol=1e-12)


def test_fig2_through_inverted_file():
    inv = InvertedFile(5, idf=False)
    inv.add([1, 2], [np.array([0]), np.array([0, 1, 2, 3, 4])])
    s, _ = inv.scores(np.array([0, 1]), method="l1")
    np.testing.assert_allclose(s, [1.0, 1.2], atol=1e-12)
    # l1 ranks image 1 first (wrong); delta1 with a large weight (w -> inf, here alpha = 10, wbar = 20 by eq. 9)
    # ranks image 2 first (right). With only these two images, alpha = 0.5 gives wbar = 0.5 * 6 / 3 = 1 and
    # delta1 = (1 - 1, 5 - 2): still image 1, as eq. 8 says.
    assert inv.search(np.array([0, 1]), 2, method="l1")[1][0].tolist() == [1, 2]
    d, ids = inv.search(np.array([0, 1]), 2, method="delta1", alpha=10.0)
    assert ids[0].tolist() == [2, 1]
    np.testing.assert_allclose(d[0], [5 - 20 * 2, 1 - 20 * 1])
    d, ids = inv.search(np.array([0, 1]), 2, method="delta1", alpha=0.5)
    np.testing.assert_allclose(d[0], [0.0, 3.0])


def test_eq8_is_eq4_minus_constant():
    rng = np.random.default_rng(0)
    q = rng.integers(0, 3, 20).astype(float)
    T = rng.integers(0, 3, (7, 20)).astype(float)
    w = 2.5
    # eq. 7/8: delta_1(Q, T, w) = w ||Q||_1 + (||T||_1 - (w + 1) ||min(Q, T)||_1)
    np.testing.assert_allclose(delta_p(q, T, w, 1), w * q.sum() + delta1(q, T, w + 1), atol=1e-12)
    # eq. 10 is eq. 7 for p = 2
    qo = np.linalg.norm(np.maximum(q - T, 0), axis=1)
    do = np.linalg.norm(np.maximum(T - q, 0), axis=1)
    np.testing.assert_allclose(delta2(q, T, w), w * qo + do, atol=1e-12)


def test_eq9_eq11_by_hand():
    q = np.array([2.0, 1.0, 0.0])
    T = np.array([[1.0, 1.0, 1.0], [0.0, 3.0, 0.0]])
    # sum ||T_j||_1 = 6, sum ||min||_1 = 2 + 1 = 3  -> wbar = alpha * 2
    assert delta1_wbar(q, T, 0.5) == pytest.approx(1.0)
    # ||T_j - min||_2: [0, 0, 1] -> 1 ; [0, 2, 0] -> 2 ; ||Q - min||_2: [1, 0, 0] -> 1 ; [2, 0, 0] -> 2
    assert delta2_w(q, T, 0.5) == pytest.approx(0.5 * 3 / 3)
    np.testing.assert_allclose(dissimilarity(q, T, "delta1", 0.5), [3 - 2, 3 - 1])


def test_l2_by_hand_and_idf():
    q = np.array([3.0, 4.0])
    T = np.array([[3.0, 4.0], [1.0, 0.0]])
    np.testing.assert_allclose(lp_distance(q, T, 2), [0.0, np.sqrt((0.6 - 1) ** 2 + 0.8 ** 2)])
    np.testing.assert_allclose(idf_weights([1, 4, 0], 4), [np.log(4), 0.0, 0.0])


def test_bad_input():
    with pytest.raises(ValueError, match="non-negative"):
        lp_distance(-Q, T1, 1)
    with pytest.raises(ValueError, match="'p' parameter"):
        lp_distance(Q, T1, 3)
    with pytest.raises(ValueError, match="shape"):
        delta1(Q, np.ones((2, 4)), 1.0)
