"""Official-identical scoring on the shared official ground truth with generated rankings.

Each protocol is checked against an independent implementation written here (set-based, step-by-step PR-curve
integration), on the protocols' edge cases, and on the official printed precision.
"""

from __future__ import annotations

import io
import pickle
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import shared_path

from retrieval.evaluation.copydays import score_copydays
from retrieval.evaluation.holidays import load_holidays_gt, parse_holidays_results, score_holidays
from retrieval.evaluation.oxford import compute_ap, format_ap, load_oxford_gt, score_oxford
from retrieval.evaluation.recall import recall_at_r
from retrieval.evaluation.revisited import RestrictedUnpickler, evaluate_revisited, load_revisited_gnd
from retrieval.evaluation.ukb import ukb_score


def pr_integral(ranked, positives, junk=()):
    """Independent AP: walk the list, integrate precision over recall with trapezoids (float64)."""
    positives, junk = set(positives), set(junk)
    ap, tp, j, old_r, old_p = 0.0, 0, 0, 0.0, 1.0
    for name in ranked:
        if name in junk:
            continue
        tp += name in positives
        r, p = tp / len(positives), tp / (j + 1)
        ap += (r - old_r) * (old_p + p) / 2
        old_r, old_p, j = r, p, j + 1
    return ap


# ---------------------------------------------------------------- Holidays


@pytest.fixture(scope="module")
def holidays_gt():
    return load_holidays_gt(shared_path("holidays", "holidays_images.dat"))


