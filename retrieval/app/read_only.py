"""What keeps a write from the disk, named: a read-only file system, no permission, a full disk (or a file-size
limit), an I/O error.

:func:`read_only_cause` tells, before a write starts, that a folder cannot be written (every writer of
:class:`retrieval.app.folder.IndexFolder` refuses a read-only index at once with :class:`IndexReadOnly`);
:func:`storage_cause` names the cause of an error a write met (OSError numbers and SQLite's messages), so that the
command line and the server answer with the real cause instead of guessing a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
from pathlib import Path

READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
"""The errors of a folder the process may read but not write: a read-only file system, no permission."""
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""The errors of a full disk, a quota or a file-size limit."""

__all__ = ["FULL_ERRNOS", "READ_ONLY_ERRNOS", "IndexReadOnly", "check_writable", "read_only_cause", "storage_cause",
           "writer_active", "writer_lock"]


class IndexReadOnly(OSError):
    """The index folder cannot be written (a read-only file system, or no permission): every write is refused
    before it starts; searches work. ``errno`` is EROFS or EACCES."""


def read_only_cause(path) -> tuple[int, str] | None:
    """``(errno, cause)`` when ``path`` (a file or folder that exists) cannot be written by this process: its file
    system mounted read-only, or no write permission; None when it can (or does not exist)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return errno.EROFS, "read-only file system"
    except OSError:
        pass
    if not os.access(path, os.W_OK):
        return errno.EACCES, f"permission denied: {path}"
    return None


def storage_cause(exc: BaseException) -> str | None:
    """``"read-only"``, ``"permission"``, ``"full"`` or ``"io"`` when ``exc`` (or what caused it) is a write refused
    by the system: a read-only file system, no permission, a full disk / quota / file-size limit (ENOSPC, EDQUOT,
    EFBIG, SQLite's "database or disk is full"), an I/O error (EIO, SQLite's "disk I/O error"); None otherwise."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            if exc.errno == errno.EROFS:
                return "read-only"
            if exc.errno in (errno.EACCES, errno.EPERM):
                return "permission"
            if exc.errno in FULL_ERRNOS:
                return "full"
            if exc.errno == errno.EIO:
                return "io"
        text = str(exc).lower()
        if isinstance(exc, (sqlite3.Error, OSError)):
            if "readonly database" in text or "read-only file system" in text:
                return "read-only"
            if "disk is full" in text or "no space left" in text or "file too large" in text:
                return "full"
            if "permission denied" in text:
                return "permission"
            if "disk i/o error" in text or "input/output error" in text:
                # SQLite does not say which error of the system it met: under a file-size limit (a full quota),
                # that limit is what a write past it meets
                return "full" if isinstance(exc, sqlite3.Error) and file_size_limited() else "io"
        exc = exc.__cause__ or exc.__context__
    return None


def file_size_limited() -> bool:
    """Whether this process runs under a file-size limit (RLIMIT_FSIZE): a write past it fails as on a full disk."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return soft != resource.RLIM_INFINITY


def _refused(index_path, cause: str) -> IndexReadOnly:
    code = errno.EROFS if cause.startswith("read-only") else errno.EACCES
    return IndexReadOnly(code, f"{index_path}: the index is read-only ({cause}); searches work, changes are refused.")


def check_writable(index_path, paths=()) -> None:
    """:class:`IndexReadOnly` (one line naming the cause) when this process cannot write the folder
    ``index_path`` or one of ``paths`` (those that exist)."""
    for p in (index_path, *paths):
        cause = read_only_cause(p)
        if cause is not None:
            raise _refused(index_path, cause[1])


@contextlib.contextmanager
def writer_lock(index_path, check=None):
    """An exclusive lock on ``<index_path>/.lock`` for the duration of a write (released by the kernel when the
    process dies, so a killed run never leaves it held), after ``check()`` (the folder can be written).
    :class:`IndexReadOnly` when the lock file cannot be opened for writing; RuntimeError when another process
    holds the lock."""
    if check is not None:
        check()
    try:
        fd = os.open(Path(index_path) / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if exc.errno in READ_ONLY_ERRNOS:
            raise _refused(index_path, "read-only file system" if exc.errno == errno.EROFS else
                           f"permission denied: {exc.filename}") from None
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another 'retrieval index' or 'remove' is writing to {index_path}; "
                               f"wait for it to finish.") from None
        yield
    finally:
        os.close(fd)


def writer_active(index_path) -> bool:
    """True while another process holds the writer lock of ``index_path``; a lock file this process may only read
    (a read-only index) is tested through a read-only descriptor."""
    lock = Path(index_path) / ".lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)   # closing releases a lock we took
    return False
