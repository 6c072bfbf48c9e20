"""retrieval match: unrelated pairs answer "no geometric match" with exit code 1 and no homography."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from conftest import shared_path

from retrieval.cli.main import main
from retrieval.rerank.matching import MATCH_DEFAULTS, match_features

MATCH_KW = {k: v for k, v in MATCH_DEFAULTS.items() if k not in ("detector", "max_side")}
EXTRACT_KW = {"detector": MATCH_DEFAULTS["detector"], "max_side": MATCH_DEFAULTS["max_side"]}


def test_box_vs_graf1_is_no_geometric_match():
    d = shared_path("opencv_samples")
    r = CliRunner().invoke(main, ["match", str(d / "box.png"), str(d / "graf1.png")])
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("no geometric match")
    r = CliRunner().invoke(main, ["match", str(d / "box.png"), str(d / "graf1.png"), "--json"])
    assert r.exit_code == 1
    js = json.loads(r.output)
    assert js["verified"] is False and js["homography"] is None and js["inliers"] == 0 and js["reason"]


def test_related_pair_is_verified_exit_0():
    d = shared_path("opencv_samples")
    r = CliRunner().invoke(main, ["match", str(d / "box.png"), str(d / "box_in_scene.png"), "--json"])
    assert r.exit_code == 0, r.output
    js = json.loads(r.output)
    assert js["verified"] is True and js["reason"] is None and 0 < js["inliers"] <= js["tentative"]


def test_20_sampled_unrelated_pairs_have_no_homography(features_of):
    from retrieval.bench.verify import holidays_groups, ukbench_groups, unrelated_pairs

    for k, (paths, groups) in enumerate([ukbench_groups(shared_path("real", "ukbench400")),
                                         holidays_groups(shared_path("real", "holidays805"))]):
        for a, b in unrelated_pairs(groups, 10, random_state=100 + k):
            assert groups[a] != groups[b]
            res = match_features(features_of(paths[a], **EXTRACT_KW), features_of(paths[b], **EXTRACT_KW),
                                 **MATCH_KW)
            assert not res.verified and res.homography is None and res.inliers == 0, (paths[a], paths[b])
            assert res.to_json()["verified"] is False and res.to_json()["homography"] is None


def test_inliers_never_exceed_tentative_on_graf(features_of):
    d = shared_path("opencv_samples")
    res = match_features(features_of(d / "graf1.png", **EXTRACT_KW), features_of(d / "graf3.png", **EXTRACT_KW),
                         **MATCH_KW)
    assert res.verified and res.inliers <= res.tentative == len(res.tentative_pairs)
    inl = res.inlier_pairs
    assert len(np.unique(inl[:, 0])) == len(inl) == len(np.unique(inl[:, 1]))
