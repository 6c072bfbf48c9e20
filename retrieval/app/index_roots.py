"""The folders an index follows (:meth:`retrieval.app.index.Index.folder_files`, ``roots``, ``excluded``).

An index remembers the folder(s) it was built from (catalog meta ``roots``). Syncing it with another folder would
drop every image of the first one, so it is refused unless the caller says what it wants: ``add_root`` (follow
both folders) or ``replace_root`` (follow only the new one). A folder the index follows that has disappeared (an
unmounted disk) is an error, never a reason to drop its images. Images removed with ``remove`` stay out of later
syncs (catalog meta ``excluded``) until :meth:`include` takes them back.
"""

from __future__ import annotations

import os
from pathlib import Path

from retrieval.app.index_support import walk_photos
from retrieval.core.checks import ParamError


def folder_files(index_path, roots: list[str], excluded: list[str], folder, add_root: bool,
                 replace_root: bool, stats: dict | None = None, skipped: dict | None = None
                 ) -> tuple[list[str], list[str]]:
    """(files, roots) of a sync with ``folder``: the image files under every followed folder, without the
    ``excluded`` ones, and the folders followed after this sync (``roots``: those followed now); ``stats`` filled
    with each file's (size, mtime), ``skipped`` with the files that are not indexed and why (:func:`walk_photos`).
    Raises ValueError
    (one line) when ``folder`` is not followed and neither ``add_root`` nor ``replace_root`` is given, or when a
    followed folder is gone."""
    if add_root and replace_root:
        raise ParamError("add_root", True, template="{add_root} and {replace_root} exclude each other.")
    root = str(Path(os.path.expanduser(str(folder))).resolve())
    files = walk_photos(root, stats, skipped)   # validates the folder first
    roots = list(roots)
    if replace_root:
        roots = [root]
    elif not roots or root in roots:
        roots = roots or [root]
    elif add_root:
        roots = [*roots, root]
    else:
        raise ParamError("add_root", False, template="{path} follows {roots}; {root} is another folder: use "
                         "{add_root} to follow both, or {replace_root} to follow only it (the other images are "
                         "dropped).", path=str(index_path), roots=", ".join(roots), root=root)
    more = []
    for r in roots:
        if r == root:
            continue
        if not os.path.isdir(r):
            raise ParamError("replace_root", False, template="{missing}, a folder this index follows, is missing (an "
                             "unmounted disk?): nothing was changed; give {replace_root} to follow only {root}.",
                             missing=r, root=root)
        more.append(walk_photos(r, stats, skipped))
    if more:   # several folders (one may hold another): each file once, in order
        files = sorted(set(files).union(*more))
    if excluded:
        gone = set(excluded)
        files = [f for f in files if f not in gone]
    return files, roots
