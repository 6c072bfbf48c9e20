"""The catalog queried, not loaded: keyset pages, counts kept by the catalog, the incremental backup, the row
lookup of a searcher while a sync commits, and a catalog made before the counts existed.

The rows are synthetic catalog rows (the catalog never reads the image files): what is tested is SQLite's
bookkeeping, checked against plain ``SELECT`` queries of the same database."""

from __future__ import annotations

import random
import sqlite3
import threading
from contextlib import closing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.app.catalog import Catalog, CatalogChanges, CatalogRows
from retrieval.app.integrity import CATALOG_BACKUP, restore_catalog
from retrieval.app.searcher import Searcher
from retrieval.engine.config import Preset
from retrieval.engine.hits import Hit
from retrieval.engine.params import Offer, SearchParams
from retrieval.engine.presets import load_preset


def _row(i, path=None, status="indexed"):
    return {"id": i, "path": path or f"/photos/{i:05d}.jpg", "hash": f"{i:032x}", "size": 100 + i, "mtime": 1.0 * i,
            "width": 10, "height": 20, "orientation": 1, "n_features": 5, "status": status,
            "error": "unreadable" if status == "error" else None}


class Writes:
    """Commits to a catalog the way a sync does (one transaction per commit, a new generation each time)."""

    def __init__(self, cat: Catalog):
        self.cat = cat
        self.next_id = 0

    def commit(self, upserts=(), deletes=(), moves=(), backup=None, meta=None) -> CatalogChanges:
        upserts = list(upserts)
        self.next_id = max([self.next_id, *(r["id"] + 1 for r in upserts)])
        run = self.cat.start_run("test")
        changes = CatalogChanges(run_id=run, next_id=self.next_id, upserts=upserts, deletes=list(deletes),
                                 moves=list(moves), stats={"added": len(upserts)}, extra_meta=meta)
        previous = self.cat.generation()
        self.cat.commit_sync(run_id=run, generation=previous + 1, next_id=self.next_id, upserts=changes.upserts,
                             deletes=changes.deletes, moves=changes.moves, stats=changes.stats,
                             extra_meta=changes.extra_meta)
        if backup is not None:
            self.how = self.cat.update_backup(backup, changes, previous=previous)
        return changes

    def new_rows(self, n, status="indexed"):
        """``n`` rows with new ids (reserved now)."""
        rows = [_row(self.next_id + j, status=status) for j in range(n)]
        self.next_id += n
        return rows


def true_counts(path) -> dict:
    with closing(sqlite3.connect(path)) as con:
        return dict(con.execute("SELECT status, count(*) FROM images GROUP BY status").fetchall())


def tables(path) -> dict:
    """Every row of every table (sorted), and the schema: what two equal catalogs share."""
    with closing(sqlite3.connect(path)) as con:
        out = {name: sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
               for name in ("images", "meta", "runs")}
        out["counts"] = sorted(r for r in con.execute("SELECT status, n FROM counts") if r[1] != 0)
        out["schema"] = sorted(con.execute("SELECT type, name FROM sqlite_master").fetchall())
    return out


# ---------------------------------------------------------------------------------------------- keyset pages
def test_keyset_pages_give_every_row_once_while_rows_come_and_go(tmp_path):
    cat = Catalog(tmp_path / "catalog.db", create=True)
    w = Writes(cat)
    w.commit(w.new_rows(200) + w.new_rows(15, status="error"))
    rng = random.Random(7)
    seen, after, deleted, added = [], None, set(), []
    start = {r["id"] for r in cat.rows() if r["status"] == "indexed"}
    while True:
        page = cat.page(limit=9, after=after)
        assert len(page.rows) <= 9 and all(r["status"] == "indexed" for r in page.rows)
        seen += [r["id"] for r in page.rows]
        if not page.more_after:
            break
        after = page.rows[-1]["id"]
        # between pages, another writer deletes rows (seen and not yet seen) and adds new ones
        alive = sorted({r["id"] for r in cat.rows()} - deleted)
        gone = rng.sample(alive, 3)
        new = w.new_rows(2)
        w.commit(new, deletes=gone)
        deleted |= set(gone)
        added += [r["id"] for r in new]
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    # every row that lived from the start to the end is shown; rows added meanwhile are shown (larger ids)
    assert start - deleted <= set(seen)
    assert set(added) - deleted <= set(seen)
    assert set(seen) <= start | set(added)


