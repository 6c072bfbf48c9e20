"""An index follows its folders: another folder is refused unless --add-root / --replace-root; a sync that would
drop more than half of the index needs --prune; removed images stay removed until --include; a followed folder
that disappeared is an error, never a reason to drop its images."""

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


def folders(tmp_path, pool, n_a=6, n_b=3):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for p in pool[:n_a]:
        shutil.copy(p, a)
    for p in pool[n_a:n_a + n_b]:
        shutil.copy(p, b)
    return a, b


def paths_of(idx):
    return sorted(r["path"] for r in idx.catalog.snapshot()[1] if r["status"] == "indexed")


def test_another_folder_is_refused_then_added_or_replacing(tmp_path, pool):
    a, b = folders(tmp_path, pool)
    idx = Index.create(tmp_path / "i", small_preset(), feature_store=FEATURE_CACHE)
    idx.sync(a)
    assert idx.roots == [str(a.resolve())] and len(paths_of(idx)) == 6
    with pytest.raises(ValueError, match="is another folder: use add_root to follow both, or replace_root"):
        idx.sync(b)
    assert len(paths_of(idx)) == 6 and idx.info()["runs"] == 1        # refused before anything started
    rep = idx.sync(b, add_root=True)
    assert rep.added == 3 and rep.removed == 0 and len(paths_of(idx)) == 9
    assert idx.roots == [str(a.resolve()), str(b.resolve())]
    rep = idx.sync(a)                                  # a followed folder: both are synced, nothing removed
    assert rep.removed == 0 and rep.unchanged == 9
    with pytest.raises(ValueError, match="would remove 6 of the 9 indexed images.*with prune to confirm"):
        idx.sync(b, replace_root=True)
    rep = idx.sync(b, replace_root=True, prune=True)
    assert rep.removed == 6 and idx.roots == [str(b.resolve())] and len(paths_of(idx)) == 3


def test_missing_followed_folder_and_mass_deletion_change_nothing(tmp_path, pool):
    a, b = folders(tmp_path, pool)
    idx = Index.create(tmp_path / "i", small_preset(), feature_store=FEATURE_CACHE)
    idx.sync(a)
    idx.sync(b, add_root=True)
    shutil.rmtree(b)                                   # an unmounted disk
    with pytest.raises(ValueError, match=r"a folder this index follows, is missing.*nothing was changed"):
        idx.sync(a)
    assert len(paths_of(idx)) == 9
    for p in sorted(a.iterdir())[:5]:                  # 5 of 9 deleted: more than half -> confirm
        p.unlink()
    idx.sync(a, replace_root=True, prune=True)
    assert len(paths_of(idx)) == 1


def test_removed_images_stay_removed_until_included_cli(tmp_path, pool):
    a, _ = folders(tmp_path, pool)
    ix = str(tmp_path / "i")
    pf = tmp_path / "p.json"
    pf.write_text(json.dumps(small_preset()))
    assert run(["-q", "index", str(a), "--index", ix, "--preset", str(pf), "--feature-store",
                str(FEATURE_CACHE)]).exit_code == 0
    victim = str(sorted(a.iterdir())[0].resolve())
    assert run(["remove", victim, "--index", ix]).exit_code == 0
    res = run(["-q", "index", str(a), "--index", ix])
    assert res.exit_code == 0 and "5 images indexed" in res.output       # not re-added
    info = run(["info", "--index", ix])
    assert f"removed    {victim}" in info.output and f"folder     {a.resolve()}" in info.output
    res = run(["-q", "index", str(a), "--index", ix, "--include", victim])
    assert res.exit_code == 0 and "6 images indexed" in res.output and "1 added" in res.output
    res = run(["-q", "index", str(a), "--index", ix, "--include", str(a / "nope.jpg")])
    assert res.exit_code == 1 and "not a removed file" in res.output
    b = tmp_path / "other"
    b.mkdir()
    shutil.copy(pool[10], b)
    res = run(["-q", "index", str(b), "--index", ix])
    assert res.exit_code == 1 and "--add-root" in res.output and "Traceback" not in res.output


def test_list_and_remove_say_which_images(tmp_path, pool):
    a, _ = folders(tmp_path, pool)
    (a / "broken.jpg").write_text("not an image")
    ix = str(tmp_path / "i")
    pf = tmp_path / "p.json"
    pf.write_text(json.dumps(small_preset()))
    assert run(["-q", "index", str(a), "--index", ix, "--preset", str(pf), "--feature-store",
                str(FEATURE_CACHE)]).exit_code == 0
    rows = [json.loads(ln) for ln in run(["list", "--index", ix, "--format", "jsonl"]).output.splitlines()]
    assert sorted(r["status"] for r in rows) == ["failed"] + ["ok"] * 6
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(r["features"] > 0 and r["size"] > 0 and isinstance(r["id"], int) for r in ok)
    victim = ok[0]
    res = run(["remove", str(victim["id"]), "--index", ix])
    assert res.exit_code == 0 and f"removed {victim['id']} {victim['path']}" in res.output
    excluded = run(["list", "--index", ix, "--status", "excluded"]).output.splitlines()
    assert excluded == ["id\tstatus\tsize\tfeatures\tpath", f"-\texcluded\t-\t-\t{victim['path']}"]
    failed = run(["list", "--index", ix, "--status", "failed"]).output.splitlines()
    assert len(failed) == 2 and failed[1].endswith("broken.jpg")
