"""Shared test fixtures: the real data in ../shared/data (skipped with a reason when absent) and the slow marker."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (ROOT / ".." / "shared" / "data").resolve()


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow (heavy cases live in benchmarks)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


def shared_path(*parts) -> Path:
    """Path inside ../shared/data; skips the calling test with a clear reason when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared test data not found: {p} (tests read real data from ../shared/data beside the checkout)")
    return p


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return shared_path()


# --- features: one extraction cache shared by every test module -------------------------------------
FEATURE_CACHE = ROOT / ".cache" / "test-features"


@pytest.fixture(scope="session")
def features_of():
    """``features_of(path, **extractor_params) -> LocalFeatures`` through a FeatureStore in .cache/test-features.

    ``extractor_params`` are those of ``retrieval.features.FeatureExtractor`` (detector, max_side, threshold, ...);
    the cache is keyed by file content and extractor configuration, so it is shared safely between tests and runs.
    """
    from retrieval.features import FeatureExtractor
    from retrieval.features.store import FeatureStore

    store = FeatureStore(FEATURE_CACHE)
    extractors = {}

    def get(path, **params):
        key = repr(sorted(params.items()))
        if key not in extractors:
            extractors[key] = FeatureExtractor(**params)
        return store.get_or_extract(Path(path), extractors[key])

    return get


@pytest.fixture(scope="session")
def minibench():
    """``/work/shared/data/minibench.json`` parsed, with absolute paths.

    Returns a dict: ``groups`` (list of {"name", "images": [abs path, ...]}; first = query), ``distractors``
    (abs paths), ``images`` ({abs path: {"width", "height", "md5"}}), ``paths`` (every image, sorted).
    Skips when the file is absent.
    """
    import json

    p = shared_path("minibench.json")
    raw = json.loads(p.read_text())
    base = p.parent

    def ab(rel):
        return str((base / rel).resolve())

    out = dict(raw)
    out["groups"] = [{**g, "images": [ab(r) for r in g["images"]]} for g in raw["groups"]]
    out["distractors"] = [ab(r) for r in raw.get("distractors", [])]
    out["images"] = {ab(r): v for r, v in raw["images"].items()}
    out["paths"] = sorted(out["images"])
    return out


@pytest.fixture(scope="session")
def cli_world(tmp_path_factory):
    """A small indexed photo folder for the CLI tests (tests/cli/cli_world.py): read-only for the tests (copy the
    index before changing it; remove any photo added)."""
    from cli_world import build_world

    return build_world(tmp_path_factory.mktemp("cliworld"))


@pytest.fixture
def decodes(monkeypatch):
    """The sizes of the images this process decodes (a server run in a thread of it included): every decode of a
    file goes through Pillow's ImageFile.load with tiles left to decode (its WebP, AVIF and HEIF plugins' loads
    call it); an image already decoded is not counted again."""
    from PIL import ImageFile

    seen = []
    load = ImageFile.ImageFile.load

    def recording(self):
        if self.tile:
            seen.append(self.size)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", recording)
    return seen
