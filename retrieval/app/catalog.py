"""The SQLite catalog of an index folder (``catalog.db``, through sqlite-utils, WAL mode).

Tables (format ``retrieval-catalog``, version 1, documented in docs/formats.md):

``images``
    one row per file of the photo folder: ``id`` (int, the id used by the search structures), ``path``
    (absolute, unique), ``hash`` (content hash, :func:`retrieval.features.file_hash`), ``size`` (bytes),
    ``mtime`` (seconds), ``width``, ``height`` (original pixels after EXIF orientation), ``orientation`` (EXIF
    tag, 1 when absent), ``n_features``, ``status`` (``"indexed"`` or ``"error"``), ``error`` (the reason when
    the file could not be read), ``run`` (the run that wrote the row).
``meta``
    key -> JSON value: the format, the preset (name, version, full JSON), the model version, the committed
    ``generation`` of the search arrays, the next free image ``id``.
``runs``
    one row per ``sync``: start and end time, status (``running``, ``done``, ``failed``, ``interrupted``) and counts.
``counts``
    ``status`` -> ``n``: the number of image rows of each status, kept by triggers on ``images`` inside the
    transaction that changes them (so it always equals ``count(*)``); a catalog made before this table existed
    gets it, computed once, when it is first opened.

Indexes on ``images``: ``path`` (unique), ``hash``, ``status``. The catalog is queried, never loaded whole by the
application: rows by id, path or hash (:meth:`Catalog.rows_by_ids`, :meth:`Catalog.row_by_path`,
:meth:`Catalog.rows_by_hash`), pages by keyset (:meth:`Catalog.page`), counts from ``counts``; the one O(rows)
read is a sync's comparison with the walked files (:meth:`Catalog.scan`, tuples of six columns).
:class:`CatalogRows` is the row lookup of a searcher.

Every change of a sync is written in ONE transaction together with the new ``generation``: a crash before
``COMMIT`` leaves the previous consistent state, a crash after leaves the new one. Readers take what must agree
(``generation`` + counts, or + a page) inside one read transaction, which WAL mode isolates from a concurrent
writer.

``catalog.backup.db`` (:meth:`Catalog.update_backup`) is kept equal to the catalog after each commit: the same
changes are applied to it in its own transaction (a full copy only when it is missing, unreadable or not at the
generation before the commit).

A catalog in a folder this process cannot write (a read-only file system, no permission) is opened read-only
(``Catalog.read_only``; :func:`retrieval.app.catalog_io.open_read_only`); a write that SQLite refuses is an OSError
naming the catalog and the real cause (full, read-only, permission, I/O), its transaction rolled back.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils

from retrieval.app.catalog_io import open_read_only, storage_error, writes
from retrieval.app.catalog_pages import Page, page_of
from retrieval.app.catalog_rows import CatalogRows  # noqa: F401  (re-exported: the searcher's rows)
from retrieval.app.read_only import read_only_cause
from retrieval.core.persistence import crash_point  # crash_point: also used by the application

logger = logging.getLogger(__name__)

CATALOG_FORMAT = "retrieval-catalog"
CATALOG_FORMAT_VERSION = 1

_IMAGE_COLUMNS = {
    "id": int, "path": str, "hash": str, "size": int, "mtime": float, "width": int, "height": int,
    "orientation": int, "n_features": int, "status": str, "error": str, "run": int,
}

SCAN_COLUMNS = ("path", "id", "size", "mtime", "status", "hash")
"""The columns of :meth:`Catalog.scan`'s tuples, in their order."""

