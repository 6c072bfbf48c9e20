"""Catalog snapshots: one transaction per read, and an earlier snapshot reused only while the generation is the
same (a search then skips reading every row)."""

from __future__ import annotations

from retrieval.app.catalog import Catalog


def _row(i, path):
    return {"id": i, "path": path, "hash": f"{i:032x}", "size": 1, "mtime": 0.0, "width": 10, "height": 10,
            "orientation": 1, "n_features": 5, "status": "indexed", "error": None}


def _commit(cat, gen, upserts=(), deletes=()):
    run = cat.start_run("test")
    cat.commit_sync(run_id=run, generation=gen, next_id=10, upserts=upserts, deletes=deletes, moves=[],
                    stats={"added": len(upserts)})


def test_snapshot_is_reused_until_a_new_generation(tmp_path):
    cat = Catalog(tmp_path / "catalog.db", create=True)
    _commit(cat, 1, [_row(0, "/a.jpg"), _row(1, "/b.jpg")])
    first = cat.snapshot()
    assert first[0] == 1 and [r["path"] for r in first[1]] == ["/a.jpg", "/b.jpg"]
    assert cat.snapshot(reuse=first) is first
    # another process commits the next generation: the reused snapshot is refused, the new rows are read
    other = Catalog(tmp_path / "catalog.db")
    _commit(other, 2, [_row(2, "/c.jpg")], deletes=[0])
    second = cat.snapshot(reuse=first)
    assert second is not first and second[0] == 2
    assert [r["path"] for r in second[1]] == ["/b.jpg", "/c.jpg"]
    assert cat.snapshot(reuse=second) is second