def test_holidays_gt_counts(holidays_gt):
    assert len(holidays_gt.names) == 1491
    assert len(holidays_gt.positives) == 500
    assert sum(len(p) for p in holidays_gt.positives.values()) == 991
    assert all(int(q[:-4]) // 100 == int(p[:-4]) // 100 for q, ps in holidays_gt.positives.items() for p in ps)


def _holidays_lines(gt, rng, n_results=60, with_query=False):
    lines, lists = [], {}
    names = gt.names
    for q in gt.queries:
        pos = sorted(gt.positives[q])
        others = [n for n in rng.choice(names, n_results, replace=False) if n != q and n not in gt.positives[q]]
        ranked = others + pos
        ranked = [ranked[i] for i in rng.permutation(len(ranked))]
        if with_query:
            ranked.insert(int(rng.integers(0, len(ranked))), q)
        lists[q] = ranked
        pairs = [f"{i} {n}" for i, n in enumerate(ranked)]
        pairs = [pairs[i] for i in rng.permutation(len(pairs))]  # the official tool sorts by rank
        lines.append(" ".join([q] + pairs))
    return lines, lists


def test_holidays_matches_independent(holidays_gt):
    rng = np.random.default_rng(1)
    lines, lists = _holidays_lines(holidays_gt, rng, with_query=True)
    score = score_holidays(parse_holidays_results(lines), holidays_gt)
    oracle = np.mean([pr_integral([n for n in lists[q] if n != q], holidays_gt.positives[q]) for q in lists])
    assert score.mAP == pytest.approx(oracle, abs=1e-12)
    assert re.fullmatch(r"mAP for res\.txt: \d\.\d{5}", score.format("res.txt"))
    assert score.format("res.txt") == f"mAP for res.txt: {oracle:.5f}"
    # query inside its own list: identical to the list without it
    no_q = [" ".join([q] + [f"{i} {n}" for i, n in enumerate(x for x in lists[q] if x != q)]) for q in lists]
    assert score_holidays(parse_holidays_results(no_q), holidays_gt).mAP == pytest.approx(score.mAP, abs=1e-15)


def test_holidays_edge_cases(holidays_gt):
    q = "100000.jpg"
    pos = sorted(holidays_gt.positives[q])  # 100001, 100002
    assert pos == ["100001.jpg", "100002.jpg"]
    # ranks as given: gaps are kept (positive at rank 5 -> precision 1/6 there)
    s = score_holidays(parse_holidays_results([f"{q} 0 100001.jpg 5 100002.jpg"]), holidays_gt)
    assert s.per_query[q] == pytest.approx(0.5 + (1 / 5 + 2 / 6) / 4)
    assert s.missing and len(s.missing) == 499
    # query at rank 0 shifts the rest
    s2 = score_holidays(parse_holidays_results([f"{q} 0 {q} 1 100001.jpg 2 100002.jpg"]), holidays_gt)
    assert s2.per_query[q] == 1.0
    # list shorter than the number of positives
    s3 = score_holidays(parse_holidays_results([f"{q} 0 100001.jpg"]), holidays_gt)
    assert s3.per_query[q] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not in Holidays"):
        score_holidays(parse_holidays_results([f"{q} 0 999999.jpg"]), holidays_gt)
    with pytest.raises(ValueError, match="unknown query"):
        score_holidays(parse_holidays_results(["100001.jpg 0 100002.jpg"]), holidays_gt)
    with pytest.raises(ValueError, match="twice"):
        score_holidays(parse_holidays_results([f"{q} 0 100001.jpg 1 100001.jpg"]), holidays_gt)
    with pytest.raises(ValueError, match="two result lines"):
        score_holidays(parse_holidays_results([f"{q} 0 100001.jpg", f"{q} 0 100001.jpg"]), holidays_gt)
    with pytest.raises(ValueError, match="odd number"):
        parse_holidays_results([f"{q} 0"])


# ---------------------------------------------------------------- Oxford


@pytest.fixture(scope="module")
def oxford():
    gt = load_oxford_gt(shared_path("oxford5k", "gt_files_170407"))
    rgt = load_revisited_gnd(shared_path("revisited", "gnd_roxford5k.pkl"))
    return gt, sorted(set(rgt.imlist) | set(rgt.qimlist))


CPP_AP = r"""
#include <cstdio>
#include <set>
#include <string>
#include <vector>
#include <iostream>
// Written for this test from the arithmetic described in compute_ap.cpp: float state, double step terms.
int main() {
  int npos, njunk, n; std::cin >> npos >> njunk >> n;
  std::set<std::string> pos, junk; std::vector<std::string> ranked; std::string s;
  for (int i = 0; i < npos; ++i) { std::cin >> s; pos.insert(s); }
  for (int i = 0; i < njunk; ++i) { std::cin >> s; junk.insert(s); }
  for (int i = 0; i < n; ++i) { std::cin >> s; ranked.push_back(s); }
  float old_recall = 0.0, old_precision = 1.0, ap = 0.0; size_t hits = 0, j = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (junk.count(ranked[i])) continue;
    if (pos.count(ranked[i])) hits++;
    float recall = hits / (float)pos.size();
    float precision = hits / (j + 1.0);
    ap += (recall - old_recall) * ((old_precision + precision) / 2.0);
    old_recall = recall; old_precision = precision; j++;
  }
  printf("%.9g\n", ap); std::cout << ap << std::endl;
}
"""


def test_oxford_gt_counts(oxford):
    gt, database = oxford
    assert len(gt) == 55 and len(database) == 5063
    names = set(database)
    for q in gt.values():
        assert q.image in names and q.positives <= names and q.junk <= names
        assert q.box[2] > q.box[0] and q.box[3] > q.box[1]


def test_oxford_matches_independent(oxford):
    gt, database = oxford
    rng = np.random.default_rng(2)
    rankings = {q: [database[i] for i in rng.permutation(len(database))] for q in gt}
    # bring positives closer to the top so APs are not all tiny
    for q, g in gt.items():
        pos = [n for n in rankings[q] if n in g.positives]
        rest = [n for n in rankings[q] if n not in g.positives]
        k = len(pos) // 2
        rankings[q] = rest[:20] + pos[:k] + rest[20:200] + pos[k:] + rest[200:]
    score = score_oxford(rankings, gt, database=database)
    oracle = [pr_integral(rankings[q], g.positives, g.junk) for q, g in gt.items()]
    assert np.allclose(list(score.per_query.values()), oracle, atol=2e-6)  # float32 state
    assert score.mAP == pytest.approx(np.mean(oracle), abs=2e-6)
    assert re.search(r"^mAP: \d\.\d{6}$", score.format(), re.M)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed: C++ float-arithmetic cross-check skipped")
def test_oxford_float_arithmetic_matches_cpp(oxford, tmp_path):
    gt, database = oxford
    src = tmp_path / "ap.cpp"
    src.write_text(CPP_AP)
    exe = tmp_path / "ap"
    subprocess.run(["g++", "-O0", "-o", str(exe), str(src)], check=True, timeout=60)
    rng = np.random.default_rng(3)
    for q in list(gt)[:6]:
        g = gt[q]
        ranked = [database[i] for i in rng.permutation(len(database))][:3000]
        inp = f"{len(g.positives)} {len(g.junk)} {len(ranked)}\n" + " ".join(sorted(g.positives)) + "\n" + \
            " ".join(sorted(g.junk)) + "\n" + " ".join(ranked) + "\n"
        out = subprocess.run([str(exe)], input=inp, capture_output=True, text=True, check=True, timeout=30).stdout
        exact, printed = out.split()
        ours = compute_ap(g.positives, g.junk, ranked)
        assert ours == np.float32(float(exact))  # bit-identical float
        assert format_ap(ours) == printed  # cout's default precision


def test_oxford_edge_cases(oxford):
    gt, database = oxford
    q = "all_souls_1"
    g = gt[q]
    pos = sorted(g.positives)
    others = [n for n in database if n not in g.positives and n not in g.junk]
    base = pos[:3] + others[:10] + pos[3:] + others[10:]
    rankings = {k: base for k in gt}
    ap = score_oxford(rankings, gt).per_query[q]
    junk_first = {k: sorted(g.junk) + base for k in gt}
    assert score_oxford(junk_first, gt).per_query[q] == ap  # junk ranked first: AP unchanged
    assert ap == pytest.approx(pr_integral(base, g.positives), abs=2e-6)
    short = {k: pos[:2] for k in gt}  # shorter than the number of positives
    assert score_oxford(short, gt).per_query[q] == pytest.approx(2 / len(pos), abs=1e-6)
    with pytest.raises(ValueError, match="unknown image"):
        score_oxford({k: base[:5] + ["not_an_image"] for k in gt}, gt, database=database)
    with pytest.raises(ValueError, match="twice"):
        score_oxford({k: base[:5] + base[:1] for k in gt}, gt)
    with pytest.raises(ValueError, match="no ranked list"):
        score_oxford({q: base}, gt)
    # names with .jpg are the same images
    assert score_oxford({k: [n + ".jpg" for n in base] for k in gt}, gt).per_query[q] == ap


# ---------------------------------------------------------------- Revisited


@pytest.fixture(scope="module")
def roxford():
    return load_revisited_gnd(shared_path("revisited", "gnd_roxford5k.pkl"))


def oracle_revisited(ranks, gt, setup):
    aps, prs = [], []
    for i, g in enumerate(gt.gnd):
        easy, hard, junk = set(g["easy"].tolist()), set(g["hard"].tolist()), set(g["junk"].tolist())
        ok, jk = {"easy": (easy, junk | hard), "medium": (easy | hard, junk), "hard": (hard, junk | easy)}[setup]
        if not ok:
            continue
        col = ranks[:, i].tolist()
        aps.append(pr_integral(col, ok, jk))
        kept = [c for c in col if c not in jk]
        found = [r + 1 for r, c in enumerate(kept) if c in ok]
        row = []
        for k in (1, 5, 10):
            kq = min(max(found), k) if found else k
            row.append(sum(1 for f in found if f <= kq) / kq if found else 0.0)
        prs.append(row)
    return float(np.mean(aps)), np.mean(prs, axis=0), len(aps)


def test_revisited_matches_independent(roxford):
    gt = roxford
    assert len(gt.imlist) == 4993 and len(gt.qimlist) == 70
    rng = np.random.default_rng(4)
    nd, nq = len(gt.imlist), len(gt.qimlist)
    ranks = np.empty((nd, nq), dtype=np.int64)
    for i, g in enumerate(gt.gnd):  # half the positives near the top, the rest random
        perm = rng.permutation(nd)
        good = np.concatenate([g["easy"], g["hard"]])[::2]
        ranks[:, i] = np.concatenate([good, perm[~np.isin(perm, good)]])
    score = evaluate_revisited(ranks, gt)
    for s in ("easy", "medium", "hard"):
        m, pr, n = oracle_revisited(ranks, gt, s)
        assert score.setups[s]["mAP"] == pytest.approx(m, abs=1e-12)
        assert [score.setups[s][f"mP@{k}"] for k in (1, 5, 10)] == pytest.approx(pr.tolist(), abs=1e-12)
        assert int(np.count_nonzero(~np.isnan(score.setups[s]["aps"]))) == n
    # two roxford queries have no easy positive: skipped from the easy average
    assert np.isnan(score.setups["easy"]["aps"]).sum() == 2
    text = score.format()
    assert re.match(r">> roxford5k: mAP E: \d+\.\d{1,2}, M: \d+\.\d{1,2}, H: \d+\.\d{1,2}", text)
    js = score.to_json()
    assert set(js) >= {"protocol", "mAP", "per_query", "easy", "medium", "hard"}
    assert set(js["hard"]) >= {"mAP", "mP@1", "mP@5", "mP@10"}


def test_revisited_edge_cases(roxford):
    gt = roxford
    nd, nq = len(gt.imlist), len(gt.qimlist)
    rng = np.random.default_rng(5)
    ranks = np.stack([rng.permutation(nd) for _ in range(nq)], axis=1)
    # query with no positives in the hard setup: skipped
    gt2 = type(gt)(name=gt.name, imlist=gt.imlist, qimlist=gt.qimlist, gnd=[dict(g) for g in gt.gnd])
    gt2.gnd[0]["hard"] = np.empty(0, dtype=np.int64)
    s = evaluate_revisited(ranks, gt2)
    assert np.isnan(s.setups["hard"]["aps"][0])
    assert s.setups["hard"]["mAP"] == pytest.approx(np.nanmean(s.setups["hard"]["aps"]), abs=1e-12)
    assert s.to_json()["hard"]["per_query"][gt.qimlist[0]] is None
    # junk ranked first changes nothing in the medium setup
    col = ranks[:, 1]
    junk = gt.gnd[1]["junk"]
    r2 = ranks.copy()
    r2[:, 1] = np.concatenate([junk, col[~np.isin(col, junk)]])
    a = evaluate_revisited(ranks, gt).setups["medium"]["aps"][1]
    # reorder so the non-junk order is the same
    r3 = ranks.copy()
    r3[:, 1] = np.concatenate([col[~np.isin(col, junk)], junk])
    assert evaluate_revisited(r2, gt).setups["medium"]["aps"][1] == pytest.approx(
        evaluate_revisited(r3, gt).setups["medium"]["aps"][1], abs=1e-15)
    assert 0 <= a <= 1
    # short lists (fewer rows than positives): missing positives count as not retrieved
    short = ranks[:3]
    ss = evaluate_revisited(short, gt)
    m, _, _ = oracle_revisited(short, gt, "medium")
    assert ss.setups["medium"]["mAP"] == pytest.approx(m, abs=1e-12)
    bad = ranks.copy()
    bad[0, 0] = nd + 7
    with pytest.raises(ValueError, match="not a database index"):
        evaluate_revisited(bad, gt)
    dup = ranks.copy()
    dup[1, 3] = dup[0, 3]
    with pytest.raises(ValueError, match="twice"):
        evaluate_revisited(dup, gt)
    with pytest.raises(ValueError, match="shape"):
        evaluate_revisited(ranks[:, :5], gt)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_restricted_unpickler_refuses_globals(tmp_path):
    blob = pickle.dumps({"gnd": [_Evil()], "imlist": [], "qimlist": ["q"]})
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        RestrictedUnpickler(io.BytesIO(blob)).load()
    p = tmp_path / "gnd_evil.pkl"
    p.write_bytes(blob)
    with pytest.raises(ValueError, match="not a revisitop"):
        load_revisited_gnd(p)
    # numpy arrays are allowed
    arr = RestrictedUnpickler(io.BytesIO(pickle.dumps({"a": np.arange(3)}))).load()["a"]
    assert arr.tolist() == [0, 1, 2]


# ---------------------------------------------------------------- UKB, recall@R, Copydays


def test_ukb_score_hand_computed():
    ranked = np.array([[0, 1, 2, 3], [1, 0, 9, 2], [2, 5, 6, 7], [-1, -1, -1, -1]])
    score, per = ukb_score(ranked)
    assert per.tolist() == [4, 3, 1, 0]
    assert score == pytest.approx(2.0)
    with pytest.raises(ValueError, match="twice"):
        ukb_score(np.array([[0, 0, 1, 2]]))
    with pytest.raises(ValueError, match="columns"):
        ukb_score(np.array([[0, 1]]))


def test_recall_at_r():
    ids = np.array([[5, 1, 2], [0, 7, 3], [9, 8, -1]])
    assert recall_at_r(ids, [5, 7, 4], rs=(1, 2, 100)) == {1: pytest.approx(1 / 3), 2: pytest.approx(2 / 3),
                                                          100: pytest.approx(2 / 3)}
    with pytest.raises(ValueError, match="rows"):
        recall_at_r(ids, [1, 2])


def test_copydays_per_family():
    originals = ["original/200000.jpg", "original/200100.jpg"]
    rankings = {
        "crops/50/200000.jpg": ["original/200000.jpg", "d1.jpg"],          # AP 1
        "crops/50/200100.jpg": ["d1.jpg", "original/200100.jpg"],          # AP 1/4
        "strong/200001.jpg": ["d1.jpg", "d2.jpg", "original/200000.jpg"],  # AP (0 + 1/3)/2
    }
    out = score_copydays(rankings, originals, database={"d1.jpg", "d2.jpg"})
    assert out["per_family"]["crops/50"] == pytest.approx((1 + 0.25) / 2)
    assert out["per_family"]["strong"] == pytest.approx(1 / 6)
    assert out["mAP"] == pytest.approx(((1 + 0.25) / 2 + 1 / 6) / 2)
    with pytest.raises(ValueError, match="unknown image"):
        score_copydays({"strong/200001.jpg": ["zz.jpg"]}, originals, database={"d1.jpg"})
