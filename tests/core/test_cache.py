"""The bytes-bounded LRU cache (retrieval.core.cache.BytesLRU): budget, eviction order, thread safety."""

from __future__ import annotations

import threading

import pytest

from retrieval.core.cache import BytesLRU


def test_evicts_least_recently_used_within_the_budget():
    c = BytesLRU(100)
    c.put("a", 1, 40)
    c.put("b", 2, 40)
    assert c.get("a") == 1           # "a" is now the most recently used
    c.put("c", 3, 40)                # 120 > 100: "b", the least recently used, goes
    assert "b" not in c and c.get("a") == 1 and c.get("c") == 3
    assert c.nbytes == 80 and len(c) == 2
    c.put("a", 9, 10)                # replacing a key updates its size
    assert c.get("a") == 9 and c.nbytes == 50


def test_value_over_budget_is_not_kept_and_zero_disables():
    c = BytesLRU(100)
    c.put("small", 1, 60)
    c.put("huge", 2, 101)
    assert "huge" not in c and c.get("small") == 1 and c.nbytes == 60
    off = BytesLRU(0)
    assert off.get_or_compute("k", lambda: 5, lambda v: 1) == 5 and len(off) == 0 and off.nbytes == 0
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        BytesLRU(-1)


def test_get_or_compute_computes_once_and_counts():
    c = BytesLRU(1000)
    calls = []

    def compute():
        calls.append(1)
        return [1, 2, 3]

    assert c.get_or_compute("x", compute, len) == [1, 2, 3]
    assert c.get_or_compute("x", compute, len) == [1, 2, 3]
    assert len(calls) == 1 and c.hits == 1 and c.misses == 1 and c.nbytes == 3


def test_threads_keep_the_books_consistent():
    """Eight threads putting and getting overlapping keys: the byte total always equals the sum of what is kept
    and never exceeds the budget."""
    c = BytesLRU(500)

    def work(t):
        for i in range(2000):
            k = (t * 7 + i) % 37
            if c.get(k) is None:
                c.put(k, k, 10 + k)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    kept = {k: 10 + k for k in range(37) if k in c}
    assert c.nbytes == sum(kept.values()) <= 500 and len(c) == len(kept) > 0


def test_verification_cache_budget_from_the_environment(monkeypatch):
    """The environment is read at the command line's edge (retrieval.cli.options), then passed to Index.open."""
    from retrieval.cli.options import verification_cache_mb
    from retrieval.engine.backend import default_verification_cache_mb

    monkeypatch.delenv("RETRIEVAL_VERIFY_CACHE_MB", raising=False)
    assert verification_cache_mb() == default_verification_cache_mb()
    monkeypatch.setenv("RETRIEVAL_VERIFY_CACHE_MB", "0.5")
    assert verification_cache_mb() == 0.5
    monkeypatch.setenv("RETRIEVAL_VERIFY_CACHE_MB", "0")
    assert verification_cache_mb() == 0
    for bad in ("-1", "lots", "nan"):
        monkeypatch.setenv("RETRIEVAL_VERIFY_CACHE_MB", bad)
        with pytest.raises(ValueError, match="RETRIEVAL_VERIFY_CACHE_MB must be a number of megabytes >= 0"):
            verification_cache_mb()


def test_cached_without_a_cache_computes_every_time():
    from retrieval.core.cache import cached

    calls = []
    assert cached(None, "k", lambda: calls.append(1) or 7, lambda v: 1) == 7
    assert cached(None, "k", lambda: calls.append(1) or 7, lambda v: 1) == 7 and len(calls) == 2
    c = BytesLRU(100)
    assert cached(c, "k", lambda: calls.append(1) or 7, lambda v: 1) == 7
    assert cached(c, "k", lambda: calls.append(1) or 7, lambda v: 1) == 7 and len(calls) == 3


@pytest.mark.parametrize("gib, expected", [(2, 256), (4, 256), (8, 512), (24, 1536), (64, 2048)])
def test_the_default_verification_cache_is_a_sixteenth_of_the_machine(monkeypatch, gib, expected):
    """256 MB at least (small machines), 2,048 MB at most, a sixteenth of the memory between."""
    import retrieval.core.machine as machine
    from retrieval.app.index import Index
    from retrieval.engine.backend import default_verification_cache_mb

    monkeypatch.setattr(machine, "memory_bytes", lambda: gib << 30)
    assert default_verification_cache_mb() == expected
    assert Index.__init__.__kwdefaults__["verification_cache_mb"] is None   # read when an index is opened


def test_the_machine_memory_is_read_from_the_system(monkeypatch):
    import os

    from retrieval.core.machine import ASSUMED_MEMORY, memory_bytes

    assert memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def unknown(name):
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", unknown)
    assert memory_bytes() == ASSUMED_MEMORY
