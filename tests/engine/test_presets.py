"""Paper presets: the bundled files match their generator, load with the application's preset loader, carry the
papers' figures, and strict --set overrides."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from retrieval.engine.paper_presets import TABLE_I, apply_overrides, build
from retrieval.engine.presets import load_preset, preset_names


def test_bundled_files_match_generator():
    built = build()
    names = [n for n in preset_names() if n.startswith("paper-")]
    assert sorted(names) == sorted(built)
    folder = resources.files("retrieval") / "data" / "presets"
    for name, preset in built.items():
        assert json.loads((folder / f"{name}.json").read_text("utf-8")) == preset
        loaded = load_preset(name)
        assert loaded["name"] == name and loaded["paper"]["seed"] in ("000", "002", "003")


def test_paper_figures_transcribed():
    built = build()
    f64 = built["paper-002-fisher64"]["paper"]
    assert f64["figures"] == {"D": 59.5, "2048": 60.7, "512": 61.0, "128": 56.5, "64": 52.0, "32": 48.0}
    assert f64["table_II"]["holidays"] == [59.5, 56.5] and f64["table_II"]["ukb"] == [3.35, 3.33]
    # D' >= D cells are absent, e.g. BoW 1k has no D' = 2048
    assert "2048" not in built["paper-002-bow1k"]["paper"]["figures"]
    assert all(len(row) == 6 for row in TABLE_I.values())
    assert built["paper-002-fisher256-adc256x10"]["paper"]["figures"] == {"ukb": 3.47, "holidays": 63.4}
    assert built["paper-003-delta1"]["paper"]["figures"]["oxford105k"] == 78.14
    assert built["paper-003-delta1"]["search"]["alpha"] == 0.5
    kinds = {p["kind"] for n, p in built.items() if n.startswith("paper-000-")}
    assert kinds == {"binary"}


def test_apply_overrides_strict():
    p = load_preset("paper-002-fisher64")
    q = apply_overrides(p, ["projection.n_components=512", "search.rerank=spatial"])
    assert q["projection"]["n_components"] == 512 and q["search"]["rerank"] == "spatial"
    assert q["overrides"] == ["projection.n_components=512", 'search.rerank="spatial"']
    assert p["projection"]["n_components"] == 128  # input untouched
    assert apply_overrides(p, ["projection=null"])["projection"] is None
    with pytest.raises(ValueError, match=r"unknown key 'projection.n_component' \(did you mean 'n_components'\?\)"):
        apply_overrides(p, ["projection.n_component=512"])
    with pytest.raises(ValueError, match=r"unknown key 'projecton' \(did you mean 'projection'\?\)"):
        apply_overrides(p, ["projecton.n_components=512"])
    with pytest.raises(ValueError, match=r"index.nbits = 0 is out of range: expected an int >= 1 and <= 16"):
        apply_overrides(p, ["index.nbits=0"])
    # a declared key the preset leaves to its default may be set; free-form objects stay strict
    assert apply_overrides(p, ["training.min_descriptors_per_word=5"])["training"]["min_descriptors_per_word"] == 5
    with pytest.raises(ValueError, match="has no key 'paper.tabel'"):
        apply_overrides(p, ["paper.tabel=II"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        apply_overrides(p, ["projection"])
    raw = apply_overrides(p, ["projection=null"])
    with pytest.raises(ValueError, match="is null"):
        apply_overrides(raw, ["projection.n_components=64"])
