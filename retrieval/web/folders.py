"""The photos' folders as the web page shows them, and the accent- and case-insensitive filter.

A photo's **folder** is the folder it is in, relative to the folder the index follows that holds it
(``Index.roots``; the server's ``uploads`` folder is one of them), named after that followed folder: the photo
``/home/me/Pictures/été/plage 1.jpg`` of an index following ``/home/me/Pictures`` is in the folder
``Pictures/été``. Two followed folders of the same name are told apart by a suffix (``Pictures (2)``); a photo
under no followed folder (an index built from a list of files) is in its own folder's absolute path, without the
first ``/``. These folder names only select photos of the catalog: no file is ever opened from one.

The filter (:func:`fold`) compares texts after Unicode compatibility decomposition (NFKD), case folding and with
the combining marks removed: ``ete`` finds ``Été``, ``strasse`` finds ``Straße``, ``cafe`` finds ``Café``.

:class:`ServedFolders` keeps one :class:`FolderIndex` per generation of the index (built from the catalog's indexed
rows when a page first needs it after a change: one read of every row's id and path, under a second and a few tens
of megabytes per 100,000 photos), under a lock; a request never changes one.
"""

from __future__ import annotations

import os
import threading
import unicodedata
from dataclasses import dataclass, field

import numpy as np

from retrieval.app.catalog import Page
from retrieval.web.uploads import ApiError


def fold(text: str) -> str:
    """``text`` for accent- and case-insensitive comparison: NFKD, case folded, combining marks removed."""
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", str(text)).casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def root_labels(roots) -> dict[str, str]:
    """{followed folder: its name on the page}: the folder's base name, with `` (2)``, `` (3)``, ... for a name
    already taken."""
    labels, taken = {}, set()
    for root in roots:
        base = os.path.basename(os.path.normpath(str(root))) or "root"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base} ({n})"
        taken.add(name)
        labels[str(root)] = name
    return labels


def folder_of(path: str, roots: list[str], labels: dict[str, str]) -> str:
    """The folder name of the photo at ``path`` (module docstring)."""
    parent = os.path.dirname(path)
    best = None
    for root in roots:
        r = root.rstrip("/") or "/"
        if (parent == r or parent.startswith(r.rstrip("/") + "/")) and (best is None or len(r) > len(best)):
            best = r
    if best is None:
        return parent.strip("/") or "/"
    rel = parent[len(best):].strip("/")
    label = labels.get(best) or labels.get(best + "/") or os.path.basename(best)
    return f"{label}/{rel}" if rel else label


