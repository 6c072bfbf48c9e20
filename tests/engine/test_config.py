"""Typed, strict preset configuration (retrieval.engine.config): every bundled preset parses and round-trips, a
misspelled key is an error naming the closest valid key wherever a preset enters (file, dict, --set), out-of-range
values are refused in one line, and `retrieval presets --show` prints the effective configuration."""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.cli.main import main
from retrieval.engine.config import (
    BINARY_DISTANCES,
    BINARY_EMBEDDINGS,
    KIND_SECTIONS,
    SECTIONS,
    Preset,
    PresetError,
    key_table,
)
from retrieval.engine.paper_presets import apply_overrides
from retrieval.engine.presets import load_preset, preset_digest, preset_names, vocabulary_cap

DOCS = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"


def _with(name, section, **keys):
    p = load_preset(name)
    p[section] = dict(p.get(section) or {}, **keys)
    return p


@pytest.mark.parametrize("name", preset_names())
def test_bundled_preset_parses_strictly_and_round_trips(name):
    d = load_preset(name)
    cfg = Preset.from_dict(d)
    assert cfg.to_dict() == d  # the source's own keys, nothing added or lost
    full = cfg.to_dict(full=True)
    again = Preset.from_dict(full)
    assert again.to_dict(full=True) == full  # the effective configuration is a fixed point
    assert set(full) >= set(d)
    for section in KIND_SECTIONS[cfg.kind]:  # every key the source set keeps its value
        if d.get(section):
            assert {k: full[section][k] for k in d[section]} == d[section]


def test_digest_is_computed_from_the_preset_as_given():
    """Index folders store the digest: it hashes the preset's own keys, never the defaults filled in."""
    for name in ("default", "compact", "object"):
        d = load_preset(name)
        blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode("utf-8")
        assert preset_digest(d) == hashlib.sha256(blob).hexdigest()[:16]
    # the bundled presets' digests as recorded by existing index folders (unchanged by the typed configuration)
    # default and compact: search.min_inliers 6 -> 9 (the calibrated verification threshold); query-time only,
    # so their version (which existing index folders are checked against) is unchanged; default: also
    # search.query_expansion 0 -> 1 (query-time), then search.shortlist 50 -> 100 (query-time) and
    # index.vectors float16 (new indexes; an index keeps the preset it was made with); object: version 2 (ASMK*
    # scoring, binary signatures stored), then search.match_probes 0 (query-time: the exact ratio test, which kept
    # 0.014 more mAP on the Oxford crops); default and object: search.verify_query_features 1000 (query-time: the
    # query side of the verification cut to its largest features, the same mAP); default and compact:
    # search.verify_enough 20 (query-time: the verification stopped once 20 results verified, the same mAP)
    assert preset_digest(load_preset("default")) == "1cf2ef970dec3a96"
    assert preset_digest(load_preset("compact")) == "3ee9991c50dfe574"
    assert preset_digest(load_preset("object")) == "63de6fc26dfd5170"


def test_defaults_filled_in():
    cfg = Preset.from_dict(load_preset("default"))
    assert cfg.training.min_descriptors_per_word == 10 and cfg.index.rotation is False
    assert cfg.features.max_megapixels == 150.0
    obj = Preset.from_dict(load_preset("object"))
    assert obj.local_pca is None and obj.aggregation is None and obj.index is None
    assert obj.object_search.assignment == "hard" and obj.object_search.n_words == 20000
    # kind- and method-dependent defaults
    base = {"name": "t", "version": 1, "description": ""}
    assert Preset.from_dict({**base, "kind": "global"}).search.method == "ip"
    assert Preset.from_dict({**base, "kind": "binary"}).search.method == "expectation"
    assert Preset.from_dict({**base, "kind": "object"}).search.method == "delta1"
    assert Preset.from_dict({**base, "kind": "binary"}).index.type == "binary"
    assert Preset.from_dict({**base, "kind": "global"}).index.type == "flat"
    assert Preset.from_dict({**base, "kind": "global"}).projection is None
    assert Preset.from_dict({**base, "kind": "global", "aggregation": {"method": "bow"}}).aggregation.alpha == 1.0
    assert Preset.from_dict({**base, "kind": "global", "aggregation": {"method": "vlad"}}).aggregation.alpha == 0.5


