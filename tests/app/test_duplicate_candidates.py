"""The duplicate finder's candidate search through an inverted file over the global codes
(:mod:`retrieval.app.duplicates.candidates`): the same pairs as every code compared when every cell is probed,
planted copies (upright and turned) found through the default probes, the exact search below the size limit."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.app.duplicates.candidates import (
    EXACT_BELOW,
    PROBES,
    CodeCells,
    candidate_pairs,
    cell_count,
    search_cells,
)
from retrieval.app.duplicates.codes import centred


def _world(n: int, clusters: int, seed: int, d: int = 48):
    """Codes (n, 3, d) of photos drawn around ``clusters`` centres (like real photos' codes: groups of similar
    photos), centred and unit-normed."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d)).astype(np.float32)
    base = centres[rng.integers(clusters, size=(n, 3))] + 0.6 * rng.normal(size=(n, 3, d)).astype(np.float32)
    return base, rng


def test_every_cell_probed_gives_the_pairs_of_every_code_compared():
    base, _ = _world(700, 15, 0)
    Q = centred(base)
    C = np.ascontiguousarray(Q[:, 0])
    cells = CodeCells(C, 12)
    exact = candidate_pairs(Q, C, k=6, threshold=-1.0)
    probed = candidate_pairs(Q, C, k=6, threshold=-1.0, cells=cells, probes=12)
    assert len(exact) > 700
    by_pair = {(a, b): (t, r) for a, b, _, t, r in exact}
    assert {(a, b): (t, r) for a, b, _, t, r in probed} == by_pair          # same pairs, turns and ranks
    sims = {(a, b): s for a, b, s, _, _ in exact}
    np.testing.assert_allclose([s for _, _, s, _, _ in probed], [sims[a, b] for a, b, _, _, _ in probed], atol=1e-5)
    assert all(probed[i][2] >= probed[i + 1][2] for i in range(len(probed) - 1))


def test_planted_copies_upright_and_turned_are_found_through_the_default_probes():
    n = 4000
    base, rng = _world(n, 60, 1, d=64)
    originals = rng.choice(n // 2, 120, replace=False)
    copies = n // 2 + np.arange(120)
    turns = np.arange(120) % 3                       # copy c's upright code is its original turned by `turn`
    for o, c, t in zip(originals, copies, turns, strict=True):
        base[c, 0] = base[o, t] + 0.05 * rng.normal(size=base.shape[2])
    Q = centred(base)
    C = np.ascontiguousarray(Q[:, 0])
    cells = CodeCells(C, cell_count(n))
    assert len(cells.centres) == cell_count(n) > PROBES * 10      # most cells are not probed
    found = {(a, b): t for a, b, _, t, _ in candidate_pairs(Q, C, k=5, threshold=-1.0, cells=cells)}
    for o, c, t in zip(originals.tolist(), copies.tolist(), turns.tolist(), strict=True):
        assert found.get((o, c)) == t, (o, c, t, found.get((o, c)))   # o turned by t looks like c


def test_the_inverted_file_only_from_the_size_limit():
    base, _ = _world(300, 5, 2)
    C = np.ascontiguousarray(centred(base)[:, 0])
    assert search_cells(C) is None and EXACT_BELOW > 300
    cells = search_cells(C, exact_below=100)
    assert cells is not None and len(cells.centres) == cell_count(300)
    assert sorted(cells.perm.tolist()) == list(range(300))                   # every code in one cell
    assert cells.starts[0] == 0 and cells.starts[-1] == 300
    for c in range(len(cells.centres)):
        assert (cells.assign[cells.perm[cells.starts[c]:cells.starts[c + 1]]] == c).all()


@pytest.mark.parametrize("n,expected", [(16, 2), (1000, 125), (100_000, 1265), (1_000_000, 4000)])
def test_cell_count(n, expected):
    assert cell_count(n) == expected
