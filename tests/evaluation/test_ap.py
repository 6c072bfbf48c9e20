"""Trapezoidal AP (official form) and the minibench-format groups scorer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import shared_path
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.evaluation import average_precision, load_groups_spec, precision_at_k, score_groups


def oracle_ap(ranked, positives, junk=()):
    """Independent form: integrate the PR curve point by point (compute_ap.cpp's loop), numpy arrays."""
    positives, junk = set(positives), set(junk) - set(positives)
    kept = np.array([r in positives for r in ranked if r not in junk], dtype=float)
    if kept.size == 0:
        return 0.0
    tp = np.cumsum(kept)
    recall = tp / len(positives)
    precision = tp / np.arange(1, kept.size + 1)
    old_r = np.concatenate([[0.0], recall[:-1]])
    old_p = np.concatenate([[1.0], precision[:-1]])
    return float(np.sum((recall - old_r) * (old_p + precision) / 2.0))


def test_hand_computed():
    # a at rank 0: (1 + 1)/2 * 1/2 ; b at rank 2 with 1 earlier tp: (1/2 + 2/3)/2 * 1/2
    assert average_precision(["a", "x", "b"], {"a", "b"}) == pytest.approx(0.5 + (0.5 + 2 / 3) / 4)
    assert average_precision(["a", "b", "x"], {"a", "b"}) == 1.0
    # positive never retrieved: half the area missing
    assert average_precision(["a", "x"], {"a", "b"}) == pytest.approx(0.5)
    assert average_precision(["x", "y"], {"a"}) == 0.0


def test_junk_ignored_and_errors():
    base = average_precision(["a", "x", "b"], {"a", "b"})
    assert average_precision(["j1", "a", "j2", "x", "b"], {"a", "b"}, junk={"j1", "j2"}) == base
    with pytest.raises(ValueError, match="twice"):
        average_precision(["a", "x", "a"], {"a"})
    with pytest.raises(ValueError, match="positive"):
        average_precision(["a"], set())


def test_precision_at_k_revisitop_form():
    # positives at 1-based ranks 1 and 3: P@1 = 1, P@5 -> kq = min(3, 5) = 3 -> 2/3
    ranked = ["a", "x", "b", "y", "z"]
    assert precision_at_k(ranked, {"a", "b"}, k=1) == 1.0
    assert precision_at_k(ranked, {"a", "b"}, k=5) == pytest.approx(2 / 3)
    assert precision_at_k(["x"], {"a"}, k=5) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.permutations(list(range(12))), st.integers(1, 6), st.integers(0, 3), st.integers(4, 12))
def test_matches_oracle(perm, n_pos, n_junk, length):
    positives = set(range(n_pos))
    junk = set(range(n_pos, n_pos + n_junk))
    ranked = list(perm)[:length]
    ours = average_precision(ranked, positives, junk)
    assert ours == pytest.approx(oracle_ap(ranked, positives, junk), abs=1e-12)
    assert 0.0 <= ours <= 1.0
    # moving junk to the front never changes AP
    front = [r for r in ranked if r in junk] + [r for r in ranked if r not in junk]
    assert average_precision(front, positives, junk) == pytest.approx(ours, abs=1e-12)


def _rankings(bench, rng, *, with_query=False):
    out = {}
    for q in bench.queries:
        names = [n for n in bench.images if n != q or with_query]
        out[q] = [names[i] for i in rng.permutation(len(names))]
    return out


def test_groups_on_minibench():
    spec = shared_path("minibench.json")
    bench = load_groups_spec(spec)
    raw = json.loads(spec.read_text())
    assert len(bench.queries) == len(raw["groups"]) == 38
    assert len(bench.images) == sum(len(g["images"]) for g in raw["groups"]) + len(raw["distractors"])
    rng = np.random.default_rng(0)
    # perfect ranking
    perfect = {q: sorted(bench.positives[q]) + [n for n in bench.images if n not in bench.positives[q] and n != q]
               for q in bench.queries}
    assert score_groups(bench, perfect).mAP == 1.0
    rankings = _rankings(bench, rng)
    s = score_groups(bench, rankings)
    expected = [oracle_ap(rankings[q], bench.positives[q]) for q in bench.queries]
    assert s.mAP == pytest.approx(float(np.mean(expected)), abs=1e-12)
    # the query inside its own list is skipped (ranks after it move up)
    with_q = {q: r[:3] + [q] + r[3:] for q, r in rankings.items()}
    assert score_groups(bench, with_q).mAP == pytest.approx(s.mAP, abs=1e-15)
    # absolute paths inside the root are accepted
    absolute = {str(bench.path(q)): [str(bench.path(n)) for n in r] for q, r in rankings.items()}
    assert score_groups(bench, absolute).mAP == s.mAP
    # short lists: positives not returned count as missed
    short = {q: r[:2] for q, r in rankings.items()}
    assert score_groups(bench, short).mAP == pytest.approx(
        float(np.mean([oracle_ap(short[q], bench.positives[q]) for q in bench.queries])), abs=1e-12)


def test_groups_errors(tmp_path):
    spec = tmp_path / "b.json"
    spec.write_text(json.dumps({"groups": [{"name": "g", "images": ["q.jpg", "p.jpg"]}], "distractors": ["d.jpg"]}))
    bench = load_groups_spec(spec)
    assert score_groups(bench, {"q.jpg": ["d.jpg", "p.jpg"]}).mAP == pytest.approx((0 + 1 / 2) / 2)  # p0 = 0/1, p1 = 1/2
    with pytest.raises(ValueError, match="twice"):
        score_groups(bench, {"q.jpg": ["p.jpg", "p.jpg"]})
    with pytest.raises(ValueError, match="unknown image"):
        score_groups(bench, {"q.jpg": ["p.jpg", "zzz.jpg"]})
    with pytest.raises(ValueError, match="no ranked list"):
        score_groups(bench, {})
    assert bench.missing_files() and "missing" in bench.missing_files()[0]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"groups": [{"images": ["q.jpg"]}]}))
    with pytest.raises(ValueError, match=">= 2"):
        load_groups_spec(bad)
    bad.write_text(json.dumps({"groups": [{"images": ["q.jpg", "../x.jpg"]}]}))
    with pytest.raises(ValueError, match="relative"):
        load_groups_spec(bad)
