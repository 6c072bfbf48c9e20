"""The benchmark helpers run and report consistent fields (figures themselves come from `retrieval bench`)."""

from __future__ import annotations

import json

import numpy as np
from conftest import shared_path
from PIL import Image

from retrieval.bench.extract import bench_extract, read_opencv_matrix_text


def test_read_opencv_matrix_text():
    H = read_opencv_matrix_text(shared_path("opencv_samples", "H1to3p.xml"), "H13")
    assert H.shape == (3, 3)
    np.testing.assert_allclose(H[0], [7.6285898e-01, -2.9922929e-01, 2.2567123e02])
    assert H[2, 2] == 1.0


def test_bench_extract_single_worker(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        p = tmp_path / f"{i}.png"
        Image.fromarray((rng.random((40, 50)) * 255).astype(np.uint8)).resize((200, 160)).save(p)
        paths.append(p)
    res = bench_extract(paths, workers=1, rounds=1)
    json.dumps(res)
    assert res["n_images"] == 2 and res["workers"] == 1 and res["scaling"] == 1.0
    assert res["overhead_ratio"] > 0 and res["features_per_image"] > 0
    assert set(res["images_per_s"]) == {"1"}
