"""`retrieval train vocab` and `retrieval bench aggregate` (small settings)."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from conftest import FEATURE_CACHE, shared_path

from retrieval.cli.main import main
from retrieval.core.persistence import load_estimator


def test_train_vocab_from_folder(tmp_path):
    folder = shared_path("holidays", "images")
    imgs = sorted(folder.glob("1002*.jpg"))[:2]
    out = tmp_path / "voc.npz"
    res = CliRunner().invoke(main, ["-q", "train", "vocab", *map(str, imgs), "-o", str(out), "--kind", "kmeans",
                                    "-k", "8", "--pca-dim", "16", "--workers", "1",
                                    "--cache", str(FEATURE_CACHE)])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["k"] == 8 and summary["dimension"] == 16 and summary["n_images"] == 2
    voc = load_estimator(out)
    assert voc.cluster_centers_.shape == (8, 16)
    pca = load_estimator(summary["local_pca"])
    assert pca.components_.shape == (16, 128)


def test_train_vocab_gmm_and_errors(tmp_path):
    img = shared_path("holidays", "images", "100200.jpg")
    out = tmp_path / "gmm.npz"
    res = CliRunner().invoke(main, ["-q", "train", "vocab", str(img), "-o", str(out), "-k", "4", "--pca-dim", "8",
                                    "--workers", "1", "--cache", str(FEATURE_CACHE)])
    assert res.exit_code == 0, res.output
    g = load_estimator(out)
    assert g.means_.shape == (4, 8) and abs(float(np.sum(g.weights_)) - 1) < 1e-5
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    res = CliRunner().invoke(main, ["-q", "train", "vocab", str(bad), "-o", str(out), "--workers", "1"])
    assert res.exit_code != 0 and "bad.jpg" in res.output
    res = CliRunner().invoke(main, ["-q", "train", "vocab", str(tmp_path / "missing"), "-o", str(out)])
    assert res.exit_code != 0


def test_bench_aggregate_json_small():
    res = CliRunner().invoke(main, ["bench", "aggregate", "--images", "2", "--descriptors", "200", "-k", "4",
                                    "--repeats", "1", "--gmm-samples", "3000", "--gmm-components", "4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    f = out["fisher"]
    assert f["relative_difference_to_vlfeat"] < 1e-5
    assert f["ratio_means_to_vlfeat"] > 0 and out["gmm"]["n_iter"] >= 1
