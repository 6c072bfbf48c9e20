"""File moves that never replace a file, and the freedesktop.org trash (used by
:mod:`retrieval.app.duplicates.actions`).

:func:`move_file` renames a file on one filesystem, and across filesystems copies it to a temporary name beside
its destination, checks and fsyncs the copy, renames it into place and only then removes the original: a crash
leaves the original, or both, never neither.

:func:`trash_entry` reserves a place in a trash folder as the freedesktop.org Trash specification (1.0) says,
so that desktop file managers list the file and can restore it: the home trash (``$XDG_DATA_HOME/Trash``, by
default ``~/.local/share/Trash``) for a file on its filesystem, else the trash at the top of the file's own
filesystem (``$topdir/.Trash/$uid`` when an administrator made a sticky ``.Trash``, else ``$topdir/.Trash-$uid``,
made with mode 0700). The ``info/NAME.trashinfo`` file is created first, with ``O_EXCL``, which makes ``NAME``
unique; the caller then moves the file to ``files/NAME``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from retrieval.core.persistence import fsync_dir
from retrieval.features.store import file_hash

MAX_TRASH_NAMES = 10000
"""Names tried in a trash folder (``NAME``, ``NAME.2``, ...) before giving up."""


def move_file(src, dst, sha: str | None = None) -> None:
    """Move the file ``src`` to ``dst`` (its folders made), never replacing a file.

    Parameters
    ----------
    src, dst : str — file paths
    sha : str or None — the expected :func:`retrieval.features.store.file_hash` of a copy across filesystems
        (a copy that differs is deleted and the original kept)

    Raises
    ------
    FileExistsError when ``dst`` exists; OSError when the move fails (the original is then in place).
    """
    src, dst = str(src), str(dst)
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "exists", dst)
    folder = os.path.dirname(dst)
    os.makedirs(folder, exist_ok=True)
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        tmp = os.path.join(folder, f".{os.path.basename(dst)}.{os.getpid()}.part")
        try:
            shutil.copy2(src, tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            if sha is not None and file_hash(tmp) != sha:
                raise OSError(errno.EIO, "the copy differs from the original", dst) from None
            if os.path.lexists(dst):
                raise FileExistsError(errno.EEXIST, "exists", dst) from None
            os.replace(tmp, dst)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        fsync_dir(folder)
        os.unlink(src)
    fsync_dir(os.path.dirname(src))
    fsync_dir(folder)


def home_trash() -> Path:
    """The home trash folder: ``$XDG_DATA_HOME/Trash`` (an absolute ``XDG_DATA_HOME`` only, as the XDG base
    directory specification says), else ``~/.local/share/Trash``."""
    data = os.environ.get("XDG_DATA_HOME", "")
    return Path(data if os.path.isabs(data) else os.path.expanduser("~/.local/share")) / "Trash"


def same_device(path, folder) -> bool:
    """True when the file ``path`` is on the filesystem of the folder ``folder`` (or of its nearest existing
    parent): a move between them is a rename, which frees no space."""
    return _same_device(str(path), Path(folder))


def _same_device(path: str, folder: Path) -> bool:
    """True when ``path`` is on the filesystem of ``folder`` (or of its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.lstat(path).st_dev == os.stat(folder).st_dev


def _mount_point(path: str) -> str:
    """The top folder of the filesystem holding ``path`` (the specification's ``$topdir``)."""
    top = os.path.dirname(os.path.realpath(path))
    while not os.path.ismount(top):
        top = os.path.dirname(top)
    return top


def _own_dir(folder: str) -> str:
    """``folder``, made with mode 0700 when absent; OSError unless it is a real folder (no symbolic link) of this
    user."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(errno.EPERM, "cannot use it as the trash folder (not a folder of this user)", folder)
    return folder


def trash_location(path) -> tuple[str, str | None]:
    """(trash folder for the file ``path``, the folder its ``.trashinfo`` ``Path`` is relative to, or None for an
    absolute ``Path``): the home trash on the home trash's filesystem, else the trash at the top of the file's
    filesystem, with paths relative to that top (module docstring). OSError when no trash folder can be used."""
    path = str(path)
    home = home_trash()
    if _same_device(path, home):
        os.makedirs(home, 0o700, exist_ok=True)
        return str(home), None
    top, uid = _mount_point(path), os.getuid()
    admin = os.path.join(top, ".Trash")
    st = os.lstat(admin) if os.path.lexists(admin) else None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        try:
            return _own_dir(os.path.join(admin, str(uid))), top
        except OSError:
            pass   # the specification's next choice
    return _own_dir(os.path.join(top, f".Trash-{uid}")), top


def trash_entry(path) -> tuple[str, str]:
    """Reserve a place in the trash for the file ``path``: (``files/NAME`` to move it to, the ``info/NAME.trashinfo``
    written now). ``NAME`` is the file's name, or ``stem.N.ext`` when taken. The caller moves the file (and deletes
    the ``.trashinfo`` if it cannot). OSError when no trash can be used."""
    path = os.path.abspath(str(path))
    trash, base = trash_location(path)
    files, info = os.path.join(trash, "files"), os.path.join(trash, "info")
    for d in (files, info):
        os.makedirs(d, 0o700, exist_ok=True)
    where = path if base is None else os.path.relpath(os.path.realpath(path), base)
    text = (f"[Trash Info]\nPath={quote(os.fsencode(where))}\n"
            f"DeletionDate={datetime.now():%Y-%m-%dT%H:%M:%S}\n").encode()
    stem, ext = os.path.splitext(os.path.basename(path))
    for n in range(1, MAX_TRASH_NAMES + 1):
        name = f"{stem}{ext}" if n == 1 else f"{stem}.{n}{ext}"
        if os.path.lexists(os.path.join(files, name)):
            continue
        info_path = os.path.join(info, name + ".trashinfo")
        try:
            fd = os.open(info_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(info)
        return os.path.join(files, name), info_path
    raise OSError(errno.EEXIST, f"no free name in the trash after {MAX_TRASH_NAMES} tries", files)
