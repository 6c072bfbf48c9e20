"""Early stopping of spatial re-ranking: ``search.verify_patience`` (stopped after ``patience`` unverified hits in a
row, the rest left in first-stage order after the failed ones) and ``search.verify_enough`` (stopped once
``enough`` hits verified, the unchecked ones right after the verified, before the failed); the shortlist verified
in its order, the same list whatever the threads; 0 verifies everything."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.engine.hits import Hit
from retrieval.features.types import LocalFeatures
from retrieval.rerank.verification import Verification
from retrieval.rerank.verifier import Outcome, Verifier

# the verdict of each of 12 first-stage hits: verified with these inliers, or 0 = not verified
VERDICTS = [30, 0, 0, 12, 0, 0, 0, 50, 0, 20, 0, 0]


class Scripted(Verifier):
    """A verifier whose pairs verify as VERDICTS says (the geometry is tested elsewhere); counts its checks."""

    def __init__(self, checked):
        super().__init__()
        object.__setattr__(self, "checked", checked)

    def described(self, features, roles=("query", "database")):
        return features

    def database(self, image_id, get_features, cache=None):
        return int(image_id)

    def check(self, query, db, query_box):
        self.checked.append(db)
        n = VERDICTS[db]
        v = Verification(bool(n), n, n, np.zeros(0, bool))
        return Outcome(bool(n), n, (0, 0, 1, 1) if n else None, v, np.zeros((0, 2), np.int64))


def hits():
    return [Hit(id=i, score=1.0 - i / 100) for i in range(len(VERDICTS))]


def query():
    return LocalFeatures(np.zeros((1, 6), np.float32), np.zeros((1, 128), np.uint8), (10, 10), {})


def ranked(patience, threads, enough=0):
    checked = []
    out = Scripted(checked).rerank(hits(), query(), (0, 0, 9, 9), None, shortlist=len(VERDICTS), threads=threads,
                                   patience=patience, enough=enough)
    return [(h.id, h.verified, h.inliers) for h in out], checked


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_verification_stops_after_patience_misses_in_a_row(threads):
    out, checked = ranked(3, threads)
    # hits 4, 5, 6 fail in a row: 7 (50 inliers) and later are left unverified, in first-stage order
    assert [i for i, verified, _ in out if verified] == [0, 3]
    assert [i for i, _, _ in out] == [0, 3, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11]
    assert all(inl is None for i, _, inl in out if i >= 7)
    assert set(range(7)) <= set(checked)


def test_the_same_list_whatever_the_threads():
    for patience in (1, 2, 3, 4, 5):
        lists = {tuple(ranked(patience, t)[0]) for t in (1, 2, 3, 4, 8)}
        assert len(lists) == 1


def test_no_patience_verifies_the_whole_shortlist():
    out, checked = ranked(0, 2)
    assert sorted(checked) == list(range(len(VERDICTS)))
    assert [i for i, verified, _ in out if verified] == [7, 0, 9, 3]
    out4, _ = ranked(4, 1)                      # 4 misses in a row never happen before hit 11
    assert out4 == out


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_verification_stops_once_enough_hits_verified(threads):
    out, checked = ranked(0, threads, enough=3)
    # hits 0, 3, 7 verify (30, 12, 50 inliers): the third is the last checked; 8-11 follow them unchecked, then the
    # hits that failed, each group in first-stage order
    assert [i for i, _, _ in out] == [7, 0, 3, 8, 9, 10, 11, 1, 2, 4, 5, 6]
    assert [i for i, verified, _ in out if verified] == [7, 0, 3]
    assert all(inl is None for i, _, inl in out if i >= 8)
    assert set(range(8)) <= set(checked)
    if threads == 1:                                 # batches of 2: nothing beyond hit 7's batch is checked
        assert sorted(checked) == list(range(8))


def test_enough_with_patience_and_more_than_the_shortlist_holds():
    assert {tuple(ranked(0, t, enough=2)[0]) for t in (1, 2, 3, 4, 8)} == {tuple(ranked(0, 1, enough=2)[0])}
    full, _ = ranked(0, 2)
    assert ranked(0, 2, enough=5)[0] == full         # only 4 hits verify: the whole shortlist is checked
    out, _ = ranked(3, 1, enough=5)                  # patience stops first (hits 4, 5, 6 fail in a row)
    assert out == ranked(3, 1)[0]