def parents_of(folder: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b", "a/b/c"]``."""
    parts = folder.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


@dataclass(frozen=True)
class Folder:
    """One folder: ``path`` (its name on the page, ``a/b``), ``name`` (its last part), ``photos`` (in it),
    ``total`` (in it and its sub-folders), ``children`` (the paths of its sub-folders, sorted by folded name)."""

    path: str
    name: str
    photos: int
    total: int
    children: tuple = ()

    @property
    def parent(self) -> str | None:
        return self.path.rsplit("/", 1)[0] if "/" in self.path else None

    def to_json(self) -> dict:
        return {"path": self.path, "name": self.name, "parent": self.parent, "photos": self.photos,
                "total": self.total, "children": list(self.children)}


@dataclass(frozen=True)
class FolderIndex:
    """The indexed photos of one generation by folder: ``ids`` (sorted), their ``folders`` and ``keys`` (the
    folded path, what the filter compares), the :class:`Folder` of every folder (``folders_by_path``) and the sorted
    ids of the photos in each (``ids_in``)."""

    generation: int
    ids: np.ndarray
    folders: tuple
    keys: tuple
    folders_by_path: dict = field(default_factory=dict)
    ids_in: dict = field(default_factory=dict)

    @classmethod
    def build(cls, generation: int, rows, roots) -> FolderIndex:
        """From ``rows`` (``(id, path)`` of the indexed photos, any order) and the followed folders ``roots``."""
        roots = [str(r) for r in roots]
        labels = root_labels(roots)
        entries = sorted((int(i), str(p)) for i, p in rows)
        ids = np.fromiter((i for i, _ in entries), dtype=np.int64, count=len(entries))
        names: dict[str, str] = {}   # one string per folder, shared by its photos
        folders = tuple(names.setdefault(f, f) for f in (folder_of(p, roots, labels) for _, p in entries))
        keys = tuple(fold(p) for _, p in entries)
        direct, total, children, members = {}, {}, {}, {}
        for i, f in zip(ids.tolist(), folders, strict=True):
            direct[f] = direct.get(f, 0) + 1
            members.setdefault(f, []).append(i)
        for f, n in direct.items():
            chain = parents_of(f)
            for i, p in enumerate(chain):
                total[p] = total.get(p, 0) + n
                if i:
                    children.setdefault(chain[i - 1], set()).add(p)
        by_path = {p: Folder(p, p.rsplit("/", 1)[-1], direct.get(p, 0), n,
                             tuple(sorted(children.get(p, ()), key=lambda c: (fold(c), c))))
                   for p, n in total.items()}
        return cls(int(generation), ids, folders, keys, by_path,
                   {f: np.asarray(m, dtype=np.int64) for f, m in members.items()})

    def folder_of_id(self, image_id: int) -> str | None:
        """The folder of the photo ``image_id`` (None when it is not one of this generation's indexed photos)."""
        pos = int(np.searchsorted(self.ids, int(image_id)))
        return self.folders[pos] if pos < len(self.ids) and int(self.ids[pos]) == int(image_id) else None

    def top(self) -> list[Folder]:
        """The folders without a parent (the followed folders), sorted by folded name."""
        return sorted((f for f in self.folders_by_path.values() if f.parent is None), key=lambda f: (fold(f.name),
                                                                                                    f.name))

    def folder(self, path: str) -> Folder:
        """The :class:`Folder` called ``path``; ApiError 404 when no indexed photo is in it or under it."""
        f = self.folders_by_path.get(path)
        if f is None:
            raise ApiError(404, f"folder={path[:200]!r}: no indexed photo is in this folder (names are those of "
                                f"GET /api/folders).")
        return f

    def select(self, folder: str | None = None, q: str | None = None) -> np.ndarray:
        """The sorted ids of the photos in ``folder`` (None: every folder; with ``q``: its sub-folders too) whose
        path contains ``q`` (:func:`fold`-ed; None or blank: any)."""
        if folder is not None:
            self.folder(folder)
        needle = fold(q) if q and q.strip() else None
        if needle is None:
            return self.ids if folder is None else self.ids_in.get(folder, np.zeros(0, np.int64))
        under = folder + "/" if folder is not None else None
        keep = [i for i, (f, k) in enumerate(zip(self.folders, self.keys, strict=True))
                if (folder is None or f == folder or (needle is not None and f.startswith(under)))
                and (needle is None or needle in k)]
        return self.ids[np.asarray(keep, dtype=np.int64)]


def page_of(selected: np.ndarray, *, limit: int, after: int | None, before: int | None, offset: int | None):
    """(ids of the page, more_after, more_before) of the sorted ``selected`` ids, with the keyset semantics of
    :meth:`Catalog.page <retrieval.app.catalog.Catalog.page>`."""
    n = len(selected)
    if before is not None:
        end = int(np.searchsorted(selected, int(before), side="left"))
        start = max(0, end - limit)
        return selected[start:end].tolist(), end < n, start > 0
    start = int(np.searchsorted(selected, int(after), side="right")) if after is not None else min(int(offset or 0), n)
    return selected[start:start + limit].tolist(), start + limit < n, start > 0


class ServedFolders:
    """The :class:`FolderIndex` of the served index's current generation (rebuilt when the generation changes)."""

    def __init__(self, service):
        self.service = service
        self._lock = threading.Lock()
        self._current: FolderIndex | None = None

    def current(self) -> FolderIndex:
        idx = self.service.local()
        catalog = idx.catalog
        gen = catalog.generation()
        now = self._current
        if now is not None and now.generation == gen:
            return now
        with self._lock:
            now = self._current
            if now is not None and now.generation == catalog.generation():
                return now
            with catalog.reading():
                gen = catalog.generation()
                rows = [(r["id"], r["path"]) for r in catalog.iter_rows("indexed")]
            built = FolderIndex.build(gen, rows, idx.roots)
            self._current = built
            return built

    def page(self, *, folder: str | None, q: str | None, limit: int, after: int | None, before: int | None,
             offset: int | None) -> Page:
        """A :class:`~retrieval.app.catalog.Page` of the indexed photos of ``folder`` matching ``q``
        (:meth:`FolderIndex.select`), rows from the catalog."""
        index = self.current()
        selected = index.select(folder, q)
        ids, more_after, more_before = page_of(selected, limit=int(limit), after=after, before=before, offset=offset)
        rows = [r for r in self.service.local().catalog.rows_by_ids(ids) if r["status"] == "indexed"]
        return Page(rows, index.generation, int(len(selected)), more_after, more_before)
