"""Duplicate actions and their undo under faults: every write step of the index's update made to fail in turn
(:mod:`write_faults_support`). Carrying out a plan either completes (files moved, the index without them, their new
places kept out of syncs) or changes nothing (every file put back, the index byte for byte as before, the plan saying
so); an undo either completes (files back and indexed again) or leaves the plan's result as it was (and can be run
again)."""

from __future__ import annotations

import errno
import hashlib
import shutil
from pathlib import Path

import pytest
from helpers import copy_index, make_pool, small_preset
from write_faults_support import Faults, index_state

from retrieval.app.duplicates.actions import apply_plan, plan_actions
from retrieval.app.duplicates.plan_file import load_plan
from retrieval.app.duplicates.undo import undo_plan
from retrieval.app.index import Index

ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO)


def files_of(folder: Path) -> dict:
    return {str(p): hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A photo folder with byte copies of two photos in ``copies/``, its index, and saved copies of both."""
    d = tmp_path_factory.mktemp("dup-faults")
    pool = make_pool(d / "pool")
    photos = d / "photos"
    (photos / "copies").mkdir(parents=True)
    for p in pool[:6]:
        shutil.copy(p, photos)
    for p in pool[:2]:
        shutil.copy(p, photos / "copies")
    idx = Index.create(d / "index", small_preset("test-dup-faults"))
    idx.sync(photos, workers=1)
    idx.close()
    groups = [{"group": n + 1, "kind": "exact", "keeper": str(photos / p.name),
               "images": [{"id": 0, "path": str(photos / p.name)}, {"id": 1, "path": str(photos / "copies" / p.name)}]}
              for n, p in enumerate(pool[:2])]
    saved = d / "saved"
    copy_index(d / "index", saved / "index")
    shutil.copytree(photos, saved / "photos")
    return {"dir": d, "photos": photos, "index": d / "index", "groups": groups, "saved": saved}


def restore(world, index_from=None, photos_from=None) -> None:
    """The world's index and photos put back as saved (or as ``index_from`` / ``photos_from``)."""
    shutil.rmtree(world["index"])
    copy_index(index_from or world["saved"] / "index", world["index"])
    shutil.rmtree(world["photos"])
    shutil.copytree(photos_from or world["saved"] / "photos", world["photos"])


def plan_of(world, plan_path) -> dict:
    idx = Index.open(world["index"])
    try:
        plan = plan_actions(world["groups"], "move", kinds=["exact"], to=world["photos"] / "dups",
                            index_path=world["index"], roots=idx.roots)
    finally:
        idx.close()
    assert len(plan["steps"]) == 2
    return plan


def applied(world, plan_path, faults=None):
    """apply_plan on a fresh Index (inside ``faults`` when given); the exception raised, or None."""
    idx = Index.open(world["index"])
    try:
        with faults or _nothing():
            apply_plan(idx, plan_of(world, plan_path), plan_path=plan_path)
    except OSError as exc:
        return exc
    finally:
        idx.close()
    return None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def indexed(world) -> set:
    idx = Index.open(world["index"])
    try:
        gen, rows = idx.catalog.snapshot()
        paths = {r["path"] for r in rows if r["status"] == "indexed"}
        assert set(idx.searcher().backend.ids.tolist()) == {r["id"] for r in rows if r["status"] == "indexed"}
        return paths
    finally:
        idx.close()


def test_every_failing_step_of_carrying_out_a_plan_completes_or_changes_nothing(world, tmp_path):
    photos, copies = world["photos"], sorted(str(p) for p in (world["photos"] / "copies").iterdir())
    restore(world)
    with Faults(world["index"]) as counting:
        assert applied(world, tmp_path / "probe.json") is None
    assert not set(copies) & indexed(world)
    moved = files_of(photos)
    outcomes, problems = set(), []
    for k in range(len(counting.calls)):
        restore(world)
        before, photos_before = index_state(world["index"]), files_of(photos)
        error = ERRORS[k % len(ERRORS)]
        plan_path = tmp_path / f"plan{k}.json"
        exc = applied(world, plan_path, Faults(world["index"], fail_at=k, error=error))
        try:
            if exc is None:
                assert files_of(photos) == moved and not set(copies) & indexed(world)
                outcomes.add("done")
            else:
                assert files_of(photos) == photos_before, "the files were not all put back"
                assert index_state(world["index"]) == before, "the index changed"
                plan = load_plan(plan_path)
                assert plan["undone"] and plan["index_failed"] and all(s["undo"] == "done" for s in plan["steps"])
                assert applied(world, tmp_path / f"again{k}.json") is None   # a new plan then completes
                assert files_of(photos) == moved
                outcomes.add(errno.errorcode[error])
        except AssertionError as err:
            problems.append(f"step {k} {errno.errorcode[error]} ({exc}): {err}")
    restore(world)
    assert problems == []
    assert {"done", "ENOSPC", "EROFS", "EACCES", "EIO"} <= outcomes, outcomes


def test_every_failing_step_of_an_undo_completes_or_leaves_the_plan_done(world, tmp_path):
    photos = world["photos"]
    restore(world)
    original = files_of(photos)
    assert applied(world, tmp_path / "plan.json") is None
    done_index, done_photos = tmp_path / "done-index", tmp_path / "done-photos"
    copy_index(world["index"], done_index)
    shutil.copytree(photos, done_photos)
    shutil.copy(tmp_path / "plan.json", tmp_path / "plan-done.json")
    after = files_of(photos)

    def undo(faults=None):
        idx = Index.open(world["index"])
        try:
            with faults or _nothing():
                undo_plan(idx, tmp_path / "plan.json")
        except OSError as exc:
            return exc
        finally:
            idx.close()
        return None

    with Faults(world["index"]) as counting:
        assert undo() is None
    assert files_of(photos) == original and indexed(world) >= {str(p) for p in (photos / "copies").iterdir()}
    outcomes, problems = set(), []
    for k in range(len(counting.calls)):
        restore(world, done_index, done_photos)
        shutil.copy(tmp_path / "plan-done.json", tmp_path / "plan.json")
        before = index_state(world["index"])
        error = ERRORS[k % len(ERRORS)]
        exc = undo(Faults(world["index"], fail_at=k, error=error))
        try:
            if exc is None:
                assert files_of(photos) == original
                assert indexed(world) >= {str(p) for p in (photos / "copies").iterdir()}
                outcomes.add("done")
            else:
                assert files_of(photos) == after, "the files are not where the plan had put them"
                assert index_state(world["index"]) == before, "the index changed"
                assert not load_plan(tmp_path / "plan.json").get("undone")
                assert undo() is None and files_of(photos) == original   # the undo run again completes
                outcomes.add(errno.errorcode[error])
        except AssertionError as err:
            problems.append(f"step {k} {errno.errorcode[error]} ({exc}): {err}")
    restore(world)
    assert problems == []
    assert {"done", "ENOSPC", "EROFS", "EACCES", "EIO"} <= outcomes, outcomes