_COUNT_TRIGGERS = {
    "images_count_insert": """CREATE TRIGGER images_count_insert AFTER INSERT ON images BEGIN
        INSERT INTO counts(status, n) VALUES (NEW.status, 1) ON CONFLICT(status) DO UPDATE SET n = n + 1;
    END""",
    "images_count_delete": """CREATE TRIGGER images_count_delete AFTER DELETE ON images BEGIN
        UPDATE counts SET n = n - 1 WHERE status = OLD.status;
    END""",
    "images_count_status": """CREATE TRIGGER images_count_status AFTER UPDATE OF status ON images
        WHEN OLD.status IS NOT NEW.status BEGIN
        UPDATE counts SET n = n - 1 WHERE status = OLD.status;
        INSERT INTO counts(status, n) VALUES (NEW.status, 1) ON CONFLICT(status) DO UPDATE SET n = n + 1;
    END""",
}
"""The triggers that keep ``counts`` equal to ``SELECT status, count(*) FROM images GROUP BY status``."""


@dataclass
class CatalogChanges:
    """What a publish commits to the catalog together with the new generation (:meth:`Catalog.commit_sync`)."""

    run_id: int
    next_id: int
    upserts: list = field(default_factory=list)
    deletes: list = field(default_factory=list)
    moves: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    extra_meta: dict | None = None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Catalog:
    """The catalog database of one index folder.

    Parameters
    ----------
    path : str or Path
        The ``catalog.db`` file.
    create : bool
        Create the tables when missing (otherwise a missing file is an error).
    """

    def __init__(self, path, *, create: bool = False):
        self.path = Path(path)
        if not create and not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no catalog here (not an index folder; build one with "
                                    f"'retrieval index PHOTO_DIR --index DIR').")
        # one connection per thread (retrieval.app.index.Index); closable from any thread once idle
        self.read_only = False
        self.db = sqlite_utils.Database(sqlite3.connect(str(self.path), check_same_thread=False))
        try:
            self.db.execute("PRAGMA busy_timeout = 30000;")
            self.db.execute("PRAGMA recursive_triggers = ON;")   # a row replaced by a conflict fires the delete trigger
            if create:
                self.db.enable_wal()
                self._create_tables()
            tables = self.db.table_names()
        except sqlite3.OperationalError as exc:   # I/O: a full disk, a file-size limit, permissions, read-only
            if create or (read_only_cause(self.path.parent) is None and read_only_cause(self.path) is None):
                raise storage_error(self.path, exc, "opened") from None
            self.db.close()
            self.db, tables = open_read_only(self.path, exc)
            self.read_only = True
        except sqlite3.DatabaseError as exc:      # "file is not a database", "database disk image is malformed"
            raise self._damaged(exc) from None
        try:
            fmt = self.get_meta("format") if "meta" in tables else None
        except sqlite3.OperationalError as exc:
            raise storage_error(self.path, exc, "read") from None
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None
        if "meta" not in tables:
            raise ValueError(f"{self.path}: not a retrieval catalog (no 'meta' table).")
        if fmt != {"name": CATALOG_FORMAT, "version": CATALOG_FORMAT_VERSION}:
            raise ValueError(f"{self.path}: catalog format {fmt!r}; this library reads "
                             f"{CATALOG_FORMAT!r} version {CATALOG_FORMAT_VERSION}.")
        if ("counts" not in tables or not self._has_status_index()) and not self.read_only:
            self._add_counts()

    def _damaged(self, exc) -> ValueError:
        return ValueError(f"{self.path}: the catalog is damaged ({exc}); 'retrieval check --repair --index "
                          f"{self.path.parent}' restores the copy taken after the last commit.")

    # ------------------------------------------------------------------ schema
    def _create_tables(self) -> None:
        with self.db.atomic():
            if "images" not in self.db.table_names():
                self.db["images"].create(_IMAGE_COLUMNS, pk="id", not_null={"path", "status"})
                self.db["images"].create_index(["path"], unique=True)
                self.db["images"].create_index(["hash"])
            if "meta" not in self.db.table_names():
                self.db["meta"].create({"key": str, "value": str}, pk="key")
            if "runs" not in self.db.table_names():
                self.db["runs"].create({
                    "id": int, "started": str, "finished": str, "status": str, "source": str,
                    "added": int, "changed": int, "moved": int, "removed": int, "errors": int,
                }, pk="id")
            if self._meta_raw("format") is None:
                self._set_meta_raw("format", {"name": CATALOG_FORMAT, "version": CATALOG_FORMAT_VERSION})
                self._set_meta_raw("generation", 0)
                self._set_meta_raw("next_id", 0)

    def _has_status_index(self) -> bool:
        return self.db.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'images_status'"
                                    ).fetchone() is not None

    def _add_counts(self) -> None:
        """Give a catalog made before the ``counts`` table its table, triggers and status index: the counts are
        computed once, in one transaction (another process doing the same meanwhile waits, then finds them)."""
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise OSError(f"{self.path}: cannot add the counts to this catalog ({exc}); is it read-only?") from None
        try:
            conn.execute("CREATE INDEX IF NOT EXISTS images_status ON images(status)")
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counts'").fetchone() is None:
                conn.execute("CREATE TABLE counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL)")
                conn.execute("INSERT INTO counts(status, n) SELECT status, count(*) FROM images GROUP BY status")
                for sql in _COUNT_TRIGGERS.values():
                    conn.execute(sql)
                logger.info("%s: counts added to the catalog", self.path)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ meta
    def _meta_raw(self, key):
        rows = list(self.db.query("SELECT value FROM meta WHERE key = ?", [key]))
        return json.loads(rows[0]["value"]) if rows else None

    def _set_meta_raw(self, key, value) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value", [key, json.dumps(value)])

    def get_meta(self, key, default=None):
        """The JSON value stored under ``key`` (``default`` when absent)."""
        value = self._meta_raw(key)
        return default if value is None else value

    @writes
    def set_meta(self, **values) -> None:
        """Store JSON values in one transaction."""
        with self.db.atomic():
            for k, v in values.items():
                self._set_meta_raw(k, v)

    # ------------------------------------------------------------------ reads
    @contextlib.contextmanager
    def reading(self):
        """One read transaction: what is read inside agrees with one committed state (WAL isolates it from a
        concurrent writer)."""
        conn = self.db.conn
        conn.execute("BEGIN")
        try:
            yield self
        finally:
            conn.execute("COMMIT")

    def select(self, sql: str, params=()) -> list[dict]:
        """The rows of the SQL ``sql`` as dicts (column name -> value)."""
        cur = self.db.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def snapshot(self, reuse: tuple[int, list[dict]] | None = None) -> tuple[int, list[dict]]:
        """``(generation, rows)`` of EVERY row, read in one transaction (O(rows) time and memory: the application
        queries instead; kept for scripts and tests).

        ``reuse``: an earlier snapshot, returned as it is when the generation has not changed since (every change
        of the image rows is committed with a new generation, :meth:`commit_sync`), saving the read of every row;
        its rows must not have been modified."""
        with self.reading():
            gen = self.generation()
            if reuse is not None and reuse[0] == gen:
                return reuse
            return gen, self.rows()

    def generation(self) -> int:
        """The committed generation."""
        return int(self._meta_raw("generation") or 0)

    def rows(self) -> list[dict]:
        """Every image row, ordered by id (O(rows): see :meth:`page` and :meth:`iter_rows`)."""
        return self.select("SELECT * FROM images ORDER BY id")

    def iter_rows(self, status: str | None = None, *, batch: int = 1000) -> Iterator[dict]:
        """Every image row (of ``status``, when given), ordered by id, read ``batch`` rows at a time by one
        statement (a consistent view; memory independent of the number of rows)."""
        where, params = ("WHERE status = ?", [status]) if status is not None else ("", [])
        cur = self.db.conn.execute(f"SELECT * FROM images {where} ORDER BY id", params)
        names = [d[0] for d in cur.description]
        try:
            while chunk := cur.fetchmany(batch):
                yield from (dict(zip(names, r, strict=True)) for r in chunk)
        finally:
            cur.close()

    def scan(self) -> tuple[int, list[tuple]]:
        """``(generation, rows)`` with every row as a tuple of :data:`SCAN_COLUMNS` (path, id, size, mtime,
        status, hash), read in one transaction: what a sync compares with the files it walked."""
        with self.reading():
            gen = self.generation()
            rows = self.db.conn.execute(f"SELECT {', '.join(SCAN_COLUMNS)} FROM images").fetchall()
        return gen, rows

    def row_by_path(self, path) -> dict | None:
        rows = self.select("SELECT * FROM images WHERE path = ?", [str(path)])
        return rows[0] if rows else None

    def row_by_id(self, image_id: int) -> dict | None:
        """The row of ``image_id`` (None when there is none, ids outside SQLite's int64 included)."""
        if not -(1 << 63) <= int(image_id) < (1 << 63):
            return None
        rows = self.select("SELECT * FROM images WHERE id = ?", [int(image_id)])
        return rows[0] if rows else None

    def rows_by_ids(self, ids: Iterable[int]) -> list[dict]:
        """The rows of ``ids`` in one query, in the order of ``ids`` (ids without a row left out; a repeated id
        gives its row each time)."""
        ids = [int(i) for i in ids]
        if not ids:
            return []
        found = {r["id"]: r for r in self.select(
            "SELECT * FROM images WHERE id IN (SELECT value FROM json_each(?))", [json.dumps(ids)])}
        return [found[i] for i in ids if i in found]

    def rows_by_hash(self, content_hash: str, status: str | None = None) -> list[dict]:
        """The rows whose content hash is ``content_hash`` (of ``status``, when given), ordered by id."""
        if status is None:
            return self.select("SELECT * FROM images WHERE hash = ? ORDER BY id", [str(content_hash)])
        return self.select("SELECT * FROM images WHERE hash = ? AND status = ? ORDER BY id",
                           [str(content_hash), status])

    def error_rows(self, limit: int) -> list[dict]:
        """``{id, path, error}`` of the first ``limit`` rows of status ``error``, by id (the status index)."""
        return self.select("SELECT id, path, error FROM images WHERE status = 'error' ORDER BY id LIMIT ?",
                           [int(limit)])

    def counts(self) -> dict[str, int]:
        """The number of rows of each status (the ``counts`` table: one row read per status)."""
        return {st: int(n) for st, n in self.db.conn.execute("SELECT status, n FROM counts WHERE n != 0")}

    def count(self, status: str | None = None) -> int:
        """The number of rows (of ``status``), from ``counts``."""
        counts = self.counts()
        return sum(counts.values()) if status is None else counts.get(status, 0)

    def page(self, *, limit: int, after: int | None = None, before: int | None = None, offset: int | None = None,
             status: str | None = "indexed", contains: str | None = None) -> Page:
        """A page of at most ``limit`` rows, ordered by id (:func:`retrieval.app.catalog_pages.page_of`)."""
        return page_of(self, limit=limit, after=after, before=before, offset=offset, status=status,
                       contains=contains)

    def runs(self) -> list[dict]:
        return [dict(r) for r in self.db.query("SELECT * FROM runs ORDER BY id")]

    # ------------------------------------------------------------------ runs
    @writes
    def start_run(self, source: str) -> int:
        """Record the start of a sync; earlier runs still marked ``running`` become ``interrupted``."""
        with self.db.atomic():
            self.db.execute("UPDATE runs SET status = 'interrupted' WHERE status = 'running'")
            cur = self.db.execute("INSERT INTO runs(started, status, source) VALUES (?, 'running', ?)",
                                  [_now(), source])
            return int(cur.lastrowid)

    @writes
    def end_running_runs(self, status: str) -> None:
        """Close the runs still marked ``running`` with ``status`` (``failed``: an error stopped the sync before
        its commit)."""
        with self.db.atomic():
            self.db.execute("UPDATE runs SET status = ?, finished = ? WHERE status = 'running'", [status, _now()])

    @contextlib.contextmanager
    def failed_on_error(self, where):
        """A failure inside marks the runs still ``running`` ``failed`` (nothing was committed: a run must not stay
        ``running``) and is raised again -- itself, even when the runs cannot be marked (a full disk: the next run
        marks them ``interrupted``); ``where`` names the index in the warning."""
        try:
            yield
        except Exception:
            try:
                self.end_running_runs("failed")
            except OSError as exc:
                logger.warning("%s: the failed run could not be marked failed (%s)", where, exc)
            raise

    # ------------------------------------------------------------------ the commit of a sync
    @writes
    def commit_sync(self, *, run_id: int, generation: int, next_id: int, upserts: Iterable[dict],
                    deletes: Iterable[int], moves: Iterable[tuple[int, str, float]], stats: dict,
                    extra_meta: dict | None = None) -> None:
        """Write every change of one sync and the new ``generation`` in ONE transaction.

        Parameters
        ----------
        upserts : iterable of dict
            Full image rows (new, changed, or error rows), keyed by ``id``.
        deletes : iterable of int
            Ids of rows to drop (deleted files, and the old rows of changed files).
        moves : iterable of (id, new_path, new_mtime)
            Files recognised by content hash at a new path (no re-extraction).
        """
        upserts = list(upserts)
        deletes = list(deletes)
        moves = list(moves)
        half = len(upserts) // 2
        with self.db.atomic():
            if deletes:
                self.db.conn.executemany("DELETE FROM images WHERE id = ?", [(int(i),) for i in deletes])
            for image_id, new_path, mtime in moves:
                # a moved file may take the path of a deleted one: free the path first
                self.db.execute("DELETE FROM images WHERE path = ? AND id != ?", [new_path, int(image_id)])
                self.db.execute("UPDATE images SET path = ?, mtime = ?, run = ? WHERE id = ?",
                                [new_path, float(mtime), int(run_id), int(image_id)])
            for j, row in enumerate(upserts):
                if j == half:
                    crash_point("catalog")
                self.db.execute("DELETE FROM images WHERE id = ? OR path = ?", [int(row["id"]), row["path"]])
                row = {c: row.get(c) for c in _IMAGE_COLUMNS if c != "run"}
                cols = ", ".join(row) + ", run"
                marks = ", ".join("?" for _ in row) + ", ?"
                self.db.execute(f"INSERT INTO images({cols}) VALUES ({marks})", [*row.values(), int(run_id)])
            if not upserts:
                crash_point("catalog")
            self._set_meta_raw("generation", int(generation))
            self._set_meta_raw("next_id", int(next_id))
            for k, v in (extra_meta or {}).items():
                self._set_meta_raw(k, v)
            vals = dict(stats, finished=_now(), status="done")
            cols = ", ".join(f"{c} = ?" for c in vals)
            self.db.execute(f"UPDATE runs SET {cols} WHERE id = ?", [*vals.values(), int(run_id)])

    @writes
    def finish_run(self, run_id: int, *, stats: dict, extra_meta: dict | None = None) -> None:
        """Close run ``run_id`` as ``done`` with its counts (and ``extra_meta``) without a new generation: a sync
        that changed nothing."""
        with self.db.atomic():
            for k, v in (extra_meta or {}).items():
                self._set_meta_raw(k, v)
            vals = dict(stats, finished=_now(), status="done")
            cols = ", ".join(f"{c} = ?" for c in vals)
            self.db.execute(f"UPDATE runs SET {cols} WHERE id = ?", [*vals.values(), int(run_id)])

    def backup_to(self, path) -> None:
        """A full copy of the catalog at ``path`` (:func:`retrieval.app.catalog_backup.backup_to`)."""
        from retrieval.app.catalog_backup import backup_to

        backup_to(self, path)

    def update_backup(self, path, changes: CatalogChanges, *, previous: int) -> str:
        """The backup at ``path`` brought to the committed state (:func:`retrieval.app.catalog_backup.update_backup`);
        ``"incremental"`` or ``"full"``."""
        from retrieval.app.catalog_backup import update_backup

        return update_backup(self, path, changes, previous=previous)

    def close(self) -> None:
        self.db.close()
