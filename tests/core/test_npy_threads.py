"""np.load from several threads: numpy's header reader is serialised on the CPython versions with gh-106905 (the
AST constructor failing when two threads build syntax trees at once), untouched elsewhere."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import retrieval.core.persistence  # noqa: F401 (installs the lock)
from retrieval.core.npy_threads import affected, serialise_npy_headers


def test_the_affected_versions_are_3_11_before_3_11_8_and_3_12_0():
    assert affected((3, 11, 7)) and affected((3, 11, 0)) and affected((3, 12, 0))
    assert not affected((3, 11, 8)) and not affected((3, 12, 1)) and not affected((3, 10, 14))
    assert not affected((3, 13, 0))


def test_arrays_and_npz_members_read_from_many_threads_are_right(tmp_path):
    assert serialise_npy_headers() == affected()   # installed once by persistence; a second call changes nothing
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(int(rng.integers(1, 50)), 3)).astype(np.float32) for _ in range(40)]
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"a{i}.npy", a)
        np.savez(tmp_path / f"z{i}.npz", a=a, b=np.arange(i))

    def read(i):
        with np.load(tmp_path / f"z{i % 40}.npz") as z:
            return np.array_equal(np.load(tmp_path / f"a{i % 40}.npy"), arrays[i % 40]) and \
                np.array_equal(z["a"], arrays[i % 40]) and len(z["b"]) == i % 40

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(read, range(2000)))
