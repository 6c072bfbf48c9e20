"""Dataset loaders on folders laid out like the releases (empty image files named from the manifests, the real
official ground truth copied from ../shared/data); the official result files they write score the same through
`retrieval eval score`."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import shared_path

from retrieval.cli.main import main
from retrieval.datasets import load_dataset
from retrieval.datasets.manifest import fileset, load_manifest


def populate(root, dataset, skip=()):
    m = load_manifest(dataset)
    for fs in m["filesets"]:
        if "names" not in fs or fs["name"] == "ground truth":
            continue
        folder = root / fs["folder"]
        folder.mkdir(parents=True, exist_ok=True)
        for n in fs["names"]:
            if n not in skip:
                (folder / n).touch()
    return m


def test_holidays_loader_missing_files_and_roundtrip(tmp_path):
    gt = shared_path("holidays", "holidays_images.dat")
    populate(tmp_path, "holidays", skip={"100301.jpg", "149900.jpg"})
    with pytest.raises(FileNotFoundError, match=r"2 of 1491 files missing.*jpg/100301.jpg, jpg/149900.jpg"):
        load_dataset("holidays", tmp_path)
    (tmp_path / "jpg" / "100301.jpg").touch()
    (tmp_path / "jpg" / "149900.jpg").touch()
    ds = load_dataset("holidays", tmp_path)
    assert len(ds.database) == 1491 and len(ds.queries) == 500 and ds.exclude_query
    assert any("EXIF" in n for n in ds.notes)
    rng = np.random.default_rng(0)
    rankings = {q.name: [ds.database[i] for i in rng.permutation(len(ds.database))[:50]] for q in ds.queries}
    score = ds.score(rankings)
    files = ds.write_results(rankings, tmp_path / "out")
    res = CliRunner().invoke(main, ["eval", "score", "-p", "holidays", str(files[0]), "--gt", str(gt), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["mAP"] == pytest.approx(score["mAP"], abs=1e-12)


def test_oxford_loader_and_roundtrip(tmp_path):
    src = shared_path("oxford5k", "gt_files_170407")
    populate(tmp_path, "oxford5k")
    with pytest.raises(FileNotFoundError, match="ground truth: 220 of 220 files missing"):
        load_dataset("oxford5k", tmp_path)
    shutil.copytree(src, tmp_path / "gt_files_170407")
    ds = load_dataset("oxford5k", tmp_path)
    assert len(ds.queries) == 55 and len(ds.database) == 5063
    q = ds.queries[0]
    assert q.name == "all_souls_1" and q.box == (136.5, 34.1, 648.5, 955.7) and q.path.name == "all_souls_000013.jpg"
    rng = np.random.default_rng(1)
    rankings = {q.name: [ds.database[i] for i in rng.permutation(len(ds.database))] for q in ds.queries}
    score = ds.score(rankings)
    ds.write_results(rankings, tmp_path / "out")
    res = CliRunner().invoke(main, ["eval", "score", "-p", "oxford5k", str(tmp_path / "out"), "--gt",
                                    str(tmp_path / "gt_files_170407"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["per_query"] == pytest.approx(score["per_query"])
    with pytest.raises(ValueError, match="distractors"):
        load_dataset("oxford105k", tmp_path)


def test_revisited_loader_and_roundtrip(tmp_path):
    pkl = shared_path("revisited", "gnd_roxford5k.pkl")
    populate(tmp_path, "roxford5k")
    with pytest.raises(FileNotFoundError, match="gnd_roxford5k.pkl"):
        load_dataset("roxford5k", tmp_path)
    shutil.copy(pkl, tmp_path / "gnd_roxford5k.pkl")
    ds = load_dataset("roxford5k", tmp_path)
    assert len(ds.queries) == 70 and len(ds.database) == 4993 and ds.queries[0].box is not None
    rng = np.random.default_rng(2)
    rankings = {q.name: [ds.database[i] for i in rng.permutation(len(ds.database))] for q in ds.queries}
    score = ds.score(rankings)
    (f,) = ds.write_results(rankings, tmp_path / "out")
    res = CliRunner().invoke(main, ["eval", "score", "-p", "roxford5k", str(f), "--gt", str(pkl), "--json"])
    assert res.exit_code == 0, res.output
    js = json.loads(res.output)
    assert js["medium"]["mAP"] == pytest.approx(score["medium"]["mAP"], abs=1e-12)
    assert js["hard"]["mP@10"] == pytest.approx(score["hard"]["mP@10"], abs=1e-12)


def test_ukb_and_copydays_loaders(tmp_path):
    populate(tmp_path / "ukb", "ukb")
    ds = load_dataset("ukb", tmp_path / "ukb")
    assert len(ds.queries) == 10200
    names = fileset(load_manifest("ukb"), "images")["names"]
    out = ds.score({names[0]: names[:4], names[4]: [names[4], names[0], names[5], names[9]]})
    assert out["N-S score"] == pytest.approx((4 + 2) / 2)
    root = tmp_path / "cd"
    for folder, count in (("original", 157), ("strong", 229), ("crops/50", 157), ("jpegqual/10", 157)):
        (root / folder).mkdir(parents=True)
        for i in range(count):
            (root / folder / f"{200000 + 100 * (i % 157) + (i // 157 if folder == 'strong' else 0)}.jpg").touch()
    ds = load_dataset("copydays", root)
    assert len(ds.database) == 157 and len(ds.queries) == 157 + 157 + 229
    rankings = {q.name: [f"original/{q.path.stem[:4]}00.jpg"] for q in ds.queries}
    out = ds.score(rankings)
    assert out["per_family"]["crops/50"] == 1.0 and out["mAP"] == 1.0
