"""Application acceptance on real photos: the images of ../shared/data/minibench.json copied into a
photo folder, indexed with the default preset and queried with each group's first image (what ``retrieval bench
app --minibench`` runs: ``retrieval index`` and ``retrieval query`` through :class:`~retrieval.app.index.Index`); mAP
over the groups (query excluded) must be the figure of the ``default`` ranking guard in docs/results.md, "Ranking
guards (`make test`)", within the same 0.005, and spatial re-ranking must improve on the first stage.

The guard itself runs in ``make test`` (tests/app/test_ranking_guard_default.py, through ``retrieval eval run``'s
code). This is the same figure reached through the application's folder index, which trains a second model of the
same photos and queries it twice (with and without re-ranking), so it is slow: run with ``--runslow``. Features go
through the shared test feature cache.
"""

from __future__ import annotations

import pytest
from conftest import FEATURE_CACHE, shared_path
from helpers_ranking import TOLERANCE, documented_guards

from retrieval.bench.app import minibench


@pytest.mark.slow
def test_default_preset_ranks_as_its_guard_and_reranking_improves(tmp_path):
    spec = shared_path("minibench.json")
    want = documented_guards()["default"]
    res = minibench(spec, tmp_path, preset="default", reranks=("none", "spatial"), feature_store=FEATURE_CACHE)
    assert res["n_queries"] == want["queries"] == 38 and res["n_images"] == 112
    assert abs(res["map"]["spatial"] - want["mAP"]) <= TOLERANCE, (res, want)
    assert res["map"]["spatial"] > res["map"]["none"], res
