"""The probed ratio test (retrieval.rerank.cells): every match it returns is a match of the exact test, probing every
cell returns exactly the exact test's matches, on real pairs it keeps nearly all of them, the verifier with cells
gives the verdict of the exact one on true and unrelated real pairs, and a model keeps its cells."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_path

from retrieval.features import root_sift
from retrieval.rerank.cells import MatchCells, probed_matches
from retrieval.rerank.matching import tentative_matches
from retrieval.rerank.verifier import Verifier

HOMOGR = ["adam", "boat", "BruggeTower", "LePoint1", "graf", "Eiffel"]


def pairs_of(features_of, names):
    d = shared_path("homogr")
    out = []
    for name in names:
        a, b = (next(d.glob(f"{name}{s}.*")) for s in "AB")
        out.append((features_of(a, detector="hesaff", max_side=1024), features_of(b, detector="hesaff",
                                                                                    max_side=1024)))
    return out


@pytest.fixture(scope="module")
def real_pairs(features_of):
    return pairs_of(features_of, HOMOGR)


@pytest.fixture(scope="module")
def cells(real_pairs):
    X = np.concatenate([root_sift(f.descriptors) for pair in real_pairs for f in pair]).astype(np.float32)
    return MatchCells.fit(X, k=128, seed=0)


def matches_with(cells, qa, db, ratio=0.85, bound=True):
    probes, b = cells.place_query(qa)
    perm, starts = cells.place_database(db)
    return probed_matches(qa, probes, db, perm, starts, ratio=ratio, query_bound=b if bound else None)


def as_set(m):
    return set(map(tuple, np.asarray(m).tolist()))


@pytest.mark.parametrize("seed", range(5))
def test_matches_are_the_exact_tests_and_all_of_them_when_every_cell_is_probed(seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, 16)).astype(np.float32) * 4
    a = (centres[rng.integers(0, 20, 300)] + rng.normal(size=(300, 16))).astype(np.float32)
    b = np.concatenate([a[rng.choice(300, 150, replace=False)] + 0.2 * rng.normal(size=(150, 16)),
                        centres[rng.integers(0, 20, 200)] + rng.normal(size=(200, 16))]).astype(np.float32)
    exact = as_set(tentative_matches(a, b, ratio=0.8))
    assert len(exact) > 50
    X = np.concatenate([a, b])
    for probes in (1, 3):
        cells = MatchCells.fit(X, k=32, seed=seed, probes=probes)
        got = as_set(matches_with(cells, a, b, ratio=0.8))
        assert got <= exact
        assert len(got) > 0
        # the bound only spares confirmations: the same matches as confirming every one
        assert got == as_set(matches_with(cells, a, b, ratio=0.8, bound=False))
    everything = MatchCells.fit(X, k=32, seed=seed, probes=32)
    assert as_set(matches_with(everything, a, b, ratio=0.8)) == exact


def test_real_pairs_keep_nearly_every_exact_match(real_pairs, cells):
    kept = total = 0
    for fa, fb in real_pairs:
        a, b = root_sift(fa.descriptors).astype(np.float32), root_sift(fb.descriptors).astype(np.float32)
        exact = as_set(tentative_matches(a, b, ratio=0.85))
        got = as_set(matches_with(cells, a, b))
        assert got <= exact
        kept, total = kept + len(got), total + len(exact)
    assert total > 1000
    assert kept / total >= 0.9          # measured 0.95 with 128 cells and 8 probes


def test_the_verifier_with_cells_gives_the_exact_verdicts(real_pairs, cells):
    exact, fast = Verifier(), Verifier(cells=cells)
    box = (0.0, 0.0, 1e5, 1e5)
    unrelated = [(real_pairs[i][0], real_pairs[j][1]) for i in range(len(real_pairs))
                 for j in range(len(real_pairs)) if i != j]
    for fa, fb in real_pairs + unrelated:
        e = exact.check(exact.described(fa), exact.described(fb), box)
        f = fast.check(fast.described(fa), fast.described(fb), box)
        assert f.verified == e.verified
        assert as_set(f.matches) <= as_set(e.matches)
    assert sum(exact.check(exact.described(a), exact.described(b), box).verified for a, b in real_pairs) >= 5


def test_cells_save_and_load(tmp_path, cells):
    cells.save(tmp_path / "c.npz")
    back = MatchCells.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(back.centres, cells.centres)
    assert back.probes == cells.probes


def test_few_training_rows_give_fewer_cells():
    X = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    assert len(MatchCells.fit(X, k=256).centres) == 10


@pytest.mark.parametrize("p", [1, 3, 8, 16])
def test_the_probed_cells_are_the_nearest_in_order(p):
    from retrieval.rerank._cells_kernels import smallest_columns

    rng = np.random.default_rng(p)
    D = rng.integers(0, 20, size=(200, 16)).astype(np.float32)          # many ties: the lowest column first
    np.testing.assert_array_equal(smallest_columns(D, p), np.argsort(D, axis=1, kind="stable")[:, :p])


def test_pairs_of_small_images_are_matched_exactly(real_pairs, cells):
    from retrieval.features.types import LocalFeatures
    from retrieval.rerank.cells import EXACT_BELOW

    fa, fb = real_pairs[0]
    n = int(EXACT_BELOW ** 0.5) // 2

    def head(f):
        return LocalFeatures(f.frames[:n], f.descriptors[:n], f.image_size, f.config)

    exact, fast = Verifier(), Verifier(cells=cells)
    box = (0.0, 0.0, 1e5, 1e5)
    e = exact.check(exact.described(head(fa)), exact.described(head(fb)), box)
    f = fast.check(fast.described(head(fa)), fast.described(head(fb)), box)
    assert len(e.matches) > 20
    np.testing.assert_array_equal(f.matches, e.matches)


@pytest.mark.parametrize("seed", range(4))
def test_no_descriptor_of_an_unprobed_cell_is_nearer_than_the_bound(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2000, 12)).astype(np.float32)
    cells = MatchCells.fit(X, k=40, seed=seed, probes=3)
    q, db = X[:300], X[300:]
    probes, bound = cells.place_query(q)
    perm, starts = cells.place_database(db)
    own = np.repeat(np.arange(len(starts) - 1), np.diff(starts))[np.argsort(perm)]   # each database row's cell
    d2 = ((q[:, None, :].astype(np.float64) - db[None, :, :]) ** 2).sum(-1)
    for i in range(len(q)):
        outside = ~np.isin(own, probes[i])
        assert outside.any()
        assert d2[i, outside].min() >= bound[i] * (1 - 1e-4)
    assert np.isfinite(bound).all() and (bound > 0).mean() > 0.5
    everything = MatchCells(cells.centres, probes=40)
    assert np.isinf(everything.place_query(q)[1]).all()


def test_the_same_outcomes_from_several_threads(real_pairs, cells):
    """One verifier shared by threads (its cells are read, never assigned): the probed path gives every thread
    the outcomes of one."""
    fast = Verifier(cells=cells)
    box = (0.0, 0.0, 1e5, 1e5)
    query = fast.described(real_pairs[0][0])
    dbs = {i: f for i, (_, f) in enumerate(real_pairs)} | {len(real_pairs) + i: f for i, (f, _) in
                                                          enumerate(real_pairs)}

    def run(threads):
        out = fast.check_many(query, sorted(dbs) * 3, box, dbs.__getitem__, threads=threads)
        return [(o.verified, o.inliers, o.matches.tobytes()) for o in out]

    one = run(1)
    assert any(v for v, _, _ in one)
    assert run(4) == one


def test_a_query_is_placed_in_the_cells_only_when_a_pair_needs_it(real_pairs, cells, monkeypatch):
    """check_many places an unplaced query once, when some pair is large enough for the probed test: the outcomes
    are those of a query placed beforehand; pairs of small images never place it (no compiled kernel loaded)."""
    from retrieval.features.types import LocalFeatures
    from retrieval.rerank.cells import EXACT_BELOW

    fast = Verifier(cells=cells)
    box = (0.0, 0.0, 1e5, 1e5)
    fa = real_pairs[0][0]
    dbs = dict(enumerate(f for pair in real_pairs for f in pair))
    placed = fast.described(fa)
    unplaced = fast.described(fa, roles=())
    assert placed.probes is not None and unplaced.probes is None
    calls = []
    real_place = MatchCells.place_query
    monkeypatch.setattr(MatchCells, "place_query", lambda self, d: calls.append(len(d)) or real_place(self, d))

    def outcomes(query, features):
        out = fast.check_many(query, sorted(features), box, features.__getitem__, threads=2)
        return [(o.verified, o.inliers, o.matches.tobytes()) for o in out]

    assert outcomes(unplaced, dbs) == outcomes(placed, dbs)
    assert calls == [len(fa)]   # once for the whole list
    n = int(EXACT_BELOW ** 0.5) // 2
    small = {i: LocalFeatures(f.frames[:n], f.descriptors[:n], f.image_size, f.config) for i, f in dbs.items()}
    q_small = fast.described(small[0], roles=())
    calls.clear()
    got = outcomes(q_small, small)
    assert calls == []
    assert got == outcomes(fast.described(small[0]), small)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_an_early_stopped_verification_checks_as_the_whole_one(real_pairs, cells, threads):
    """Verifier.rerank with ``enough`` (the checks streamed through the pool, the query placed in the cells by the
    first pair that needs it) gives each checked hit the outcome of the whole verification, and stops at the
    ``enough``-th verified hit whatever the threads."""
    from retrieval.engine.hits import Hit

    fast = Verifier(cells=cells)
    box = (0.0, 0.0, 1e5, 1e5)
    dbs = dict(enumerate(f for pair in real_pairs for f in pair))
    query_features = real_pairs[0][0]

    def ranked(enough, threads):
        hits = [Hit(id=i, score=1.0 - i / 1000) for i in sorted(dbs)]
        out = fast.rerank(hits, query_features, box, dbs.__getitem__, shortlist=len(hits), threads=threads,
                          enough=enough)
        return [(h.id, h.verified, h.inliers) for h in out]

    whole = ranked(0, 1)
    verified = [i for i, v, _ in whole if v]
    assert len(verified) >= 2
    assert ranked(len(dbs) + 1, threads) == whole          # never reached: every hit checked, the same list
    stopped = ranked(2, threads)
    first_two = sorted(i for i, v, _ in whole if v)[:2]    # the first two verified, in first-stage order
    assert sorted(i for i, v, _ in stopped if v) == first_two
    got = {i: (v, n) for i, v, n in stopped if n is not None}
    assert all(got[i] == (v, n) for i, v, n in whole if i in got)
