"""docs/user-guide.md states per-preset defaults in prose and in the presets table; each statement is read from the
page and compared with the bundled presets (``load_preset`` + ``Preset.from_dict``), the library's thresholds and
the generic models built by ``make setup``, so that the page cannot drift from the code again.

The statements checked: the ``--qe`` default of every bundled preset; the folder sizes up to which ``--train-on
auto`` takes each preset's generic model; the generic models' sizes (only where ``make setup`` built them); and
the figures of the presets table (kind, query expansion, the sideways fallback, vocabulary and index sizes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from retrieval.app.generic_models import GENERIC_UP_TO, generic_model
from retrieval.engine.config import Preset
from retrieval.engine.presets import load_preset, preset_names

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
PHOTO_PRESETS = ("default", "compact", "accurate", "object")


def config(name: str) -> Preset:
    return Preset.from_dict(load_preset(name))


def guide() -> str:
    return GUIDE.read_text("utf-8")


def bullet(text: str, start: str) -> str:
    """The list item of the page that begins with ``start`` (``- `` + start), its lines joined by single spaces."""
    m = re.search(rf"^- {re.escape(start)}.*?(?=^- |^\S|\Z)", text, re.M | re.S)
    assert m, f"docs/user-guide.md has no list item starting {start!r}"
    return " ".join(m.group(0).split())


# ---------------------------------------------------------------------------------------------- --qe
def documented_qe_defaults() -> tuple[dict[str, int], int]:
    """({preset: N} named by the ``--qe N`` item's "Default:" sentence, N of "the other bundled presets")."""
    item = bullet(guide(), "`--qe N`")
    m = re.search(r"Default: the preset's `search\.query_expansion`(.*)", item)
    assert m, f"the `--qe N` item no longer says where its default comes from: {item}"
    sentence = m.group(1)
    named = {name: int(n) for n, name in re.findall(r"(\d+) in `([\w.-]+)`", sentence)}
    other = re.search(r"(\d+) in the other bundled presets", sentence)
    assert named and other, f"expected 'N in `PRESET`, ..., N in the other bundled presets': {sentence}"
    return named, int(other.group(1))


def test_the_documented_qe_defaults_are_the_presets():
    named, other = documented_qe_defaults()
    bundled = preset_names()
    assert set(named) <= set(bundled), f"the page names presets that are not bundled: {set(named) - set(bundled)}"
    actual = {name: config(name).search.query_expansion for name in bundled}
    assert named == {name: actual[name] for name in named}
    assert {name: other for name in bundled if name not in named} == \
        {name: n for name, n in actual.items() if name not in named}, "the 'other bundled presets' are not all " \
                                                                      f"{other}"
    assert set(named) >= {"default", "accurate"}   # the presets whose default is not 0 are named


# ---------------------------------------------------------------------------------------------- generic models
def test_the_documented_generic_model_thresholds_are_the_librarys():
    item = bullet(guide(), "**First run.**")
    m = re.search(r"a folder of at most (.*?) starts from the preset's \*\*generic model\*\*", item)
    assert m, item
    documented = {}
    for n, names in re.findall(r"(\d+)(?: readable images)? \(([^)]*)\)", m.group(1)):
        for name in re.findall(r"`([\w-]+)`", names):
            documented[name] = int(n)
    assert documented == GENERIC_UP_TO


def documented_model_sizes() -> dict[str, float]:
    item = bullet(guide(), "**Generic models.**")
    return {name: float(mb) for mb, name in re.findall(r"([\d.]+) MB \(`([\w-]+)`\)", item)}


def test_the_generic_models_of_every_photo_preset_have_a_documented_size():
    assert set(documented_model_sizes()) == set(GENERIC_UP_TO) == set(PHOTO_PRESETS)


@pytest.mark.parametrize("name", PHOTO_PRESETS)
def test_the_documented_generic_model_size_is_the_built_models(name):
    folder = generic_model(load_preset(name))
    if folder is None:
        pytest.skip(f"no generic model of preset {name!r} here: 'make setup' builds them from "
                    "../shared/data/real/holidays805, and its size is compared then")
    # what scripts/train_generic_models.py measures and prints (and records in provenance.json)
    size_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != "provenance.json") / 1e6
    documented = documented_model_sizes()[name]
    # the page gives the size rounded to 0.1 MB; 0.02 MB more for a model rebuilt elsewhere (other images' bytes)
    assert abs(documented - size_mb) <= 0.05 + 0.02, \
        f"docs/user-guide.md gives {documented} MB for the {name!r} generic model; it is {size_mb:.2f} MB"


# ---------------------------------------------------------------------------------------------- presets table
def presets_table() -> dict[str, tuple[str, str]]:
    """{preset: (kind, pipeline)} of the table under "| preset | kind | pipeline | for |"."""
    text = guide()
    start = text.index("| preset | kind | pipeline | for |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def vocabulary_k(p: Preset) -> int:
    return round(p.object_search.n_words / 1000)


FIGURES = {
    "default": [
        (r"PCA-(\d+);", lambda p: p.local_pca.n_components),
        (r"K=(\d+)", lambda p: p.aggregation.n_components),
        (r"PCA to (\d+) ", lambda p: p.projection.n_components),
        (r"IVFADC \((\d+) lists", lambda p: p.index.nlist),
        (r"(\d+) bytes,", lambda p: p.index.M * p.index.nbits // 8),
        (r"(\d+) probed\)", lambda p: p.index.nprobe),
        (r"from ([\d,]+) images", lambda p: p.index.min_images),
        (r"re-ranking of the top (\d+)", lambda p: p.search.shortlist),
    ],
    "compact": [(r"\((\d+) bits", lambda p: p.index.bits)],
    "accurate": [
        (r"(\d+)k-word vocabulary", vocabulary_k),
        (r"alpha = (\d+)", lambda p: p.search.alpha),
        (r"\((\d+) words per query descriptor\)", lambda p: p.object_search.query_words),
        (r"verification of the top (\d+)", lambda p: p.search.verify_top),
    ],
    "object": [(r"\((\d+)k words, idf\)", vocabulary_k)],
}
"""Per preset: a figure of its pipeline cell and the preset's value it states."""


def test_the_presets_table_has_the_photo_presets_and_their_kinds():
    table = presets_table()
    assert set(table) == set(PHOTO_PRESETS)
    assert {name: kind for name, (kind, _) in table.items()} == {name: config(name).kind for name in PHOTO_PRESETS}


@pytest.mark.parametrize("name", PHOTO_PRESETS)
def test_the_presets_table_states_the_presets_figures(name):
    p = config(name)
    _, pipeline = presets_table()[name]
    for pattern, value in FIGURES[name]:
        m = re.search(pattern, pipeline)
        assert m, f"the {name!r} row of the presets table no longer states {pattern!r}: {pipeline}"
        assert float(m.group(1).replace(",", "")) == value(p), (name, pattern, value(p))
    # query expansion: "from the best verified hit" is 1, "from the N best verified hits" N, none stated 0
    qe = re.search(r"query expansion from the (?:(\d+) )?best verified hits?", pipeline)
    assert (0 if qe is None else int(qe.group(1) or 1)) == p.search.query_expansion, (name, pipeline)
    # the sideways fallback is stated for the presets that have it
    assert ("turned by 90 and 270 degrees" in pipeline) == p.search.rotation_fallback, (name, pipeline)
