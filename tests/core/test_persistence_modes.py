"""Files written atomically get the permissions a plain open() would give them (not mkstemp's 0600)."""

from __future__ import annotations

import os
import stat

import pytest

from retrieval.core.persistence import atomic_write, save_npy_atomic, write_json_atomic


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_files_follow_the_umask_and_replacements_keep_their_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w") as fh:
            fh.write("x")
        with atomic_write(tmp_path / "atomic.txt", "w") as fh:
            fh.write("x")
        write_json_atomic(tmp_path / "a.json", {"a": 1})
        save_npy_atomic(tmp_path / "a.npy", [1, 2])
        want = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
        assert want == 0o666 & ~umask
        for name in ("atomic.txt", "a.json", "a.npy"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == want, name
        os.chmod(tmp_path / "atomic.txt", 0o640)        # a mode the user chose survives a rewrite
        with atomic_write(tmp_path / "atomic.txt", "w") as fh:
            fh.write("y")
        assert stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode) == 0o640
        assert (tmp_path / "atomic.txt").read_text() == "y"
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    finally:
        os.umask(old)