def test_pages_backwards_forwards_filter_and_offset(tmp_path):
    cat = Catalog(tmp_path / "catalog.db", create=True)
    w = Writes(cat)
    rows = w.new_rows(50)
    rows[10]["path"] = "/photos/Holiday-Été.jpg"
    rows[40]["path"] = "/photos/holiday-été-2.jpg"
    rows[30]["path"] = "/photos/HOLIDAY.jpg"
    w.commit(rows)
    first = cat.page(limit=20)
    assert [r["id"] for r in first.rows] == list(range(20)) and first.more_after and not first.more_before
    assert first.total == 50 and first.generation == 1
    second = cat.page(limit=20, after=first.rows[-1]["id"])
    assert [r["id"] for r in second.rows] == list(range(20, 40)) and second.more_before
    back = cat.page(limit=20, before=second.rows[0]["id"])
    assert back.rows == first.rows and not back.more_before and back.more_after
    last = cat.page(limit=20, after=39)
    assert [r["id"] for r in last.rows] == list(range(40, 50)) and not last.more_after
    assert cat.page(limit=20, offset=45).rows == last.rows[5:]
    # the path filter: case-insensitive, ASCII or not (the same answer as Python's str.lower)
    for needle in ("holiday", "ÉTÉ", "Été-2"):
        want = [r["id"] for r in rows if needle.lower() in r["path"].lower()]
        page = cat.page(limit=2, contains=needle)
        got = [r["id"] for r in page.rows]
        while page.more_after:
            page = cat.page(limit=2, contains=needle, after=page.rows[-1]["id"])
            got += [r["id"] for r in page.rows]
        assert got == want and page.total == len(want), needle
    assert cat.rows_by_ids([30, 999, 2, 30]) == [cat.row_by_id(30), cat.row_by_id(2), cat.row_by_id(30)]
    assert [r["id"] for r in cat.rows_by_hash(f"{7:032x}")] == [7]


# ---------------------------------------------------------------------------------------------- counts
ops = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 3), st.integers(0, 3),
                         st.sampled_from(["indexed", "error"]), st.integers(0, 2**31)), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_counts_equal_count_star_after_any_commits(tmp_path_factory, ops):
    """Each op: (new rows, deleted rows, moved rows, rows re-added at an existing path, status, seed)."""
    path = tmp_path_factory.mktemp("counts") / "catalog.db"
    cat = Catalog(path, create=True)
    w = Writes(cat)
    for n_new, n_del, n_move, n_collide, status, seed in ops:
        rng = random.Random(seed)
        live = cat.rows()
        gone = [r["id"] for r in rng.sample(live, min(n_del, len(live)))]
        keep = [r for r in live if r["id"] not in gone]
        moves = [(r["id"], f"/moved/{seed}/{r['id']}.jpg", 3.0) for r in rng.sample(keep, min(n_move, len(keep)))]
        new = w.new_rows(n_new, status=status)
        # a new row at the path of a live one (a changed file whose old row the commit replaces)
        for r in rng.sample(keep, min(n_collide, len(keep))):
            new.append(dict(w.new_rows(1, status=status)[0], path=r["path"]))
        w.commit(new, deletes=gone, moves=moves)
        assert cat.counts() == true_counts(path)
        assert cat.count() == sum(true_counts(path).values())
    cat.close()


