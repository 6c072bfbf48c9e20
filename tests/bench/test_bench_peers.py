"""The ASMK* reference (the ``asmk`` package) on the same features and queries as our presets: `eval run --compare
asmk` on a small real-photo spec (4 boofcv triples + 2 distractors), and the crops set wired for `bench peers`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import shared_path
from helpers import fast_overrides, small_spec

from retrieval.cli.main import main

pytest.importorskip("asmk", reason="the ASMK* reference needs the benchmark extra (make setup installs it)")


def test_eval_run_compare_asmk_scores_both_on_the_same_queries(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = small_spec(tmp_path)
    args = ["eval", "run", "groups", "--spec", str(spec), "--preset", "default", "--work", str(tmp_path / "work"),
            "--workers", "1", "--compare", "asmk", "--json"]
    for o in fast_overrides("default"):
        args += ["--set", o]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{"):])
    ref = report["compare"]["asmk"]
    assert set(ref["score"]["per_query"]) == set(report["per_query"])  # the same 4 queries, one scorer
    assert ref["training"].startswith("transductive")
    # the triples are views of one planar scene: ASMK* finds both mates of every query first
    assert ref["mAP"] == pytest.approx(1.0)
    assert 0 < ref["codebook_size"] <= 16384 and ref["train_descriptors"] > ref["codebook_size"]


def test_real_sets_are_found_and_missing_ones_named(tmp_path):
    from retrieval.bench.peers import REAL_SETS, real_set

    data = shared_path()
    crops = real_set("oxford_crops", data)
    assert len(crops.queries) == 8 and len(crops.database) == 133
    with pytest.raises(FileNotFoundError, match="holidays805.json: not found"):
        real_set("holidays805", tmp_path)
    with pytest.raises(ValueError, match="unknown set 'paris'"):
        real_set("paris", data)
    assert REAL_SETS == ("minibench", "holidays805", "ukbench400", "oxford_crops")
