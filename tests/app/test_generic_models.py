"""The generic models shipped with the package (retrieval.app.generic_models): which preset gets one, the training
policy of an index (auto / collection / generic), and the acceptance check on the demo photos: a 47-photo folder
indexed with the shipped `default` model ranks the demo's queries at least as well as the model learnt on the
folder itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FEATURE_CACHE, shared_path

from retrieval.app import generic_models
from retrieval.app.demo_data import build_demo_folder
from retrieval.app.generic_models import (
    GENERIC_UP_TO,
    USE_BELOW,
    generic_model,
    model_key,
    models_folder,
    provenance,
)
from retrieval.app.index import Index
from retrieval.engine.paper_presets import apply_overrides
from retrieval.engine.presets import load_preset
from retrieval.evaluation.ap import average_precision


@pytest.fixture(scope="module")
def built():
    """The generic models are learnt by `make setup` from ../shared/data/real/holidays805: without those photos
    there are none, and the tests that need them skip."""
    return shared_path("real", "holidays805", "jpg")


@pytest.mark.parametrize("name", ["default", "compact", "accurate", "object"])
def test_each_main_preset_has_a_generic_model_with_its_provenance(built, name):
    preset = load_preset(name)
    info = provenance(preset)
    assert info is not None, f"no generic model matches preset {name!r} (make setup builds them)"
    folder = generic_model(preset)
    model = json.loads((folder / "model.json").read_text())
    assert (model["preset"], model["preset_version"]) == (name, preset["version"])
    assert info["images"] >= 500 and "Holidays" in info["trained_on"] and info["use_below"] == USE_BELOW[name]
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != "provenance.json")
    assert size == info["bytes"] and size < 12e6        # wheel-sized: the sizes are in docs/user-guide.md
    assert model["trained_on"] == info["images"]


def test_model_key_follows_the_model_shaping_keys_only():
    p = load_preset("default")
    assert model_key(apply_overrides(p, ["search.shortlist=20", "search.query_expansion=0"])) == model_key(p)
    changed = apply_overrides(p, ["aggregation.n_components=32"])
    assert model_key(changed) != model_key(p)
    assert provenance(changed) is None and generic_model(changed) is None
    assert models_folder().name == "models"


def demo_queries(folder):
    made = build_demo_folder(folder)
    return made, [(p, made["views"][n]) for n, p in ((n, str(folder / f"{n}.png")) for n in made["views"])]


def demo_map(idx, queries) -> float:
    aps = []
    for q, positives in queries:
        ranked = [str(h.path) for h in idx.search(q, k=60) if str(h.path) != q]
        aps.append(average_precision(ranked, positives))
    return float(np.mean(aps))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo") / "photos"
    made, queries = demo_queries(folder)
    return folder, made, queries


def test_the_generic_model_ranks_the_demo_at_least_as_well_as_the_folder_s_own(built, demo, tmp_path):
    folder, made, queries = demo
    n = len(made["photos"]) + sum(len(v) for v in made["views"].values())
    assert 40 <= n <= 60
    generic = Index.create(tmp_path / "g", "default", feature_store=FEATURE_CACHE, train_on="generic")
    generic.sync(folder)
    own = Index.create(tmp_path / "c", "default", feature_store=FEATURE_CACHE, train_on="collection")
    own.sync(folder)
    assert generic.catalog.get_meta("model")["generic"] is True
    assert generic.catalog.get_meta("model")["trained_on"] == provenance(load_preset("default"))["images"]
    assert "generic" not in own.catalog.get_meta("model") and own.catalog.get_meta("model")["trained_on"] == n
    m_generic, m_own = demo_map(generic, queries), demo_map(own, queries)
    print(f"demo mAP: generic model {m_generic:.4f}, folder-trained {m_own:.4f}")
    assert m_generic >= m_own, (m_generic, m_own)
    # the shipped model is copied into the index: it stays usable without the package's copy
    assert (tmp_path / "g" / "model" / "model.json").is_file()


def test_the_threshold_is_the_library_s_even_for_models_built_before(monkeypatch, tmp_path):
    """A provenance written by an earlier set-up (another use_below) follows this library's USE_BELOW."""
    preset = load_preset("default")
    (tmp_path / "default").mkdir()
    old = {"model_key": model_key(preset), "use_below": USE_BELOW["default"] + 77, "images": 805}
    (tmp_path / "default" / "provenance.json").write_text(json.dumps(old))
    monkeypatch.setattr(generic_models, "models_folder", lambda: tmp_path)
    assert provenance(preset)["use_below"] == USE_BELOW["default"] and provenance(preset)["images"] == 805
    assert generic_model(preset) == tmp_path / "default"


def test_auto_uses_the_generic_model_below_the_threshold_and_learns_from_it_on(built, monkeypatch, tmp_path):
    from retrieval.bench.app import make_synthetic_folder

    folder = tmp_path / "photos"
    made = make_synthetic_folder(folder, GENERIC_UP_TO["default"], side=96, views=5)   # the largest to get it
    below = Index.create(tmp_path / "below", "default", feature_store=FEATURE_CACHE)   # train_on="auto"
    report = below.sync(folder)
    assert len(made) == USE_BELOW["default"] - 1 and not report.errors
    assert not report.trained and below.catalog.get_meta("model")["generic"] is True
    monkeypatch.setitem(generic_models.USE_BELOW, "default", 10)   # the same folder, now above the threshold
    above = Index.create(tmp_path / "above", "default", feature_store=FEATURE_CACHE)
    report = above.sync(folder)
    assert report.trained and "generic" not in above.catalog.get_meta("model")


def test_training_policy_is_checked_and_explicit_training_wins(demo, tmp_path):
    folder, made, _ = demo
    with pytest.raises(ValueError, match="train_on must be one of"):
        Index.create(tmp_path / "x", "default", train_on="sometimes")
    custom = apply_overrides(load_preset("default"), ["aggregation.n_components=16"])
    idx = Index.create(tmp_path / "y", custom, feature_store=FEATURE_CACHE, train_on="generic")
    with pytest.raises(ValueError, match="no generic model for preset 'default' as configured"):
        idx.sync(made["photos"][:3])
    explicit = Index.create(tmp_path / "z", "default", feature_store=FEATURE_CACHE,
                            train_images=made["photos"][:10])
    explicit.sync(made["photos"][:5])
    assert "generic" not in explicit.catalog.get_meta("model")
    assert explicit.catalog.get_meta("model")["trained_on"] == 10


def test_cli_index_says_which_model_it_uses(built, demo, tmp_path):
    from click.testing import CliRunner

    from retrieval.cli.main import main

    folder, made, _ = demo
    small = tmp_path / "small"
    small.mkdir()
    for p in made["photos"][:4]:
        (small / p.split("/")[-1]).symlink_to(p)
    run = CliRunner().invoke
    res = run(main, ["-q", "index", str(small), "--index", str(tmp_path / "i"), "--feature-store", str(FEATURE_CACHE)])
    assert res.exit_code == 0, res.output
    info = run(main, ["info", "--index", str(tmp_path / "i")])
    assert "the generic model, trained on 805 images" in info.output
    res = run(main, ["-q", "index", str(small), "--index", str(tmp_path / "j"), "--feature-store", str(FEATURE_CACHE),
                     "--train-on", "collection", "--preset", "accurate"])
    assert res.exit_code == 0, res.output
    info = run(main, ["info", "--index", str(tmp_path / "j")])
    assert "generic" not in info.output and "trained on 4 images" in info.output
