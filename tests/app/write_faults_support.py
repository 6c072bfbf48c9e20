"""Fault injection for the write-path tests: :class:`Faults` makes one write step under an index folder fail (or
every one, from a moment on), and :func:`index_state` takes what must not change when a write fails.

A *write step* is a call that changes the disk under the index folder: ``open`` for writing, ``os.open`` with a
write flag, ``mkdir``, ``replace`` / ``rename``, ``link``, ``unlink`` / ``rmdir``, ``fsync``, a SQLite transaction of
the catalog (``sqlite_utils.Database.atomic``, failed at its commit, which SQLite then rolls back) and the opening of
the catalog's backup copy. In counting mode every step is recorded; ``fail_at=k`` makes the k-th raise (once), as a
full disk (ENOSPC), a read-only file system (EROFS), a permission refused (EACCES) or an I/O error (EIO) would:
``OSError`` for a file, the message SQLite gives for the catalog.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import io
import os
import sqlite3
import threading
from pathlib import Path

import sqlite_utils

SQLITE_MESSAGES = {errno.ENOSPC: "database or disk is full", errno.EROFS: "attempt to write a readonly database",
                   errno.EACCES: "attempt to write a readonly database", errno.EIO: "disk I/O error"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
EXPECTED_STATUS = {errno.ENOSPC: 507, errno.EROFS: 503, errno.EACCES: 503, errno.EIO: 500}
"""The answer of the API to a write failing with each error."""
EXPECTED_WORDS = {errno.ENOSPC: "no space left", errno.EROFS: "the index is read-only",
                  errno.EACCES: "the index is read-only", errno.EIO: "I/O error"}


def _fd_path(fd) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{int(fd)}")
    except OSError:
        return None


class Faults:
    """The write steps under ``root`` counted, and one made to fail (module docstring). Use as a context manager
    (the patches are process-wide: every thread's writes are seen)."""

    def __init__(self, root, *, fail_at: int | None = None, error: int = errno.ENOSPC):
        self.root = str(Path(root).resolve())
        self.fail_at = fail_at
        self.error = error
        self.always: int | None = None   # every step fails with this error (a disk that became read-only)
        self.calls: list[tuple[str, str]] = []
        self.failed: tuple[str, str] | None = None
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()

    # ------------------------------------------------------------------ the decision
    def _under(self, path) -> bool:
        if path is None:
            return False
        try:
            p = os.path.abspath(os.fsdecode(path))
        except TypeError:
            return False
        return p == self.root or p.startswith(self.root + os.sep)

    def step(self, kind: str, path) -> None:
        """A write step on ``path``: recorded when under the root; raises when it is the one to fail."""
        if not self._under(path):
            return
        with self._lock:
            i = len(self.calls)
            self.calls.append((kind, os.fsdecode(path)))
            error = self.always or (self.error if i == self.fail_at else None)
            if error is not None and self.failed is None:
                self.failed = (kind, os.fsdecode(path))
        if error is not None:
            if kind.startswith("sqlite"):
                raise sqlite3.OperationalError(SQLITE_MESSAGES[error])
            raise OSError(error, os.strerror(error), os.fsdecode(path))

    # ------------------------------------------------------------------ the patches
    def __enter__(self):
        real = {name: getattr(os, name) for name in ("open", "mkdir", "replace", "rename", "link", "symlink",
                                                        "unlink", "remove", "rmdir", "fsync")}
        real_open, real_atomic, real_connect = builtins.open, sqlite_utils.Database.atomic, sqlite3.connect
        faults = self

        def rel(path, dir_fd):
            if dir_fd is not None and not os.path.isabs(os.fsdecode(path)):
                base = _fd_path(dir_fd)
                return os.path.join(base, os.fsdecode(path)) if base else None
            return path

        def py_open(file, mode="r", *args, **kwargs):
            if not isinstance(file, int) and any(c in mode for c in "wax+"):
                faults.step("open", file)
            return real_open(file, mode, *args, **kwargs)

        def os_open(path, flags, mode=0o777, *, dir_fd=None):
            if flags & WRITE_FLAGS:
                faults.step("os.open", rel(path, dir_fd))
            return real["open"](path, flags, mode, dir_fd=dir_fd)

        def one_path(name):
            def call(path, *args, dir_fd=None, **kwargs):
                where = rel(path, dir_fd)
                if name == "mkdir" or (where is not None and os.path.lexists(where)):   # else ENOENT comes first
                    faults.step(name, where)
                return real[name](path, *args, **({"dir_fd": dir_fd} if dir_fd is not None else {}), **kwargs)
            return call

        def two_paths(name):
            def call(src, dst, *args, **kwargs):
                faults.step(name, dst if faults._under(dst) else src)
                return real[name](src, dst, *args, **kwargs)
            return call

        def fsync(fd):
            faults.step("fsync", _fd_path(fd))
            return real["fsync"](fd)

        @contextlib.contextmanager
        def atomic(db):
            rows = db.conn.execute("PRAGMA database_list").fetchall()
            path = rows[0][2] if rows else None
            with real_atomic(db):
                yield db
                faults.step("sqlite-commit", path)   # inside: the transaction is rolled back

        def connect(database, *args, **kwargs):
            if isinstance(database, (str, os.PathLike)) and "backup" in os.fsdecode(database):
                faults.step("sqlite-open", database)
            return real_connect(database, *args, **kwargs)

        patches = {"open": os_open, "mkdir": one_path("mkdir"), "unlink": one_path("unlink"),
                   "remove": one_path("remove"), "rmdir": one_path("rmdir"), "replace": two_paths("replace"),
                   "rename": two_paths("rename"), "link": two_paths("link"), "symlink": two_paths("symlink"),
                   "fsync": fsync}
        for name, fn in patches.items():
            setattr(os, name, fn)
            self._stack.callback(setattr, os, name, real[name])
        builtins.open = io.open = py_open
        self._stack.callback(setattr, builtins, "open", real_open)
        self._stack.callback(setattr, io, "open", real_open)
        sqlite_utils.Database.atomic = atomic
        self._stack.callback(setattr, sqlite_utils.Database, "atomic", real_atomic)
        sqlite3.connect = connect
        self._stack.callback(setattr, sqlite3, "connect", real_connect)
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False


# ---------------------------------------------------------------------------------------------- what must not change
IGNORED = {"features", "thumbs", ".lock", "catalog.db", "catalog.db-wal", "catalog.db-shm", "catalog.db-journal"}
"""Left out of the byte comparison of the index folder: the feature store (a cache of complete entries, kept by a
failed run for the next one), the thumbnails, the lock, and the catalog itself (compared by its content)."""


def folder_bytes(index) -> dict[str, str]:
    """``{relative path: BLAKE2b}`` of every file of the index folder but :data:`IGNORED` (folders included as
    ``path/``, so that a new empty folder counts too)."""
    index = Path(index)
    out = {}
    for p in sorted(index.rglob("*")):
        rel = p.relative_to(index)
        if rel.parts[0] in IGNORED:
            continue
        if p.is_dir():
            out[rel.as_posix() + "/"] = ""
        else:
            out[rel.as_posix()] = hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
    return out


def catalog_content(index) -> tuple:
    """The catalog's image rows (every column) and meta table, read through a separate read-only connection: what a
    failed write must leave exactly as it was (its runs table records the failed run)."""
    con = sqlite3.connect(f"file:{Path(index) / 'catalog.db'}?mode=ro", uri=True)
    try:
        images = con.execute("SELECT * FROM images ORDER BY id").fetchall()
        meta = con.execute("SELECT key, value FROM meta ORDER BY key").fetchall()
    finally:
        con.close()
    return images, meta


def index_state(index) -> tuple:
    """(catalog content, the index folder's files and their bytes)."""
    return catalog_content(index), folder_bytes(index)
