"""The copy of the catalog that ``retrieval check --repair`` restores (``catalog.backup.db``): brought to the committed
state after each commit by applying the commit's changes (:func:`update_backup`), copied whole (:func:`backup_to`)
only when it is missing or behind."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

from retrieval.core.persistence import fsync_dir

logger = logging.getLogger("retrieval.app.catalog")


def backup_to(catalog, path) -> None:
    """A full consistent copy of the catalog (SQLite's online backup) written atomically to ``path`` (a
    temporary file, fsynced, renamed), in rollback-journal mode so that the one file is the whole copy: what
    ``retrieval check --repair`` restores when ``catalog.db`` is damaged."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    dst = sqlite3.connect(tmp)
    try:
        catalog.db.conn.backup(dst)
        dst.execute("PRAGMA journal_mode = DELETE")
    finally:
        dst.close()
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def update_backup(catalog, path, changes, *, previous: int) -> str:
    """Bring the backup at ``path`` to the catalog's committed state after a commit of ``changes`` made on
    generation ``previous``: the same image changes (the rows read back from the catalog), the ``meta``
    table and the runs added or still running since, in ONE transaction of the backup (cost proportional to
    the changes). A full copy (:func:`backup_to`) instead when the backup is missing, unreadable, made before
    the ``counts`` table, or not at generation ``previous`` (a crash came between an earlier commit and its
    backup). Returns ``"incremental"`` or ``"full"``."""
    path = Path(path)
    try:
        if not path.exists():
            raise LookupError("missing")
        _apply_to_backup(catalog, path, changes, previous)
        return "incremental"
    except (LookupError, sqlite3.DatabaseError) as exc:
        logger.debug("%s: full copy (%s)", path, exc)
    backup_to(catalog, path)
    return "full"


def _apply_to_backup(catalog, path: Path, changes, previous: int) -> None:
    ids = [int(r["id"]) for r in changes.upserts] + [int(m[0]) for m in changes.moves]
    paths = [r["path"] for r in changes.upserts] + [m[1] for m in changes.moves]
    with catalog.reading():
        rows = catalog.rows_by_ids(ids)
        meta = catalog.db.conn.execute("SELECT key, value FROM meta").fetchall()
    bak = sqlite3.connect(path, isolation_level=None)
    try:
        bak.execute("PRAGMA recursive_triggers = ON")
        if bak.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
            raise LookupError("in WAL mode")
        bak.execute("BEGIN IMMEDIATE")
        try:
            if bak.execute("SELECT 1 FROM sqlite_master WHERE name = 'counts'").fetchone() is None:
                raise LookupError("made before the counts table")
            gen = bak.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
            if gen is None or int(json.loads(gen[0])) != int(previous):
                raise LookupError(f"at generation {gen and gen[0]}, not {previous}")
            gone = json.dumps([int(i) for i in changes.deletes] + ids)
            bak.execute("DELETE FROM images WHERE id IN (SELECT value FROM json_each(?))", [gone])
            bak.execute("DELETE FROM images WHERE path IN (SELECT value FROM json_each(?))", [json.dumps(paths)])
            if rows:
                cols = list(rows[0])
                bak.executemany(f"INSERT INTO images({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                                [[r[c] for c in cols] for r in rows])
            bak.execute("DELETE FROM meta")
            bak.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta)
            # runs change only while 'running' (start_run, end_running_runs, commit_sync): copy those and the new
            last = bak.execute("SELECT coalesce(max(id), -1) FROM runs").fetchone()[0]
            open_runs = [r[0] for r in bak.execute("SELECT id FROM runs WHERE status = 'running'")]
            runs = [dict(r) for r in catalog.db.query(
                    "SELECT * FROM runs WHERE id > ? OR id IN (SELECT value FROM json_each(?))",
                    [last, json.dumps(open_runs)])]
            if runs:
                cols = list(runs[0])
                bak.executemany(f"INSERT OR REPLACE INTO runs({', '.join(cols)}) "
                                f"VALUES ({', '.join('?' for _ in cols)})", [[r[c] for c in cols] for r in runs])
            bak.execute("COMMIT")
        except BaseException:
            bak.execute("ROLLBACK")
            raise
    finally:
        bak.close()
