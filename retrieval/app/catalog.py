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

Every change of a sync is written in ONE transaction together with the new ``generation``: a crash before
``COMMIT`` leaves the previous consistent state, a crash after leaves the new one. Readers take their snapshot
(``generation`` + rows) inside one read transaction, which WAL mode isolates from a concurrent writer.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils

from retrieval.core.persistence import crash_point  # noqa: F401  (re-exported for the application)

logger = logging.getLogger(__name__)

CATALOG_FORMAT = "retrieval-catalog"
CATALOG_FORMAT_VERSION = 1

_IMAGE_COLUMNS = {
    "id": int, "path": str, "hash": str, "size": int, "mtime": float, "width": int, "height": int,
    "orientation": int, "n_features": int, "status": str, "error": str, "run": int,
}


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
        self.db = sqlite_utils.Database(sqlite3.connect(str(self.path), check_same_thread=False))
        self.db.execute("PRAGMA busy_timeout = 30000;")
        if create:
            self.db.enable_wal()
            self._create_tables()
        try:
            tables = self.db.table_names()
            fmt = self.get_meta("format") if "meta" in tables else None
        except sqlite3.OperationalError as exc:   # I/O: a full disk, a file-size limit, permissions
            raise OSError(f"{self.path}: cannot use the catalog ({exc}); nothing was committed (is the disk full, or "
                          f"the file size limited?)") from None
        except sqlite3.DatabaseError as exc:      # "file is not a database", "database disk image is malformed"
            raise ValueError(f"{self.path}: the catalog is damaged ({exc}); 'retrieval check --repair --index "
                             f"{self.path.parent}' restores the copy taken after the last commit.") from None
        if "meta" not in tables:
            raise ValueError(f"{self.path}: not a retrieval catalog (no 'meta' table).")
        if fmt != {"name": CATALOG_FORMAT, "version": CATALOG_FORMAT_VERSION}:
            raise ValueError(f"{self.path}: catalog format {fmt!r}; this library reads "
                             f"{CATALOG_FORMAT!r} version {CATALOG_FORMAT_VERSION}.")

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

    def set_meta(self, **values) -> None:
        """Store JSON values in one transaction."""
        with self.db.atomic():
            for k, v in values.items():
                self._set_meta_raw(k, v)

    # ------------------------------------------------------------------ reads
    def snapshot(self, reuse: tuple[int, list[dict]] | None = None) -> tuple[int, list[dict]]:
        """``(generation, rows)`` read in one transaction: a consistent view during a concurrent sync.

        ``reuse``: an earlier snapshot, returned as it is when the generation has not changed since (every change
        of the image rows is committed with a new generation, :meth:`commit_sync`), saving the read of every row;
        its rows must not have been modified."""
        conn = self.db.conn
        conn.execute("BEGIN")
        try:
            gen = int(self._meta_raw("generation") or 0)
            if reuse is not None and reuse[0] == gen:
                return reuse
            rows = [dict(r) for r in self.db.query("SELECT * FROM images ORDER BY id")]
        finally:
            conn.execute("COMMIT")
        return gen, rows

    def generation(self) -> int:
        """The committed generation."""
        return int(self._meta_raw("generation") or 0)

    def rows(self) -> list[dict]:
        """Every image row, ordered by id."""
        return [dict(r) for r in self.db.query("SELECT * FROM images ORDER BY id")]

    def row_by_path(self, path) -> dict | None:
        rows = list(self.db.query("SELECT * FROM images WHERE path = ?", [str(path)]))
        return dict(rows[0]) if rows else None

    def row_by_id(self, image_id: int) -> dict | None:
        """The row of ``image_id`` (None when there is none, ids outside SQLite's int64 included)."""
        if not -(1 << 63) <= int(image_id) < (1 << 63):
            return None
        rows = list(self.db.query("SELECT * FROM images WHERE id = ?", [int(image_id)]))
        return dict(rows[0]) if rows else None

    def count(self, status: str | None = None) -> int:
        if status is None:
            return int(next(iter(self.db.query("SELECT count(*) AS n FROM images")))["n"])
        return int(next(iter(self.db.query("SELECT count(*) AS n FROM images WHERE status = ?", [status])))["n"])

    def runs(self) -> list[dict]:
        return [dict(r) for r in self.db.query("SELECT * FROM runs ORDER BY id")]

    # ------------------------------------------------------------------ runs
    def start_run(self, source: str) -> int:
        """Record the start of a sync; earlier runs still marked ``running`` become ``interrupted``."""
        with self.db.atomic():
            self.db.execute("UPDATE runs SET status = 'interrupted' WHERE status = 'running'")
            cur = self.db.execute("INSERT INTO runs(started, status, source) VALUES (?, 'running', ?)",
                                  [_now(), source])
            return int(cur.lastrowid)

    def end_running_runs(self, status: str) -> None:
        """Close the runs still marked ``running`` with ``status`` (``failed``: an error stopped the sync before
        its commit)."""
        with self.db.atomic():
            self.db.execute("UPDATE runs SET status = ?, finished = ? WHERE status = 'running'", [status, _now()])

    # ------------------------------------------------------------------ the commit of a sync
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
                self.db.execute("DELETE FROM images WHERE path = ? AND id != ?", [row["path"], int(row["id"])])
                row = {c: row.get(c) for c in _IMAGE_COLUMNS if c != "run"}
                cols = ", ".join(row) + ", run"
                marks = ", ".join("?" for _ in row) + ", ?"
                self.db.execute(f"INSERT OR REPLACE INTO images({cols}) VALUES ({marks})", [*row.values(), int(run_id)])
            if not upserts:
                crash_point("catalog")
            self._set_meta_raw("generation", int(generation))
            self._set_meta_raw("next_id", int(next_id))
            for k, v in (extra_meta or {}).items():
                self._set_meta_raw(k, v)
            vals = dict(stats, finished=_now(), status="done")
            cols = ", ".join(f"{c} = ?" for c in vals)
            self.db.execute(f"UPDATE runs SET {cols} WHERE id = ?", [*vals.values(), int(run_id)])

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
        """A consistent copy of the catalog (SQLite's online backup) written atomically to ``path``: what
        ``retrieval check --repair`` restores when ``catalog.db`` is damaged."""
        import os

        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        dst = sqlite3.connect(tmp)
        try:
            self.db.conn.backup(dst)
        finally:
            dst.close()
        os.replace(tmp, path)

    def close(self) -> None:
        self.db.close()
