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
