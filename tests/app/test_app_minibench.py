"""Application acceptance on real photos: the images of ../shared/data/minibench.json copied into a
photo folder, ``retrieval index`` with the default preset, ``retrieval query --json`` with each group's first
image; mAP over the groups (query excluded) must reach 0.84, and spatial re-ranking must improve it.

Slow (extraction of 112 photos at 1024 px and a 64-Gaussian GMM): run with ``--runslow``. Features go through
the shared test feature cache, so a second run only trains and searches. The figures per preset are in
docs/results.md (``retrieval bench app --minibench``).
"""

from __future__ import annotations

import pytest
from conftest import FEATURE_CACHE, shared_path

from retrieval.bench.app import minibench


@pytest.mark.slow
def test_default_preset_reaches_084_and_reranking_improves(tmp_path):
    spec = shared_path("minibench.json")
    res = minibench(spec, tmp_path, preset="default", reranks=("none", "spatial"), feature_store=FEATURE_CACHE)
    assert res["n_queries"] == 38 and res["n_images"] == 112
    assert res["map"]["none"] >= 0.84, res
    assert res["map"]["spatial"] > res["map"]["none"], res
