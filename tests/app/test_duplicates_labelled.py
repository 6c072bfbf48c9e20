"""The duplicate kinds on real photos (:mod:`retrieval.bench.duplicate_set`, built at test time from
``../shared/data/real``): the first shot of each of the 100 UKBench groups with one edited copy, the edits dealt in
turn (resized 25-200 %, JPEG quality 30-95, PNG, WebP, cropped to 60-95 % of the area, turned by 90/180/270
degrees, brightness +-20 %: ten photos each), an exact byte copy for a quarter of them, the other shots of every
UKBench group (all of UKBench-400) and 15 Holidays groups as the same scene, and 1,000 sampled unrelated pairs.
``retrieval bench duplicates`` measures the same with 4 edits per photo and 40 Holidays groups (docs/results.md,
"Duplicates")."""

from __future__ import annotations

import pytest
from conftest import FEATURE_CACHE, shared_path


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    from retrieval.bench.duplicates import evaluate_labelled

    shared_path("real", "ukbench400")
    shared_path("real", "holidays805")
    return evaluate_labelled(shared_path(), tmp_path_factory.mktemp("labelled"), n_sources=100, variants=1,
                             holidays_groups=15, workers=2, feature_store=FEATURE_CACHE)


def test_exact_and_near_precision_and_recall(scored):
    assert scored["exact"]["pairs"] >= 25 and scored["exact"]["precision"] == 1.0 and scored["exact"]["recall"] == 1.0
    near = scored["near"]
    assert near["pairs"] >= 100, near
    assert near["precision"] >= 0.99, near
    assert near["recall"] >= 0.98, near


def test_other_shots_and_unrelated_photos_never_called_copies(scored):
    assert scored["scene_labelled_near_or_exact"] == 0
    assert scored["ukbench_shot_pairs"] == 600                    # every pair of different UKBench shots
    assert scored["ukbench_shots_near_or_exact"] == 0
    assert scored["unrelated_sampled"] == 1000
    assert scored["unrelated_sampled_in_one_group"] == 0
    assert scored["unrelated_in_groups"] == 0
    assert scored["scene"]["recall"] > 0.3, scored["scene"]      # same-scene pairs are found too (figure reported)
