"""``retrieval index`` (a sync), ``retrieval remove`` and ``retrieval compact`` (a merge) under faults: every write
step made to fail in turn (a full disk, a read-only file system, a permission refused, an I/O error:
:mod:`write_faults_support`), run through the command line in this process. A refused run prints one line naming
the cause (no traceback) and leaves the catalog, the generation and every file of the index byte for byte as
before, then the same run without the fault completes; a run that succeeds has its changes committed and
searchable. The first sync of an index (which also installs its model and the model's copy) is checked the same
way on every sixth of its steps."""

from __future__ import annotations

import errno
import shutil

import pytest
from click.testing import CliRunner
from helpers import copy_index, make_pool, photo_index, small_preset
from write_faults_support import Faults, index_state

from retrieval.app.index import Index
from retrieval.cli.main import main

ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO)
CLI_WORDS = {errno.ENOSPC: ("full", "space"), errno.EROFS: ("read-only",), errno.EACCES: ("read-only", "ermission"),
             errno.EIO: ("I/O error", "Input/output error")}
"""Words one of which the command line's error line holds, per cause."""


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(index of 8 photos in two generations -- two segments --, the photo folder after 2 photos were added and 1
    deleted, the pool)."""
    d = tmp_path_factory.mktemp("faults-sync")
    pool = make_pool(d / "pool")
    index, photos = photo_index(d, pool, (6, 2))
    for p in pool[8:10]:
        shutil.copy(p, photos)
    (photos / pool[1].name).unlink()
    return index, photos, pool


def state_of(index) -> tuple[int, set, set]:
    """(generation, indexed paths, the search state's paths), the catalog and the search state checked to agree."""
    idx = Index.open(index)
    try:
        gen, rows = idx.catalog.snapshot()
        paths = {r["path"] for r in rows if r["status"] == "indexed"}
        by_id = {r["id"]: r["path"] for r in rows}
        backend_paths = {by_id[i] for i in idx.searcher().backend.ids.tolist()}
        assert backend_paths == paths
        return gen, paths, {h.path for h in idx.search(sorted(paths)[0], k=20, rerank="none")}
    finally:
        idx.close()


def one_line_error(res, error) -> None:
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("Error")]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert any(w.lower() in lines[0].lower() for w in CLI_WORDS[error]), lines[0]


def every_step(base, tmp_path, args_of, done, *, index0=None, stride=1):
    """The command ``args_of(index)`` on a fresh copy of the index (``index0``, default the base one) for each of
    its write steps in turn (every ``stride``-th), failing: refused = one line + nothing changed + the same command
    then completes; succeeded = ``done(index)``."""
    index0 = index0 or base[0]
    probe = copy_index(index0, tmp_path / "probe")
    with Faults(probe) as counting:
        res = run(args_of(probe))
    assert res.exit_code == 0, res.output
    done(probe)
    problems, outcomes = [], set()
    for k in range(0, len(counting.calls), stride):
        error = ERRORS[(k // stride) % len(ERRORS)]
        index = copy_index(index0, tmp_path / f"step{k}")
        before = index_state(index)
        with Faults(index, fail_at=k, error=error) as faults:
            res = run(args_of(index))
        try:
            if res.exit_code == 0:
                done(index)
                outcomes.add("done")
            else:
                one_line_error(res, error)
                assert index_state(index) == before, "the state changed"
                if dict(before[0][1])["generation"] != "0":   # an empty index has no search state
                    state_of(index)   # catalog and search state agree
                again = run(args_of(index))
                assert again.exit_code == 0, again.output
                done(index)
                outcomes.add(errno.errorcode[error])
        except AssertionError as exc:
            problems.append(f"step {k} {faults.failed} {errno.errorcode[error]}: exit {res.exit_code} "
                            f"{res.output[-300:]!r}: {exc}")
        shutil.rmtree(index, ignore_errors=True)
    assert problems == []
    assert {"done", "ENOSPC", "EROFS", "EACCES", "EIO"} <= outcomes, outcomes


def test_every_failing_step_of_a_sync_tells_the_truth(base, tmp_path):
    _, photos, pool = base
    want = {str(p) for p in photos.iterdir()}

    def done(index):
        gen, paths, found = state_of(index)
        assert paths == want and found == want   # 2 added, 1 removed: all committed and searchable

    every_step(base, tmp_path, lambda index: ["-q", "index", photos, "--index", index, "--workers", "1"], done)


def test_every_failing_step_of_a_remove_tells_the_truth(base, tmp_path):
    index0, photos, pool = base
    gone = str(photos / pool[3].name)

    def done(index):
        gen, paths, found = state_of(index)
        assert gone not in paths and gone not in found and len(paths) == 7

    every_step(base, tmp_path, lambda index: ["remove", gone, "--index", index], done)


def test_every_failing_step_of_a_merge_tells_the_truth(base, tmp_path):
    index0 = base[0]
    _, want, _ = state_of(index0)

    def done(index):
        gen, paths, found = state_of(index)
        idx = Index.open(index)
        try:
            assert idx.searcher().backend.segment_info()["segments"] == 1
        finally:
            idx.close()
        assert found == want

    every_step(base, tmp_path, lambda index: ["compact", "--index", index], done)


def test_failing_steps_of_a_first_sync_leave_an_empty_index(base, tmp_path):
    """A new index's first sync (the model trained, installed with its copy, the first generation): refused, it
    leaves the index empty (no model, no generation, the catalog as created); done, everything is searchable."""
    _, photos, _ = base
    empty = tmp_path / "empty"
    Index.create(empty, small_preset("test-faults"), train_on="collection").close()
    want = {str(p) for p in photos.iterdir()}

    def done(index):
        gen, paths, found = state_of(index)
        assert gen == 1 and paths == want and found == want
        assert (index / "model.backup" / "model.json").is_file()

    every_step(base, tmp_path, lambda index: ["-q", "index", photos, "--index", index, "--workers", "1"], done,
               index0=empty, stride=6)