@pytest.mark.parametrize("section, key, closest", [
    ("index", "nprob", "nprobe"), ("training", "max_descriptor", "max_descriptors"),
    ("search", "ratoi", "ratio"), ("features", "treshold", "threshold"), ("local_pca", "n_component", "n_components"),
])
def test_misspelled_key_names_the_closest(section, key, closest):
    p = _with("default", section, **{key: 3})
    msg = f"preset 'default': unknown key '{section}.{key}' (did you mean '{closest}'?)"
    with pytest.raises(PresetError) as err:
        Preset.from_dict(p)
    assert str(err.value) == msg


def test_misspelled_key_in_a_preset_file(tmp_path):
    p = load_preset("default")
    p["aggregaton"] = p.pop("aggregation")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(p))
    with pytest.raises(ValueError, match=rf"preset {path}: unknown key 'aggregaton' \(did you mean 'aggregation'\?\)"):
        load_preset(str(path))


def test_misspelled_key_in_index_create_dict(tmp_path):
    from retrieval.app.index import Index

    p = _with("default", "index", nprob=8)
    with pytest.raises(ValueError, match=r"unknown key 'index.nprob' \(did you mean 'nprobe'\?\)"):
        Index.create(tmp_path / "idx", preset=p)
    assert not (tmp_path / "idx").exists()  # refused before anything is written


@pytest.mark.parametrize("section, key, value, expected", [
    ("index", "nprobe", 0, "an int >= 1"),
    ("index", "nbits", 17, "an int >= 1 and <= 16"),
    ("index", "type", "hnsw", "one of 'flat', 'ivfadc', 'adc', 'ivfadc_adc'"),
    ("search", "ratio", 1.5, "a number > 0 and <= 1"),
    ("search", "method", "delta1", "one of 'ip'"),
    ("aggregation", "method", "gmm", "one of 'fisher', 'vlad', 'bow'"),
    ("training", "max_images", 2.5, "an int >= 1"),
    ("local_pca", "whiten", "no", "true or false"),
    ("features", "max_side", 4, "an int >= 8 (or null)"),
])
def test_out_of_range_values_refused_in_one_line(section, key, value, expected):
    with pytest.raises(PresetError) as err:
        Preset.from_dict(_with("default", section, **{key: value}))
    msg = str(err.value)
    assert "\n" not in msg and f"{section}.{key} = {value!r}" in msg and msg.endswith(f"expected {expected}.")


def test_sections_of_another_kind_and_malformed_heads_refused():
    with pytest.raises(PresetError, match="section 'object_search' is not used by a global preset"):
        Preset.from_dict(_with("default", "object_search", n_words=10))
    with pytest.raises(PresetError, match="section 'aggregation' is not used by a object preset"):
        Preset.from_dict(_with("object", "aggregation", method="bow"))
    with pytest.raises(PresetError, match=r"object_search.assignment = 'fuzzy'"):
        Preset.from_dict(_with("object", "object_search", assignment="fuzzy"))
    with pytest.raises(PresetError, match="missing key"):
        Preset.from_dict({"name": "x", "kind": "global"})
    with pytest.raises(PresetError, match="'asmk' scores binary signatures: it needs object_search.signatures"):
        Preset.from_dict(_with("object", "object_search", signatures=False))
    with pytest.raises(PresetError, match="requires entry 'numpy' must read 'module:attribute'"):
        Preset.from_dict(dict(load_preset("default"), requires=["numpy"]))
    with pytest.raises(PresetError, match="features: The 'threshold' parameter of HessianAffine"):
        Preset.from_dict(_with("default", "features", threshold=-1.0))


def test_set_rejects_unknown_keys_with_the_closest():
    p = load_preset("default")
    with pytest.raises(ValueError) as err:
        apply_overrides(p, ["index.nprob=3"])
    assert str(err.value) == "set index.nprob=3: preset 'default': unknown key 'index.nprob' (did you mean 'nprobe'?)"
    assert err.value.param == "set"   # the command line words it --set (below)
    with pytest.raises(ValueError, match=r"search.ratio = 2 is out of range"):
        apply_overrides(p, ["search.ratio=2"])
    assert apply_overrides(p, ["index.nprobe=8"])["index"]["nprobe"] == 8
    assert p["index"]["nprobe"] == 32


def test_cli_set_error_is_one_line(tmp_path):
    from PIL import Image

    for i in range(2):
        Image.new("RGB", (32, 32), (40 * i, 80, 120)).save(tmp_path / f"im{i}.png")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"groups": [{"name": "g", "images": ["im0.png", "im1.png"]}]}))
    res = CliRunner().invoke(main, ["-q", "eval", "run", "groups", "--spec", str(spec), "--work",
                                    str(tmp_path / "w"), "--set", "index.nprob=3"])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == ["Error: --set index.nprob=3: preset 'default': unknown key 'index.nprob' (did you mean "
                     "'nprobe'?)"]
    assert not (tmp_path / "w").exists()


