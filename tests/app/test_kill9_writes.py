"""``kill -9`` (the fault-injection hook ``RETRIEVAL_CRASH_AT``) at every step of a repair -- the model restored from
its copy, the model learnt again, the committed generation rebuilt -- and at the steps after the commit of a sync, a
remove and a merge (the clean-up of the old generations, the update of the catalog's copy). After each kill a search
is made (it answers, or says in one line what is damaged), then ``check --repair`` ends with an intact index whose
ranked lists are those of the undamaged one, and no leftover."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import copy_index, make_pool, photo_index

from retrieval.app.index import Index
from retrieval.cli.main import main


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def killed_at(point, args) -> None:
    env = dict(os.environ, RETRIEVAL_CRASH_AT=point, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "retrieval.cli", "-q", *map(str, args)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == -signal.SIGKILL, f"not killed at {point}: {res.returncode} {res.stderr[-2000:]}"


def ranked(index, q) -> list:
    idx = Index.open(index)
    try:
        return [(h.path, round(h.score, 5)) for h in idx.search(str(q), k=8, rerank="none")]
    finally:
        idx.close()


def leftovers(index: Path) -> list[str]:
    found = [p.name for folder in ("gens", "segments") for p in (index / folder).iterdir() if p.name.endswith(".tmp")]
    return found + [name for name in ("model.tmp", "model.backup.tmp") if (index / name).exists()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An index of 6 then 8 photos (two generations), its folder, a second folder of 2 more photos, the query and
    its ranked list."""
    d = tmp_path_factory.mktemp("kill9-writes")
    pool = make_pool(d / "pool")
    index, photos = photo_index(d, pool, (6, 2), "test-kill9")
    more = d / "more"
    more.mkdir()
    for p in pool[8:10]:
        shutil.copy(p, more)
    q = photos / pool[0].name
    return index, photos, more, q, ranked(index, q)


def newest_segment(index: Path) -> Path:
    def segments(g):
        return [s["name"] for s in json.loads((index / "gens" / f"{g:08d}" / "state.json").read_text())["segments"]]

    return index / "segments" / [s for s in segments(2) if s not in segments(1)][-1]


def damage(index: Path, *, model_copy: bool) -> None:
    """The model (and its copy) and the newest generation's own segment truncated."""
    for folder in ("model", "model.backup") if model_copy else ("model",):
        npz = sorted((index / folder).glob("*.npz"))[0]
        npz.write_bytes(npz.read_bytes()[:150])
    vec = newest_segment(index) / "vectors.npy"
    vec.write_bytes(vec.read_bytes()[:64])


def search_answers_or_says_one_line(index, q) -> None:
    res = run(["query", q, "--index", index])
    assert "Traceback" not in res.output, res.output
    assert res.exit_code == 0 or len(res.output.strip().splitlines()) == 1, res.output


def repaired_equals(index, q, want) -> None:
    res = run(["check", "--repair", "--index", index])
    assert res.exit_code == 0, res.output
    assert ranked(index, q) == want
    assert run(["check", "--index", index]).exit_code == 0
    assert leftovers(index) == []


@pytest.mark.parametrize("point", ["restore", "array", "segments", "publish", "catalog", "commit", "cleanup", "backup"])
def test_kill9_at_every_step_of_a_repair_from_the_model_copy(built, tmp_path, point):
    index0, _, _, q, want = built
    index = copy_index(index0, tmp_path / "index")
    damage(index, model_copy=False)
    killed_at(point, ["check", "--repair", "--index", index])
    search_answers_or_says_one_line(index, q)
    repaired_equals(index, q, want)


@pytest.mark.parametrize("point", ["model", "array", "commit", "cleanup"])
def test_kill9_at_the_steps_of_a_repair_that_learns_the_model_again(built, tmp_path, point):
    index0, _, _, q, want = built
    index = copy_index(index0, tmp_path / "index")
    damage(index, model_copy=True)
    killed_at(point, ["check", "--repair", "--index", index])
    search_answers_or_says_one_line(index, q)
    repaired_equals(index, q, want)


WRITES = {"sync": lambda index, photos, more, q: ["index", more, "--index", index, "--add-root", "--workers", "1"],
          "remove": lambda index, photos, more, q: ["remove", q, "--index", index],
          "merge": lambda index, photos, more, q: ["compact", "--index", index]}


@pytest.mark.parametrize("point", ["cleanup", "backup"])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_kill9_after_the_commit_of_a_write_keeps_it_committed(built, tmp_path, write, point):
    """Killed after its commit, before the old generations are removed (``cleanup``) or the catalog's copy is
    updated (``backup``): the change is committed and searchable, ``check`` notes the copy is stale, and ``check
    --repair`` makes it again; the same write run again completes, without leftovers."""
    index0, photos, more, q, _ = built
    index = copy_index(index0, tmp_path / "index")
    args = WRITES[write](index, photos, more, q)
    reference = copy_index(index0, tmp_path / "reference")
    assert run(WRITES[write](reference, photos, more, q)).exit_code == 0
    probe = more / sorted(p.name for p in more.iterdir())[0] if write == "sync" else photos / sorted(
        p.name for p in photos.iterdir())[1]
    want = ranked(reference, probe)
    killed_at(point, args)
    assert ranked(index, probe) == want      # committed: the search sees the change
    res = run(["check", "--index", index])
    assert res.exit_code == 0 and "catalog.backup.db: stale" in res.output, res.output   # noted, not damage
    res = run(["check", "--repair", "--index", index])
    assert res.exit_code == 0 and "catalog.backup.db made again" in res.output, res.output
    assert ranked(index, probe) == want
    if write != "remove":   # a remove of a path no longer indexed is refused
        assert run(args).exit_code == 0
        assert ranked(index, probe) == want and leftovers(index) == []


@pytest.mark.parametrize("point", ["extract", "encode", "array", "segments", "publish", "catalog", "commit", "cleanup",
                                   "backup"])
def test_kill9_at_every_step_of_a_sync_then_a_search(built, tmp_path, point):
    """A sync adding a folder killed at each of its steps: a search right after answers from the state before the
    sync (killed before its commit) or after it (killed after), never a mixture; the sync run again completes."""
    index0, photos, more, q, _ = built
    index = copy_index(index0, tmp_path / "index")
    args = WRITES["sync"](index, photos, more, q)
    reference = copy_index(index0, tmp_path / "reference")
    assert run(WRITES["sync"](reference, photos, more, q)).exit_code == 0
    probe = more / sorted(p.name for p in more.iterdir())[0]
    before, after = ranked(index, probe), ranked(reference, probe)
    assert before != after
    killed_at(point, args)
    assert ranked(index, probe) == (after if point in ("commit", "cleanup", "backup") else before)
    assert run(args).exit_code == 0
    assert ranked(index, probe) == after and leftovers(index) == []