def test_a_catalog_made_before_the_counts_gets_them_when_opened(tmp_path):
    path = tmp_path / "catalog.db"
    cat = Catalog(path, create=True)
    w = Writes(cat)
    w.commit(w.new_rows(30) + w.new_rows(4, status="error"))
    cat.close()
    with closing(sqlite3.connect(path)) as con:   # the schema of the catalogs written before this version
        for name in ("images_count_insert", "images_count_delete", "images_count_status"):
            con.execute(f"DROP TRIGGER {name}")
        con.execute("DROP TABLE counts")
        con.execute("DROP INDEX images_status")
        con.execute("DELETE FROM images WHERE id < 5")
        con.commit()
    cat = Catalog(path)
    assert cat.counts() == true_counts(path) == {"indexed": 25, "error": 4}
    w = Writes(cat)
    w.next_id = 100
    w.commit(w.new_rows(3), deletes=[5, 30])
    assert cat.counts() == true_counts(path) == {"indexed": 27, "error": 3}
    with closing(sqlite3.connect(path)) as con:
        plan = " ".join(r[-1] for r in con.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM images WHERE status = 'error' ORDER BY id LIMIT 5"))
    assert "images_status" in plan


# ---------------------------------------------------------------------------------------------- the backup
def test_incremental_backup_equals_a_full_copy_after_syncs(tmp_path):
    cat = Catalog(tmp_path / "catalog.db", create=True)
    backup = tmp_path / CATALOG_BACKUP
    w = Writes(cat)
    w.commit(w.new_rows(40) + w.new_rows(3, status="error"), backup=backup)
    assert w.how == "full"     # no backup yet
    rng = random.Random(3)
    for step in range(12):
        live = cat.rows()
        gone = [r["id"] for r in rng.sample(live, 3)]
        rest = [r for r in live if r["id"] not in gone]
        moved = rng.sample(rest, 2)
        changed = dict(w.new_rows(1)[0], path=rng.choice(rest)["path"])   # a new row at a live path
        cat.set_meta(excluded=[f"/x/{step}"])   # meta written between commits
        cat.start_run("interrupted one")        # left 'running': the next start_run marks it interrupted
        w.commit(w.new_rows(1, status=rng.choice(["indexed", "error"])) + [changed], deletes=gone,
                 moves=[(r["id"], f"/moved/{step}/{r['id']}.jpg", 9.0) for r in moved], backup=backup,
                 meta={"roots": [f"/r{step}"]})
        assert w.how == "incremental"
        full = tmp_path / f"full{step}.db"
        cat.backup_to(full)
        assert tables(backup) == tables(full) == tables(tmp_path / "catalog.db")
    with closing(sqlite3.connect(backup)) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"   # the one file is the whole copy


def test_a_backup_left_stale_by_a_crash_is_detected_and_made_again(tmp_path):
    cat = Catalog(tmp_path / "catalog.db", create=True)
    backup = tmp_path / CATALOG_BACKUP
    w = Writes(cat)
    w.commit(w.new_rows(10), backup=backup)
    w.commit(w.new_rows(2), deletes=[0])   # killed after the commit, before the backup's update
    assert tables(backup)["images"] != tables(tmp_path / "catalog.db")["images"]
    cat.close()
    done = restore_catalog(tmp_path)        # check --repair
    assert done is not None and "stale: generation 1" in done and "generation 2" in done
    assert tables(backup) == tables(tmp_path / "catalog.db")
    assert restore_catalog(tmp_path) is None
    # without repair, the next commit sees the generation mismatch and copies the whole catalog
    cat = Catalog(tmp_path / "catalog.db")
    w = Writes(cat)
    w.next_id = 12
    w.commit(w.new_rows(1))                 # crash again before the backup
    w.commit(w.new_rows(1), backup=backup)
    assert w.how == "full" and tables(backup) == tables(tmp_path / "catalog.db")
    # a damaged catalog is restored from the backup, with its counts
    cat.close()
    for suffix in ("", "-wal", "-shm"):
        p = tmp_path / f"catalog.db{suffix}"
        if p.exists():
            p.write_bytes(b"overwritten" * 100) if suffix == "" else p.unlink()
    assert "restored" in restore_catalog(tmp_path)
    restored = Catalog(tmp_path / "catalog.db")
    assert restored.generation() == 4 and restored.counts() == true_counts(tmp_path / "catalog.db")


# ---------------------------------------------------------------------------------------------- the searcher's rows
def test_row_lookup_while_a_sync_commits(tmp_path):
    """Reader threads look rows up (one connection each) while a writer deletes, moves and adds: a row is either
    found with the content its id always had, or absent because it was deleted; nothing fails."""
    path = tmp_path / "catalog.db"
    cat = Catalog(path, create=True)
    w = Writes(cat)
    w.commit(w.new_rows(300))
    local = threading.local()
    opened = []

    def connection():
        if getattr(local, "cat", None) is None:
            local.cat = Catalog(path)
            opened.append(local.cat)
        return local.cat

    rows = CatalogRows(connection, cache_rows=50)
    deleted, stop, errors = set(), threading.Event(), []

    def reader(seed):
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                ids = rng.sample(range(400), 20)
                found = rows.get_many(ids)
                for i in ids:
                    r = rows.get(i)
                    for got in (r, found.get(i)):
                        if got is not None:
                            assert got["id"] == i and got["hash"] == f"{i:032x}"
                        elif i < 300:   # absent: only a row deleted by the writer
                            assert i in deleted, i
                    # ids from 300 on are added while this runs: absent, then present
                    assert (i in rows) == (rows.get(i) is not None) or i in deleted or i >= 300
        except Exception as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    rng = random.Random(1)
    for step in range(15):
        gone = rng.sample(sorted(set(range(300)) - deleted), 5)
        deleted.update(gone)   # marked before the commit: a reader may see them gone from now on
        moved = rng.sample(sorted(set(range(300)) - deleted), 3)
        w.commit(w.new_rows(4), deletes=gone, moves=[(i, f"/moved/{step}/{i}.jpg", 2.0) for i in moved])
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for c in opened:
        c.close()


class ListedBackend:
    """A backend whose first stage returns the given ids, every one verified against its features (stands for
    the real backends' use of ``get_features`` during re-ranking)."""

    config = Preset.from_dict(load_preset("default"))
    offer = Offer(methods=("ip",), reranks=("none", "spatial"))
    verifier = None

    def __init__(self, ids):
        self.ids = ids
        self.verified_sizes = []

    def search(self, features, box, params, context):
        self.verified_sizes = [len(context.get_features(i)) for i in self.ids]
        return [Hit(id=i, score=1.0 - j / 10, similarity=1.0 - j / 10) for j, i in enumerate(self.ids[:params.k])]


class Store:
    def get(self, h, key, prefer="full"):
        import numpy as np

        from retrieval.features.types import LocalFeatures
        return LocalFeatures(np.zeros((3, 6), np.float32), np.zeros((3, 128), np.uint8), (10, 20))


def test_a_hit_deleted_since_the_searchers_generation_is_dropped(tmp_path):
    path = tmp_path / "catalog.db"
    cat = Catalog(path, create=True)
    w = Writes(cat)
    w.commit(w.new_rows(6))
    backend = ListedBackend([4, 1, 3])
    extractor = type("Extractor", (), {"config_key": "k", "config": {}})()
    searcher = Searcher(generation=1, backend=backend, rows=CatalogRows(lambda: cat), store=Store(),
                        extractor=extractor, cache=None, verify_threads=1)
    query = type("Q", (), {"features": None, "box": None, "whole": True})()
    assert [(h.rank, h.id, h.path) for h in searcher.search(query, SearchParams(k=3))] == [
        (1, 4, "/photos/00004.jpg"), (2, 1, "/photos/00001.jpg"), (3, 3, "/photos/00003.jpg")]
    w.commit([], deletes=[1], moves=[(3, "/moved/3.jpg", 5.0)])   # a sync commits generation 2 meanwhile
    fresh = Searcher(generation=1, backend=backend, rows=CatalogRows(lambda: cat), store=Store(),
                     extractor=extractor, cache=None, verify_threads=1)
    hits = fresh.search(query, SearchParams(k=3))
    assert [(h.rank, h.id, h.path) for h in hits] == [(1, 4, "/photos/00004.jpg"), (2, 3, "/moved/3.jpg")]
    assert backend.verified_sizes == [3, 0, 3]   # the deleted image: verified against no features


@pytest.mark.parametrize("bad", ["", "abc", "aWQ6eA", "bm90OjE"])
def test_bad_cursor_is_one_line(bad):
    from retrieval.web.service import decode_cursor, encode_cursor
    from retrieval.web.uploads import ApiError

    assert decode_cursor(encode_cursor(1234), "after") == 1234
    with pytest.raises(ApiError) as err:
        decode_cursor(bad, "after")
    assert "after=" in str(err.value) and "\n" not in str(err.value)
