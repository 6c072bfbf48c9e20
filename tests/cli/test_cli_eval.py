"""`retrieval eval score` on generated result files in the official formats."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import shared_path

from retrieval.cli.main import main
from retrieval.datasets.manifest import load_manifest
from retrieval.evaluation.holidays import load_holidays_gt
from retrieval.evaluation.oxford import load_oxford_gt
from retrieval.evaluation.revisited import load_revisited_gnd


def run(*args):
    res = CliRunner().invoke(main, ["eval", "score", *map(str, args)])
    return res.exit_code, res.output


def test_score_holidays(tmp_path):
    gt_path = shared_path("holidays", "holidays_images.dat")
    gt = load_holidays_gt(gt_path)
    rng = np.random.default_rng(0)
    lines, aps = [], []
    for q in gt.queries:
        pos = sorted(gt.positives[q])
        ranked = [n for n in rng.choice(gt.names, 30, replace=False) if n not in pos and n != q]
        k = int(rng.integers(0, len(ranked)))
        ranked = ranked[:k] + pos + ranked[k:]
        lines.append(" ".join([q] + [f"{i} {n}" for i, n in enumerate(ranked)]))
        # independent: positives contiguous from rank k -> precision (k+i+1)/(k+i+1)... computed directly
        aps.append(sum(((i / (k + i) if k + i else 1.0) + (i + 1) / (k + i + 1)) / 2 / len(pos)
                       for i in range(len(pos))))
    res = tmp_path / "res.txt"
    res.write_text("\n".join(lines) + "\n")
    code, out = run("--protocol", "holidays", res, "--gt", gt_path)
    assert code == 0, out
    assert out.strip() == f"mAP for {res}: {np.mean(aps):.5f}"
    code, out = run("-p", "holidays", res, "--gt", gt_path, "--json")
    js = json.loads(out)
    assert js["protocol"] == "holidays" and len(js["per_query"]) == 500
    assert js["mAP"] == pytest.approx(np.mean(aps), abs=1e-12)
    # unknown image: one-line error, non-zero exit
    res.write_text("100000.jpg 0 nope.jpg\n")
    code, out = run("-p", "holidays", res, "--gt", gt_path)
    assert code != 0 and "not in Holidays" in out and "Traceback" not in out


def test_score_oxford_folder(tmp_path):
    gt_dir = shared_path("oxford5k", "gt_files_170407")
    gt = load_oxford_gt(gt_dir)
    folder = tmp_path / "ranks"
    folder.mkdir()
    for q, g in gt.items():
        # every positive first, then junk: AP 1 exactly
        (folder / f"{q}.txt").write_text("\n".join(sorted(g.positives) + sorted(g.junk)) + "\n")
    code, out = run("-p", "oxford5k", folder, "--gt", gt_dir)
    assert code == 0, out
    lines = out.strip().splitlines()
    assert len(lines) == 56 and lines[0] == "all_souls_1 1" and lines[-1] == "mAP: 1.000000"
    q = "all_souls_1"
    g = gt[q]
    pos = sorted(g.positives)
    negative = next(n[:-4] for n in load_manifest("oxford5k")["filesets"][0]["names"]
                    if n[:-4] not in g.positives | g.junk)
    (folder / f"{q}.txt").write_text("\n".join([negative] + pos) + "\n")  # one negative first
    code, out = run("-p", "oxford5k", folder, "--gt", gt_dir, "--json")
    js = json.loads(out)
    n = len(pos)
    expected = sum(((i / (i + 1)) + (i + 1) / (i + 2)) / 2 / n for i in range(n))
    assert js["per_query"][q] == pytest.approx(expected, abs=2e-6)
    assert js["mAP"] == pytest.approx((54 + js["per_query"][q]) / 55, abs=1e-9)
    (folder / "christ_church_1.txt").unlink()
    code, out = run("-p", "oxford5k", folder, "--gt", gt_dir)
    assert code != 0 and "christ_church_1.txt" in out


def test_score_revisited_npy(tmp_path):
    pkl = shared_path("revisited", "gnd_rparis6k.pkl")
    gt = load_revisited_gnd(pkl)
    nd, nq = len(gt.imlist), len(gt.qimlist)
    ranks = np.empty((nd, nq), dtype=np.int64)
    for i, g in enumerate(gt.gnd):  # easy and hard first: medium mAP = 1
        top = np.concatenate([g["easy"], g["hard"]])
        ranks[:, i] = np.concatenate([top, np.setdiff1d(np.arange(nd), top)])
    f = tmp_path / "ranks.npy"
    np.save(f, ranks)
    code, out = run("-p", "rparis6k", f, "--gt", pkl)
    assert code == 0, out
    assert re.match(r">> rparis6k: mAP E: [\d.]+, M: 100\.0, H: [\d.]+\n>> rparis6k: mP@k\[1, 5, 10\] E: ", out)
    js = json.loads(run("-p", "rparis6k", f, "--gt", pkl, "--json")[1])
    assert js["medium"]["mAP"] == pytest.approx(1.0) and js["easy"]["mP@1"] == 1.0
    assert set(js["per_query"][gt.qimlist[0]]) == {"easy", "medium", "hard"}
    np.save(f, ranks.astype(np.float32))
    code, out = run("-p", "rparis6k", f, "--gt", pkl)
    assert code != 0 and "integer" in out
