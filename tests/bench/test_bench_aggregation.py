"""``retrieval.bench.aggregation``: the Fisher-vector timing encodes the same vectors as VLFeat, and the GMM
timing reports the fit it ran."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.bench.aggregation import bench_aggregate, gmm_speed, synthetic_gmm_images


def test_synthetic_images_follow_the_requested_shapes():
    w, mu, var, imgs = synthetic_gmm_images(3, 50, 6, 4, seed=1)
    assert w.shape == (4,) and mu.shape == (4, 6) and var.shape == (4, 6)
    assert w.sum() == pytest.approx(1.0) and (var >= 0.2).all()
    assert len(imgs) == 3 and all(x.shape == (50, 6) and x.dtype == np.float32 for x in imgs)


def test_fisher_matches_vlfeat_and_gmm_report():
    pytest.importorskip("cyvlfeat", reason="cyvlfeat (VLFeat, the reference of the bench) is not installed")
    res = bench_aggregate(n_images=2, T=200, d=8, K=4, repeats=1, gmm_samples=2000, gmm_components=3,
                          gmm_max_iter=5, seed=0)
    json.dumps(res)
    f = res["fisher"]
    assert f["relative_difference_to_vlfeat"] < 1e-5       # same improved FV (means + variances) as VLFeat
    assert (f["K"], f["d"], f["descriptors_per_image"], f["n_images"]) == (4, 8, 200, 2)
    assert set(f["seconds_per_image"]) == {"vlfeat", "ours_means", "ours_means_variances"}
    assert f["ratio_means_to_vlfeat"] > 0 and f["ratio_means_variances_to_vlfeat"] > 0
    g = res["gmm"]
    assert (g["K"], g["d"], g["n_samples"]) == (3, 8, 2000) and 1 <= g["n_iter"] <= 5
    assert "gmm" not in bench_aggregate(n_images=1, T=20, d=4, K=2, repeats=1, gmm_samples=0)


def test_gmm_likelihood_is_that_of_the_fit():
    a = gmm_speed(n=3000, d=4, K=2, seed=5, max_iter=50)
    b = gmm_speed(n=3000, d=4, K=2, seed=5, max_iter=50)
    assert a["mean_log_likelihood"] == b["mean_log_likelihood"] and a["n_iter"] == b["n_iter"]  # seeded
    assert isinstance(a["converged"], bool) and np.isfinite(a["mean_log_likelihood"])
