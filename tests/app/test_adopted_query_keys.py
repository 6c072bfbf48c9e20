"""An index whose stored preset copy predates a query-time key of its bundled preset takes the bundled value
(retrieval.app.index_support.adopt_thresholds): the verification's query cap for `default`, `accurate` and
`object`; `compact` keeps every query feature; a value the stored copy sets is kept."""

from __future__ import annotations

import copy

import pytest

from retrieval.app.index_support import adopt_thresholds
from retrieval.engine.presets import load_preset, preset_config


@pytest.mark.parametrize("name, expected", [("default", 1000), ("accurate", 1000), ("object", 1000),
                                            ("compact", 0)])
def test_a_stored_copy_without_the_key_takes_the_bundled_value(tmp_path, name, expected):
    current = load_preset(name)
    stored = copy.deepcopy(current)
    stored["search"].pop("verify_query_features", None)
    assert preset_config(stored).search.verify_query_features == 0
    adopted = adopt_thresholds(tmp_path, stored, current)
    assert preset_config(adopted).search.verify_query_features == expected
    assert "verify_query_features" not in stored["search"]          # the stored copy itself is not changed
    stored["search"]["verify_query_features"] = 300
    assert preset_config(adopt_thresholds(tmp_path, stored, current)).search.verify_query_features == 300
