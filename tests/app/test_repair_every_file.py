"""``check --repair`` repairs every file of an index, and nothing is deleted before what replaces it is verified.

- Each file of a small index (the catalog and its copy, every file of both generations and of their segments,
  every file of the model and of its verified copy ``model.backup/``) truncated in turn: a search gets at most one
  line naming the damage (the answer of the older generation, or an error) and never a traceback, ``check`` finds
  it, ``check --repair`` repairs it, and the ranked lists are those of the undamaged index.
- The model damaged together with its copy: learnt again from the stored features of its training images with the
  preset's seed (the same ranked lists); the generic model of a small ``default`` index installed again.
- The fallback: the newest generation damaged, ``retrieval index``, ``remove`` and ``compact`` are refused, the
  generation the searches fall back to is still there and answers between every refused write and the repair, and
  after the repair nothing is lost.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FEATURE_CACHE
from helpers import copy_index, make_pool, small_preset

from retrieval.app.index import Index
from retrieval.cli.main import main


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("pool"))


def ranked(index, q) -> list:
    idx = Index.open(index)
    try:
        return [(h.path, round(h.score, 5)) for h in idx.search(str(q), k=8, rerank="none")]
    finally:
        idx.close()


@pytest.fixture(scope="module")
def built(pool, tmp_path_factory):
    """An index of 6 photos, then 8 (two generations, the second adding a segment); its photo folder; the ranked
    lists of three queries."""
    d = tmp_path_factory.mktemp("every-file")
    photos = d / "photos"
    photos.mkdir()
    for p in pool[:6]:
        shutil.copy(p, photos)
    idx = Index.create(d / "index", small_preset("test-repair"), feature_store=FEATURE_CACHE)
    idx.sync(photos, workers=1)
    for p in pool[6:8]:
        shutil.copy(p, photos)
    idx.sync(photos, workers=1)
    idx.close()
    queries = [photos / pool[i].name for i in (0, 3, 7)]
    return d / "index", photos, queries, {q: ranked(d / "index", q) for q in queries}


def index_files(index: Path) -> list[str]:
    """Every file of the index but the feature store (shared by the tests), the lock and the duplicate finder's
    codes (a cache)."""
    return sorted(p.relative_to(index).as_posix() for p in index.rglob("*")
                  if p.is_file() and p.relative_to(index).parts[0] not in ("features", "duplicate-codes", ".lock"))


def search_output_is_one_line_at_most(res) -> None:
    assert "Traceback" not in res.output, res.output
    if res.exit_code != 0:
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
    else:
        notes = [ln for ln in res.output.splitlines() if ln.startswith(("WARNING", "Error", "ERROR"))]
        assert len(notes) <= 1, res.output


def test_each_file_truncated_in_turn_is_found_and_repaired(built, tmp_path):
    index0, photos, queries, want = built
    files = index_files(index0)
    kinds = {f.split("/")[0] for f in files}
    assert {"catalog.db", "catalog.backup.db", "gens", "segments", "model", "model.backup"} <= kinds, files
    assert any(f.endswith("training.json") for f in files)
    problems = []
    for n, rel in enumerate(files):
        index = copy_index(index0, tmp_path / f"i{n}")
        path = index / rel
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2] if len(data) > 1 else b"")
        try:
            search_output_is_one_line_at_most(run(["query", queries[0], "--index", index, "--top", "8"]))
            checked = run(["check", "--index", index])
            assert checked.exit_code == 1 and "Traceback" not in checked.output, checked.output
            repaired = run(["check", "--repair", "--index", index])
            assert repaired.exit_code == 0 and "Traceback" not in repaired.output, repaired.output
            assert {q: ranked(index, q) for q in queries} == want
            assert run(["check", "--index", index]).exit_code == 0
        except AssertionError as exc:
            problems.append(f"{rel}: {exc}")
        shutil.rmtree(index, ignore_errors=True)
    assert problems == []


def damage_model_and_copy(index: Path) -> None:
    for folder in ("model", "model.backup"):
        for p in sorted((index / folder).glob("*.npz"))[:1]:
            p.write_bytes(p.read_bytes()[:200])


def test_a_model_damaged_with_its_copy_is_learnt_again_from_the_stored_features(built, tmp_path):
    index0, photos, queries, want = built
    index = copy_index(index0, tmp_path / "index")
    damage_model_and_copy(index)
    res = run(["query", queries[0], "--index", index])
    assert res.exit_code == 1 and "model is damaged" in res.output and len(res.output.strip().splitlines()) == 1
    res = run(["check", "--repair", "--index", index])
    assert res.exit_code == 0, res.output
    assert "learnt again from the stored features of its 6 training images" in res.output
    assert {q: ranked(index, q) for q in queries} == want
    assert run(["check", "--index", index]).exit_code == 0


def test_the_generic_model_of_a_small_default_index_is_installed_again(pool, tmp_path):
    from retrieval.app.generic_models import generic_model
    from retrieval.engine.presets import load_preset

    if generic_model(load_preset("default")) is None:
        pytest.skip("the generic model of the default preset is not installed ('make setup' builds it)")
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in pool[:8]:
        shutil.copy(p, photos)
    assert run(["-q", "index", photos, "--index", tmp_path / "index", "--workers", "1"]).exit_code == 0
    index, q = tmp_path / "index", photos / pool[2].name
    want = ranked(index, q)
    pca = index / "model" / "local_pca.npz"
    pca.write_bytes(pca.read_bytes()[:100])
    res = run(["query", q, "--index", index])
    assert res.exit_code == 1 and "local_pca.npz" in res.output and len(res.output.strip().splitlines()) == 1
    res = run(["check", "--repair", "--index", index])   # from the verified copy
    assert res.exit_code == 0 and "restored from its verified copy" in res.output, res.output
    assert ranked(index, q) == want
    damage_model_and_copy(index)
    res = run(["check", "--repair", "--index", index])   # the copy damaged too: the generic model again
    assert res.exit_code == 0 and "installed again from the generic model" in res.output, res.output
    assert ranked(index, q) == want


def newest_segment_file(index: Path, name: str) -> Path:
    def segments(g):
        return [s["name"] for s in json.loads((index / "gens" / f"{g:08d}" / "state.json").read_text())["segments"]]

    return index / "segments" / [s for s in segments(2) if s not in segments(1)][-1] / name


def test_refused_writes_keep_the_generation_searches_fall_back_to(built, pool, tmp_path):
    index0, photos0, queries, want = built
    index = copy_index(index0, tmp_path / "index")
    more = tmp_path / "more"   # a second folder to follow, with a new photo
    more.mkdir()
    shutil.copy(pool[9], more)
    q = queries[0]
    vec = newest_segment_file(index, "vectors.npy")
    vec.write_bytes(vec.read_bytes()[:64])
    fallback = ranked(index, q)              # generation 1: the 6 first photos
    assert len(fallback) == 6 and fallback[0][0] == str(q)
    sync = ["-q", "index", more, "--index", index, "--add-root", "--workers", "1"]
    for args in (sync, ["remove", q, "--index", index],
                 ["compact", "--index", index]):
        res = run(args)
        assert res.exit_code == 1 and "vectors.npy" in res.output and "check --repair" in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
        assert (index / "gens" / "00000001").is_dir()
        assert ranked(index, q) == fallback    # searched between every refused write and the repair
    res = run(["check", "--repair", "--index", index])
    assert res.exit_code == 0, res.output
    assert ranked(index, q) == want[q]         # nothing lost
    res = run(sync)
    assert res.exit_code == 0 and "9 images indexed" in res.output, res.output
    assert str(more / pool[9].name) in {p for p, _ in ranked(index, more / pool[9].name)}


def test_a_clean_up_never_reads_an_unreadable_state_file_as_no_segment(built, tmp_path):
    """The older generation's state.json unreadable: a sync must neither delete the segments it may reference
    nor fail; check --repair then removes that generation."""
    index0, photos0, queries, want = built
    index = copy_index(index0, tmp_path / "index")
    (index / "gens" / "00000001" / "state.json").write_text("{not json")
    segments = sorted(p.name for p in (index / "segments").iterdir())
    idx = Index.open(index)
    idx.folder.clear_leftovers(idx.catalog.generation())
    assert sorted(p.name for p in (index / "segments").iterdir()) == segments
    idx.folder.cleanup(keep=[1, 2])
    assert sorted(p.name for p in (index / "segments").iterdir()) == segments
    idx.close()
    res = run(["check", "--repair", "--index", index])
    assert res.exit_code == 0 and "removed the damaged older generation 1" in res.output, res.output
    assert {q: ranked(index, q) for q in queries} == want


def test_old_generations_stay_until_the_new_one_loads_intact(built, pool, tmp_path, monkeypatch, caplog):
    """A sync whose new generation, once committed, does not load intact (made to look damaged here) removes no
    older generation nor segment; once it loads intact, the next write removes them."""
    from retrieval.app.folder import IndexFolder
    from retrieval.app.integrity import DamagedError

    index0, photos, queries, want = built
    index = copy_index(index0, tmp_path / "index")
    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(pool[9], more)
    gens, segments = sorted(p.name for p in (index / "gens").iterdir()), set((index / "segments").iterdir())
    real = IndexFolder.generation_problems

    def damaged_new(self, gen, **kw):
        return [DamagedError(self.gen_dir(gen), "made to look damaged")] if gen == 3 else real(self, gen, **kw)

    monkeypatch.setattr(IndexFolder, "generation_problems", damaged_new)
    idx = Index.open(index)
    assert idx.sync(more, add_root=True, workers=1).generation == 3
    idx.close()
    assert "generation 3 is committed but does not load intact" in caplog.text
    on_disk = sorted(p.name for p in (index / "gens").iterdir())
    assert on_disk == [*gens, "00000003"] and segments <= set((index / "segments").iterdir())
    monkeypatch.setattr(IndexFolder, "generation_problems", real)
    assert run(["remove", more / pool[9].name, "--index", index]).exit_code == 0
    assert sorted(p.name for p in (index / "gens").iterdir()) == ["00000003", "00000004"]
    assert {q: ranked(index, q) for q in queries} == want


def test_every_other_failing_step_of_a_repair_leaves_a_repairable_index(built, tmp_path):
    """``check --repair`` of a damaged model and a damaged newest generation with one of its write steps failing
    (every second one, the errors in turn: :mod:`write_faults_support`): it fails in one line, the index then answers
    (or says in one line what is damaged), and the repair run again ends with the undamaged index's ranked lists."""
    import errno

    from write_faults_support import Faults

    index0, photos, queries, want = built
    errors = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO)

    def damaged(name):
        index = copy_index(index0, tmp_path / name)
        npz = sorted((index / "model").glob("*.npz"))[0]
        npz.write_bytes(npz.read_bytes()[:150])
        vec = newest_segment_file(index, "vectors.npy")
        vec.write_bytes(vec.read_bytes()[:64])
        return index

    probe = damaged("probe")
    with Faults(probe) as counting:
        assert run(["check", "--repair", "--index", probe]).exit_code == 0
    problems, outcomes = [], set()
    for k in range(0, len(counting.calls), 2):
        index = damaged(f"step{k}")
        with Faults(index, fail_at=k, error=errors[(k // 2) % 4]) as faults:
            res = run(["check", "--repair", "--index", index])
        try:
            assert "Traceback" not in res.output, res.output
            if res.exit_code != 0:
                assert len([ln for ln in res.output.splitlines() if ln.startswith("Error")]) == 1, res.output
                search_output_is_one_line_at_most(run(["query", queries[0], "--index", index]))
                again = run(["check", "--repair", "--index", index])
                assert again.exit_code == 0, again.output
                outcomes.add("refused")
            else:
                outcomes.add("done")
            assert {q: ranked(index, q) for q in queries} == want
            assert run(["check", "--index", index]).exit_code == 0
        except AssertionError as exc:
            problems.append(f"step {k} {faults.failed}: {exc}")
        shutil.rmtree(index, ignore_errors=True)
    assert problems == []
    assert outcomes == {"refused", "done"}, outcomes
