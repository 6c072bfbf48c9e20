"""`retrieval eval run groups` end to end on a small real-photo spec (symlinks to ../shared/data images)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import shared_path
from helpers import fast_overrides, first_available, small_spec

from retrieval.cli.main import main


def test_eval_run_groups_end_to_end(tmp_path, monkeypatch):
    preset = first_available()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = small_spec(tmp_path)
    args = ["eval", "run", "groups", "--spec", str(spec), "--preset", preset, "--work", str(tmp_path / "work"),
            "--workers", "1", "--out", str(tmp_path / "out"), "--json"]
    for o in fast_overrides(preset):
        args += ["--set", o]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{"):])
    assert set(report) >= {"mAP", "per_query", "bytes_per_image", "extraction_seconds", "query_seconds_mean",
                           "configuration", "library_version", "warnings"}
    assert len(report["per_query"]) == 4 and report["indexed"] == 14
    assert 0.0 <= report["mAP"] <= 1.0
    assert report["warnings"] and "independent training" in report["warnings"][0]
    assert report["configuration"]["name"] == preset
    assert report["configuration"]["features"]["max_side"] == 480
    assert report["configuration"]["overrides"][0] == "features.max_side=480"
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["mAP"] == report["mAP"]
    # second run reuses the cached features and the index: same score
    res2 = CliRunner().invoke(main, args)
    assert res2.exit_code == 0, res2.output
    assert json.loads(res2.output[res2.output.index("{"):])["mAP"] == report["mAP"]


def test_eval_run_refuses_unsupported_and_typos(tmp_path):
    spec = small_spec(tmp_path, n_groups=1, n_distractors=0)
    base = ["eval", "run", "groups", "--spec", str(spec), "--work", str(tmp_path / "w")]
    res = CliRunner().invoke(main, base + ["--preset", "object", "--set", "search.metod=l2"])
    assert res.exit_code != 0 and "unknown key 'search.metod' (did you mean 'method'?)" in res.output
    res = CliRunner().invoke(main, base + ["--preset", "paper-002-fisher64-adc16x8", "--set", "index.type=lsh_forest"])
    assert res.exit_code != 0 and "index.type = 'lsh_forest' is out of range" in res.output
    assert not (tmp_path / "w").exists()  # refused before any work


def test_eval_run_errors(tmp_path):
    res = CliRunner().invoke(main, ["eval", "run", "groups", "--preset", "default"])
    assert res.exit_code != 0 and "--spec" in res.output
    res = CliRunner().invoke(main, ["eval", "run", "holidays", "--root", str(tmp_path)])
    assert res.exit_code != 0 and "1491 of 1491 files missing" in res.output
    res = CliRunner().invoke(main, ["eval", "run", "nope", "--root", str(tmp_path)])
    assert res.exit_code != 0 and "unknown dataset" in res.output


def test_run_benchmark_box_queries_oxford_format(tmp_path):
    """A query outside the database searched with its box, scored and written in the compute_ap format."""
    from retrieval.app.evaluate import run_benchmark
    from retrieval.datasets.base import Query, RetrievalDataset
    from retrieval.evaluation.oxford import (
        OxfordQuery,
        normalize_name,
        read_results_folder,
        score_oxford,
        write_results_folder,
    )

    preset = first_available(("object", "default", "compact"))
    data = shared_path("opencv_samples")
    homogr = shared_path("homogr")
    names = ["box_in_scene.png", "leuvenA.jpg", "cityA.png"]
    paths = {n: (homogr if n.startswith("city") else data) / n for n in names}
    gt = {"box_1": OxfordQuery(name="box_1", image="box", box=(0.0, 0.0, 323.0, 222.0),
                               good=frozenset({"box_in_scene.png"}), ok=frozenset(), junk=frozenset({"cityA.png"}))}

    def writer(rankings, folder):
        write_results_folder(folder, rankings)
        return [folder / f"{q}.txt" for q in rankings]

    ds = RetrievalDataset(
        name="toy-oxford", root=tmp_path, database=names, paths=paths,
        queries=[Query(name="box_1", path=data / "box.png", box=(0.0, 0.0, 323.0, 222.0))],
        scorer=lambda r: {"mAP": score_oxford(r, gt).mAP, "per_query": score_oxford(r, gt).per_query},
        writer=writer)
    report = run_benchmark(ds, preset, work_dir=tmp_path / "w", out_dir=tmp_path / "out", workers=1,
                           overrides=fast_overrides(preset, 512))
    ranked = read_results_folder(tmp_path / "out" / "results", gt)["box_1"]
    assert sorted(ranked) == sorted(normalize_name(n) for n in names)  # each database image once, no query
    assert report["mAP"] == score_oxford({"box_1": ranked}, gt).mAP
    assert report["queries"] == 1 and report["k"] == 3
