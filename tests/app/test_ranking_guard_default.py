"""Ranking guard of the `default` preset in ``make test``: the preset as shipped, on the 112 real photos of
../shared/data/minibench.json, through ``retrieval eval run``'s code path; its mAP within 0.005 of the figure in
docs/results.md, "Ranking guards (`make test`)" (tests/helpers_ranking.py). One file per preset, so that
``pytest -n auto --dist loadfile`` spreads the guards over the workers."""

from __future__ import annotations

from helpers_ranking import check_guard


def test_default_preset_ranks_minibench_as_documented(tmp_path_factory):
    check_guard("default", tmp_path_factory)
