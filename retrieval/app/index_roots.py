"""The folders an index follows (a mixin of :class:`retrieval.app.index.Index`).

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


class RootsMixin:
    """``roots`` and ``excluded`` of an index; the file list of a folder sync."""

    @property
    def roots(self) -> list[str]:
        """The folders this index follows (absolute paths), in the order they were added."""
        return list(self.catalog.get_meta("roots") or [])

    @property
    def excluded(self) -> list[str]:
        """Paths removed with :meth:`remove`: later syncs leave them out."""
        return list(self.catalog.get_meta("excluded") or [])

    def include(self, paths) -> list[str]:
        """Take removed paths back (the next sync indexes them); returns those that were excluded."""
        wanted = {os.path.abspath(os.path.expanduser(str(p))) for p in paths}
        excluded = self.excluded
        back = [p for p in excluded if p in wanted]
        with self._writer_lock():
            self.catalog.set_meta(excluded=[p for p in excluded if p not in wanted])
        return back

    def _folder_files(self, folder, add_root: bool, replace_root: bool) -> tuple[list[str], list[str]]:
        """(files, roots) of a sync with ``folder``: the image files under every followed folder, without the
        excluded ones, and the folders followed after this sync. Raises ValueError (one line) when ``folder`` is
        not followed and neither ``add_root`` nor ``replace_root`` is given, or when a followed folder is gone."""
        if add_root and replace_root:
            raise ValueError("--add-root and --replace-root exclude each other.")
        root = str(Path(os.path.expanduser(str(folder))).resolve())
        files = set(walk_photos(root))   # validates the folder first
        roots = self.roots
        if replace_root:
            roots = [root]
        elif not roots or root in roots:
            roots = roots or [root]
        elif add_root:
            roots = [*roots, root]
        else:
            raise ValueError(f"{self.path} follows {', '.join(roots)}; {root} is another folder: use --add-root to "
                             f"follow both, or --replace-root to follow only it (the other images are dropped).")
        for r in roots:
            if r == root:
                continue
            if not os.path.isdir(r):
                raise ValueError(f"{r}, a folder this index follows, is missing (an unmounted disk?): nothing was "
                                 f"changed; give --replace-root to follow only {root}.")
            files |= set(walk_photos(r))
        excluded = set(self.excluded)
        return sorted(files - excluded), roots
