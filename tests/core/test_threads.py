"""single_threaded_blas: one BLAS thread inside, the previous counts restored when the outermost context closes."""

from __future__ import annotations

import numpy as np  # noqa: F401  (loads the BLAS library that threadpoolctl reports)
import pytest
from threadpoolctl import threadpool_info

from retrieval.core.threads import single_threaded_blas


def _blas_threads():
    return {p["filepath"]: p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


@pytest.fixture
def before():
    counts = _blas_threads()
    if not counts:
        pytest.skip("no BLAS library loaded by numpy here (threadpoolctl reports none)")
    return counts


def test_one_thread_inside_nested_contexts_then_restored(before):
    with single_threaded_blas():
        assert set(_blas_threads().values()) == {1}
        with single_threaded_blas():
            assert set(_blas_threads().values()) == {1}
        assert set(_blas_threads().values()) == {1}    # the outer context still holds the limit
    assert _blas_threads() == before


def test_restored_when_the_body_raises(before):
    with pytest.raises(RuntimeError), single_threaded_blas():
        raise RuntimeError("boom")
    assert _blas_threads() == before
