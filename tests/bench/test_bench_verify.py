"""retrieval.bench.verify: pairs by group (toy cases by hand), the trade-off table, the real folders' groups."""

from __future__ import annotations

import numpy as np
from conftest import shared_path

from retrieval.bench.verify import holidays_groups, tradeoff, true_pairs, ukbench_groups, unrelated_pairs


def test_true_and_unrelated_pairs_by_hand():
    g = np.array([7, 7, 8, 9, 9, 9])
    np.testing.assert_array_equal(true_pairs(g), [[0, 1], [3, 4], [3, 5], [4, 5]])
    u = unrelated_pairs(g, 100, random_state=0)  # only 11 exist: all of them
    assert len(u) == 15 - 4 and np.all(g[u[:, 0]] != g[u[:, 1]]) and np.all(u[:, 0] < u[:, 1])
    assert len(np.unique(u, axis=0)) == len(u)
    a, b = unrelated_pairs(g, 5, random_state=1), unrelated_pairs(g, 5, random_state=1)
    np.testing.assert_array_equal(a, b)


def test_tradeoff_by_hand():
    rows = tradeoff([0, 3, 9, 12], [5, 9, 20], [4, 9, 13])
    assert [r["false_verified"] for r in rows] == [2, 2, 0]
    assert [r["true_verified"] for r in rows] == [3, 2, 1]
    assert rows[1]["false_rate"] == 0.5 and rows[2]["true_rate"] == 1 / 3


def test_groups_of_the_real_folders():
    paths, g = ukbench_groups(shared_path("real", "ukbench400"))
    assert len(paths) == 400 and np.array_equal(np.bincount(g), np.full(100, 4))
    paths, g = holidays_groups(shared_path("real", "holidays805"))
    assert len(paths) == 805 and all(p.stem[:4] == str(k) for p, k in zip(paths, g, strict=True))
