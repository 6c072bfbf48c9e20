"""The catalog's dealings with the disk (used by :class:`retrieval.app.catalog.Catalog`): a catalog opened from a
folder this process cannot write (:func:`open_read_only`), and SQLite's errors worded with their real cause
(:func:`storage_error`, the :func:`writes` decorator of every catalog write)."""

from __future__ import annotations

import errno
import functools
import logging
import sqlite3
from pathlib import Path

import sqlite_utils

from retrieval.app.read_only import read_only_cause, storage_cause

logger = logging.getLogger("retrieval.app.catalog")

CAUSES = {"full": (errno.ENOSPC, "the disk is full (or the file size limited)"),
          "read-only": (errno.EROFS, "the index is read-only (read-only file system)"),
          "permission": (errno.EACCES, "the index is read-only for this user (permission denied)"),
          "io": (errno.EIO, "the disk reported an I/O error")}
"""The words and error number of each cause of :func:`retrieval.app.read_only.storage_cause`."""

__all__ = ["CAUSES", "open_read_only", "storage_error", "writes"]


def storage_error(path, exc: BaseException, what: str) -> OSError:
    """An OSError (one line naming ``path`` and the real cause, with its errno) for the SQLite error ``exc`` met
    while the catalog was ``what`` (``"written"``, ``"opened"``, ``"read"``)."""
    code, words = CAUSES.get(storage_cause(exc) or "", (errno.EIO, None))
    if words is None:
        cause = read_only_cause(Path(path).parent) or read_only_cause(path)
        if cause is not None:
            code, words = cause[0], f"the index is read-only ({cause[1]})"
    return OSError(code, f"{path}: the catalog could not be {what} ({exc}){': ' + words if words else ''}; nothing "
                         f"was committed.")


def writes(method):
    """A catalog write: a SQLite error becomes an OSError naming the catalog and the real cause
    (:func:`storage_error`); the transaction was rolled back (``Database.atomic``)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as exc:
            raise storage_error(self.path, exc, "written") from exc
    return wrapper


def open_read_only(path, exc) -> tuple[sqlite_utils.Database, list[str]]:
    """``(database, table names)`` of the catalog ``path`` in a folder this process cannot write (a read-only
    file system, no permission), which SQLite failed to open with ``exc``: opened read-only, or, when SQLite cannot
    even keep its shared-memory file there and no write-ahead log is left beside the catalog, as an immutable file
    (nothing can change it). OSError (one line naming the cause) when neither opens."""
    path = Path(path)
    wal = Path(str(path) + "-wal")
    uris = [path.resolve().as_uri() + "?mode=ro"]
    if not wal.exists() or wal.stat().st_size == 0:   # no commit waits in a log: the file is the whole state
        uris.append(path.resolve().as_uri() + "?immutable=1")
    for uri in uris:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        try:
            db = sqlite_utils.Database(conn)
            db.execute("PRAGMA busy_timeout = 30000;")
            tables = db.table_names()
        except sqlite3.DatabaseError:
            conn.close()
            continue
        logger.info("%s: opened read-only (the folder cannot be written)", path)
        return db, tables
    cause = read_only_cause(path.parent) or read_only_cause(path)
    pending = wal.exists() and wal.stat().st_size > 0
    raise OSError(cause[0] if cause else errno.EIO,
                  f"{path}: the catalog cannot be opened ({exc}); the index is read-only "
                  f"({cause[1] if cause else 'unknown cause'})"
                  + (f" and {wal.name} holds commits not yet in the catalog: open it once where it can be written"
                     if pending else "") + ".")
