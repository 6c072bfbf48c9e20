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


def test_bench_extract_on_photos_enlarged_to_camera_size(tmp_path):
    """``retrieval bench extract --upscale-to MP``: UKBench photos (640 x 480) enlarged to 2 MP in a temporary folder,
    the decoding figures reported for them; the copies are removed afterwards."""
    from click.testing import CliRunner

    from retrieval.bench.extract import enlarged_copies
    from retrieval.cli.main import main

    folder = shared_path("real", "ukbench400")
    src = sorted(folder.glob("*.jpg"))[:2]
    copies = enlarged_copies(src, 2.0, tmp_path)
    with Image.open(copies[0]) as im:
        assert abs(im.width * im.height / 1e6 - 2.0) < 0.01 and abs(im.width / im.height - 640 / 480) < 1e-3
    res = CliRunner().invoke(main, ["bench", "extract", "--images", str(src[0]), "--workers", "1", "--rounds", "1",
                                    "--upscale-to", "2", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)["decoding"]
    assert abs(d["megapixels_per_image"] - 2.0) < 0.01
    assert set(d["images_per_s"]) == {"reduced", "full_decode", "raw_pyhesaff"}
    assert all(v > 0 for v in d["images_per_s"].values()) and d["decode_s"]["full"] > 0
    bad = CliRunner().invoke(main, ["bench", "extract", "--images", str(src[0]), "--upscale-to", "0"])
    assert bad.exit_code != 0 and "--upscale-to 0.0: expected a positive number of megapixels" in bad.output
