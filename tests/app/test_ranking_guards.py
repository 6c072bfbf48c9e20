"""The ranking guards of ``make test`` cover every bundled preset: a row in docs/results.md, "Ranking guards
(`make test`)", and a test file ``test_ranking_guard_<preset>.py`` (no shared data needed here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_ranking import SECTION, SETS, documented_guards

from retrieval.engine.presets import preset_names


def test_every_bundled_preset_has_a_documented_guard_and_its_test_file():
    bundled = {n for n in preset_names() if not n.startswith("paper-")}
    rows = documented_guards()
    assert set(rows) == bundled
    for name, row in rows.items():
        assert row["set"] in SETS, (name, row)
        assert 0 < row["perfect"] <= row["queries"], (name, row)
        assert (Path(__file__).parent / f"test_ranking_guard_{name}.py").is_file(), name


def test_the_table_is_read_from_its_own_section_only():
    text = (f"# R\n\n{SECTION}\n\n| preset | set | mAP | queries at AP 1 | time |\n|---|---|---|---|---|\n"
            "| `default` | minibench | **0.9299** | 35 / 38 | 60 s |\n| `compact` | minibench | 0.93 | 35 / 38 | x |\n"
            "\n## Next\n\n| `object` | minibench | 0.9064 | 34 / 38 | 60 s |\n")
    assert documented_guards(text) == {"default": {"set": "minibench", "mAP": 0.9299, "perfect": 35, "queries": 38}}
    with pytest.raises(ValueError, match="no section"):
        documented_guards("# R\n\n## Other\n")
    with pytest.raises(ValueError, match="no row"):
        documented_guards(f"# R\n{SECTION}\n\nno table\n")
