"""Query crops with true/false lists: the junk rule of the Oxford protocol, and malformed lists named."""

import pytest

from retrieval.evaluation.ap import ap_from_ranks
from retrieval.evaluation.crops import load_crops, score_crops

EXT = (".jpg", ".png")


def _write(tmp_path, name, tp, fp=None):
    (tmp_path / f"{name}.jpg").write_bytes(b"")
    (tmp_path / f"{name}_TP.txt").write_text("\n".join(tp) + "\n")
    if fp is not None:
        (tmp_path / f"{name}_FP.txt").write_text("\n".join(fp) + "\n")


def test_images_outside_both_lists_are_ignored(tmp_path):
    _write(tmp_path, "q1", ["a", "b.jpg"], ["x", "y"])
    bench = load_crops(tmp_path, EXT)
    assert bench.positives["q1"] == {"a", "b"}
    # junk j1, j2 before the first positive do not count; the false match x does
    s = score_crops(bench, {"q1": ["j1", "j2", "x", "a", "j3", "b", "y"]})
    assert s["mAP"] == pytest.approx(ap_from_ranks([1, 2], 2))
    assert s["mAP"] < 1.0


def test_without_a_false_list_every_other_image_is_negative(tmp_path):
    _write(tmp_path, "q1", ["a"])
    bench = load_crops(tmp_path, EXT)
    s = score_crops(bench, {"q1": ["j1", "a"]})
    assert s["per_query"]["q1"] == pytest.approx(ap_from_ranks([1], 1))


def test_perfect_and_missing_rankings(tmp_path):
    _write(tmp_path, "q1", ["a"], ["x"])
    _write(tmp_path, "q2", ["b"], ["x"])
    bench = load_crops(tmp_path, EXT)
    assert score_crops(bench, {"q1": ["a", "x"], "q2": ["b"]})["mAP"] == 1.0
    with pytest.raises(ValueError, match="q2"):
        score_crops(bench, {"q1": ["a"]})


def test_malformed_lists_are_named(tmp_path):
    _write(tmp_path, "q1", ["a"], ["a"])
    with pytest.raises(ValueError, match="q1_FP.txt.*true or a false"):
        load_crops(tmp_path, EXT)
    (tmp_path / "q1_FP.txt").unlink()
    (tmp_path / "q1.jpg").unlink()
    with pytest.raises(ValueError, match="no query image q1"):
        load_crops(tmp_path, EXT)
    with pytest.raises(ValueError, match="no query list"):
        load_crops(tmp_path / "empty", EXT)


def test_crops_dataset_checks_the_lists_against_the_database(tmp_path):
    from retrieval.app.evaluate import crops_dataset

    q, db = tmp_path / "q", tmp_path / "db"
    q.mkdir()
    db.mkdir()
    _write(q, "q1", ["a"], ["x"])
    for n in ("a", "x", "other"):
        (db / f"{n}.jpg").write_bytes(b"")
    ds = crops_dataset(q, db)
    assert ds.database == ["a", "other", "x"] and [x.name for x in ds.queries] == ["q1"]
    assert ds.queries[0].image is None  # the crop is not in the database
    assert ds.score({"q1": ["other", "a", "x"]})["mAP"] == 1.0  # "other" is junk
    (db / "x.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="q1 lists 1 images not in .*first: x"):
        crops_dataset(q, db)


def test_groups_with_a_distractor_folder_count_its_images_as_negatives(tmp_path, monkeypatch):
    """``eval run groups --distractors DIR``: DIR's images join the database; ranked above a positive they lower
    its AP exactly as a benchmark image would; a name outside both is still an error."""
    import json

    from PIL import Image

    from retrieval.app.evaluate import groups_dataset

    root = tmp_path / "bench"
    root.mkdir()
    for n in ("q.png", "p.png", "x.png"):
        Image.new("RGB", (8, 8)).save(root / n)
    (tmp_path / "d").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "d" / "far.png")
    spec = root / "spec.json"
    spec.write_text(json.dumps({"groups": [{"name": "g", "images": ["q.png", "p.png"]}], "distractors": ["x.png"]}))
    monkeypatch.chdir(tmp_path)
    ds = groups_dataset(spec, distractors="d")                    # a relative folder, as typed on the command line
    assert "distractor:far.png" in ds.database and len(ds.database) == 4
    first = ds.score({"q.png": ["p.png", "distractor:far.png", "x.png"]})["mAP"]
    behind_d = ds.score({"q.png": ["distractor:far.png", "p.png", "x.png"]})["mAP"]
    behind_x = ds.score({"q.png": ["x.png", "p.png", "distractor:far.png"]})["mAP"]
    assert first == 1.0 and behind_d == behind_x < 1.0
    with pytest.raises(ValueError):
        ds.score({"q.png": ["nowhere.png", "p.png"]})
    with pytest.raises(ValueError, match="no image found"):
        (tmp_path / "empty").mkdir()
        groups_dataset(spec, distractors=tmp_path / "empty")
