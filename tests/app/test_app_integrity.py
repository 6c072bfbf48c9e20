"""Damaged index files: detected and named in one line, searches fall back to the newest intact generation, and
``retrieval check --repair`` gives an index whose results equal a fresh build (no feature re-extracted)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from conftest import FEATURE_CACHE
from helpers import make_pool, small_preset

from retrieval.app.index import Index
from retrieval.cli.main import main


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("pool"))


def binary_preset():
    """The compact preset made small: its index holds codes.npy."""
    from retrieval.engine.paper_presets import apply_overrides
    from retrieval.engine.presets import load_preset

    p = apply_overrides(load_preset("compact"), ["aggregation.n_components=8", "features.max_side=480"])
    p.update(name="test-compact", version=1)
    return p


def build(tmp_path, pool, n_first=6, n=8, preset=None):
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in pool[:n_first]:
        shutil.copy(p, photos)
    idx = Index.create(tmp_path / "i", preset or small_preset(), feature_store=FEATURE_CACHE)
    idx.sync(photos)
    for p in pool[n_first:n]:
        shutil.copy(p, photos)
    idx.sync(photos)                       # generation 2; generation 1 is kept as the fallback
    return idx, photos


def segment_file(tmp_path, name, gen=2):
    """The file ``name`` of the segment generation ``gen`` added (the segments of a generation are shared with
    the generations before it: damaging the newest one leaves generation ``gen - 1`` intact)."""
    index = tmp_path / "i"

    def segments(g):
        path = index / "gens" / f"{g:08d}" / "state.json"
        return [s["name"] for s in json.loads(path.read_text())["segments"]] if path.exists() else []

    new = [s for s in segments(gen) if s not in segments(gen - 1)]
    return index / "segments" / new[-1] / name


def truncated_vectors(tmp_path, pool, query, keep):
    """An index of two generations whose committed vectors.npy is cut to ``keep`` bytes; returns (photos folder,
    query path, the ranked list the intact index gave)."""
    idx, photos = build(tmp_path, pool)
    q = photos / query.name
    want = ranked(idx, q)
    idx.close()
    vec = segment_file(tmp_path, "vectors.npy")
    vec.write_bytes(vec.read_bytes()[:keep])
    return photos, q, want


def ranked(idx, q):
    return [(h.path, round(h.score, 6)) for h in idx.search(str(q), k=8, rerank="none")]


def test_truncated_state_falls_back_then_repair_equals_a_fresh_build(tmp_path, pool, caplog):
    idx, photos = build(tmp_path, pool)
    q = photos / pool[1].name
    want = ranked(idx, q)           # what the intact index answers: the repaired one must answer the same
    vec = segment_file(tmp_path, "vectors.npy")
    vec.write_bytes(vec.read_bytes()[: vec.stat().st_size // 2])
    again = Index.open(tmp_path / "i")
    got = ranked(again, q)                                   # generation 1: the 6 first images still searchable
    assert "vectors.npy" in caplog.text and "searching generation 1 instead" in caplog.text
    assert len(got) == 6 and got[0][0] == str(q)
    res = run(["check", "--index", str(tmp_path / "i")])
    assert res.exit_code == 1 and "vectors.npy" in res.output and "expected" in res.output
    res = run(["check", "--repair", "--index", str(tmp_path / "i")])
    assert res.exit_code == 0, res.output
    assert "rebuilt from the model and the feature store" in res.output
    assert ranked(Index.open(tmp_path / "i"), q) == want
    assert run(["check", "--index", str(tmp_path / "i")]).exit_code == 0


DAMAGED = {"global": (None, "vectors.npy"), "binary": (binary_preset, "codes.npy"),
           "object": (lambda: "accurate", "searcher/signatures/sigs.npy")}


@pytest.mark.parametrize("kind", ["global", "binary", "object"])
def test_flipped_byte_is_found_by_check_and_repaired(tmp_path, pool, kind):
    make, name = DAMAGED[kind]
    idx, photos = build(tmp_path, pool, preset=make() if make else None)
    q = photos / pool[2].name
    want = ranked(idx, q)
    vec = segment_file(tmp_path, name)
    data = bytearray(vec.read_bytes())
    data[-7] ^= 0x40                                         # same size: only the checksum tells
    vec.write_bytes(bytes(data))
    report = json.loads(run(["check", "--index", str(tmp_path / "i"), "--json"]).output)
    assert not report["ok"] and "checksum mismatch" in report["generations"]["2"][0]
    res = run(["check", "--repair", "--index", str(tmp_path / "i"), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["after_repair"]["ok"]
    assert ranked(Index.open(tmp_path / "i"), q) == want


def test_no_intact_generation_is_one_line_until_repaired(tmp_path, pool):
    idx, photos = build(tmp_path, pool)
    q = photos / pool[0].name
    want = ranked(idx, q)
    segment_file(tmp_path, "ids.npy", gen=1).write_bytes(b"")   # the segment both generations share
    res = run(["query", str(q), "--index", str(tmp_path / "i")])
    assert res.exit_code == 1 and "ids.npy" in res.output and "check --repair" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    res = run(["check", "--repair", "--index", str(tmp_path / "i")])
    assert res.exit_code == 0, res.output
    assert "removed the damaged older generation 1" in res.output
    assert ranked(Index.open(tmp_path / "i"), q) == want


def test_damaged_model_is_named_in_one_line_and_restored_from_its_copy(tmp_path, pool):
    idx, photos = build(tmp_path, pool)
    q = photos / pool[0].name
    want = ranked(idx, q)
    idx.close()
    npz = next((tmp_path / "i" / "model").glob("*.npz"))
    npz.write_bytes(npz.read_bytes()[:100])
    res = run(["query", str(q), "--index", str(tmp_path / "i")])
    assert res.exit_code == 1 and npz.name in res.output and "model is damaged" in res.output
    assert "Traceback" not in res.output and "check --repair" in res.output
    res = run(["check", "--repair", "--index", str(tmp_path / "i")])
    assert res.exit_code == 0 and "restored from its verified copy model.backup/" in res.output, res.output
    assert ranked(Index.open(tmp_path / "i"), q) == want


@pytest.mark.parametrize("target, cut", [("gens/00000002/state.json", 10), ("model/model.json", 10),
                                         ("catalog.db", 0), ("catalog.db", 2000)])
def test_truncated_json_and_catalog_are_named_in_one_line(tmp_path, pool, target, cut):
    idx, photos = build(tmp_path, pool)
    q = photos / pool[0].name
    want = ranked(idx, q)
    idx.close()
    path = tmp_path / "i" / target
    for suffix in ("-wal", "-shm"):
        (tmp_path / "i" / f"catalog.db{suffix}").unlink(missing_ok=True)
    path.write_bytes(path.read_bytes()[:cut] if cut else b"not a database, overwritten" * 40)
    res = run(["query", str(q), "--index", str(tmp_path / "i")])
    assert "Traceback" not in res.output
    if target.startswith("gens/"):
        # the generation's manifest names the damaged file; the search falls back to generation 1
        assert res.exit_code == 0 and "state.json" in res.output and "searching generation 1" in res.output
    else:
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
        assert target.split("/")[-1] in res.output and "damaged" in res.output
        if target == "catalog.db":       # restored from the copy taken after the last commit
            res = run(["check", "--repair", "--index", str(tmp_path / "i")])
            assert res.exit_code == 0 and "catalog.db restored from catalog.backup.db" in res.output, res.output
            assert (tmp_path / "i" / "catalog.db.damaged").exists()
            assert ranked(Index.open(tmp_path / "i"), q) == want


@pytest.mark.parametrize("point", ["array", "publish", "commit"])
def test_kill_9_inside_repair_leaves_a_usable_index(tmp_path, pool, point):
    """``check --repair`` killed (SIGKILL) at each of its crash points: the index still answers (the fallback
    generation, or the repaired one), and a second ``check --repair`` ends with an intact index answering like the
    undamaged one."""
    import os
    import subprocess
    import sys

    photos, q, want = truncated_vectors(tmp_path, pool, pool[3], 100)
    env = dict(os.environ, RETRIEVAL_CRASH_AT=point)
    res = subprocess.run([sys.executable, "-m", "retrieval.cli", "check", "--repair", "--index", str(tmp_path / "i")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == -9
    assert ranked(Index.open(tmp_path / "i"), q)[0][0] == str(q)        # usable right after the crash
    assert run(["check", "--repair", "--index", str(tmp_path / "i")]).exit_code == 0
    assert run(["check", "--index", str(tmp_path / "i")]).exit_code == 0
    assert ranked(Index.open(tmp_path / "i"), q) == want


def test_writers_refuse_a_damaged_generation_instead_of_building_on_an_older_one(tmp_path, pool):
    """A sync or a remove on a damaged committed generation would start from the older fallback state and drop
    what the catalog says is indexed: both refuse in one line until check --repair; nothing is lost."""
    photos, q, want = truncated_vectors(tmp_path, pool, pool[1], 64)
    shutil.copy(pool[9], photos)
    res = run(["-q", "index", str(photos), "--index", str(tmp_path / "i")])
    assert res.exit_code == 1 and "vectors.npy" in res.output and "cannot be changed before it is repaired" in res.output
    res = run(["remove", str(q), "--index", str(tmp_path / "i")])
    assert res.exit_code == 1 and "check --repair" in res.output
    assert run(["check", "--repair", "--index", str(tmp_path / "i")]).exit_code == 0
    assert ranked(Index.open(tmp_path / "i"), q) == want
    res = run(["-q", "index", str(photos), "--index", str(tmp_path / "i")])
    assert res.exit_code == 0 and "9 images indexed" in res.output and "1 added" in res.output