def test_cli_show_prints_the_filled_defaults(tmp_path):
    res = CliRunner().invoke(main, ["presets", "--show", "default"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "  min_descriptors_per_word   10  (default)" in lines  # not in default.json: filled in
    assert "  max_descriptors            200000" in lines  # set by default.json: no mark
    assert "  nprobe                     32" in lines
    res = CliRunner().invoke(main, ["presets", "--show", "object", "--json"])
    shown = json.loads(res.output)
    assert shown == Preset.from_dict(load_preset("object")).to_dict(full=True)
    assert shown["object_search"]["assignment"] == "hard" and shown["training"]["min_descriptors_per_word"] == 10
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_with("default", "search", shortlst=5)))
    res = CliRunner().invoke(main, ["presets", "--show", str(bad)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert [ln for ln in res.output.splitlines() if ln] == [
        f"Error: preset {bad}: unknown key 'search.shortlst' (did you mean 'shortlist'?)"]


def test_declared_defaults_match_the_library_classes():
    """Where a section passes its keys to a library class, the declared defaults are the class's own (so that a
    preset leaving them unset behaves as before)."""
    from retrieval.engine.object.searcher import ObjectSearcher
    from retrieval.features import FeatureExtractor
    from retrieval.features.detectors import available_detectors

    cfg = Preset.from_dict({"name": "t", "version": 1, "kind": "object", "description": ""})
    sig = inspect.signature(ObjectSearcher.__init__).parameters
    for key, value in cfg.object_search.to_dict(full=True).items():
        assert sig[key].default == value, key
    fsig = inspect.signature(FeatureExtractor.__init__).parameters
    for key in ("detector", "max_side", "max_megapixels", "min_side"):
        assert fsig[key].default == getattr(cfg.features, key), key
    assert SECTIONS["features"].__dataclass_fields__["detector"].metadata["choices"]() == available_detectors()
    import retrieval.codes.binary as binary

    assert all(hasattr(binary, name) for name in BINARY_EMBEDDINGS)
    assert tuple(binary.DISTANCES) == BINARY_DISTANCES


def test_vocabulary_cap_reads_the_declared_key():
    assert vocabulary_cap(load_preset("default"), 1000) == 100  # default 10 descriptors per word
    assert vocabulary_cap(_with("default", "training", min_descriptors_per_word=4), 1000) == 250


def test_every_key_is_documented():
    """docs/user-guide.md's table lists every declared key with its default."""
    text = DOCS.read_text("utf-8")
    for section, key, default, _, _ in key_table():
        cell = default if default.startswith("(") else f"`{default}`"
        assert f"| `{section}` | `{key}` | {cell} |" in text, (section, key)


_FULL = Preset.from_dict(load_preset("default")).to_dict(full=True)
_KEYS = [(s, k) for s in KIND_SECTIONS["global"] if _FULL[s] for k in _FULL[s]]


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(_KEYS)))
def test_any_subset_of_declared_keys_round_trips(keys):
    """A preset setting any subset of the keys (with the effective values) parses to the same configuration and
    gives back exactly the keys it set."""
    d = {k: _FULL[k] for k in ("name", "version", "kind", "description")}
    for section, key in keys:
        d.setdefault(section, {})[key] = copy.deepcopy(_FULL[section][key])
    cfg = Preset.from_dict(d)
    assert cfg.to_dict() == d
    full = cfg.to_dict(full=True)
    for section, key in keys:
        assert full[section][key] == _FULL[section][key]


def test_detector_registered_at_run_time_is_accepted(monkeypatch):
    """``features.detector`` accepts the built-in detectors and any detector registered at run time (the extension
    point of docs/architecture.md); an unknown name is refused with the list of valid ones."""
    from retrieval.features import detectors

    preset = load_preset("default")
    preset["features"] = dict(preset["features"], detector="my-detector")
    with pytest.raises(PresetError, match="features.detector = 'my-detector'.*'hesaff'"):
        Preset.from_dict(preset)
    monkeypatch.setitem(detectors._REGISTERED, "my-detector", detectors.get_detector_class("sift"))
    assert Preset.from_dict(preset).features.detector == "my-detector"
