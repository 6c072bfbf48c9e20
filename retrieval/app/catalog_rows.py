"""The catalog rows of a searcher, read by id when a search needs them: :class:`CatalogRows` (re-exported by
:mod:`retrieval.app.catalog`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable


class CatalogRows:
    """The catalog rows of a searcher, by id, read when asked (never all of them): ``rows.get(id)``,
    ``rows[id]`` (KeyError when absent), ``id in rows``, ``rows.get_many(ids)`` (one query).

    Every lookup goes through ``connection()``, the calling thread's :class:`Catalog` (an SQLite connection
    belongs to its thread), so one :class:`CatalogRows` serves any number of threads; the rows read are kept
    in a bounded LRU cache (``cache_rows`` rows, behind a lock). The rows returned are shared: read them, do
    not modify them.

    Consistency: a lookup reads the committed catalog, which may be of a generation NEWER than the searcher's
    when a sync committed meanwhile. A row changed since shows its new state (a moved file its new path); a row
    deleted since is absent (``get`` gives None): the searcher drops such a hit. Ids are never reused, so a row
    found always describes the content the searcher's generation indexed under that id.
    """

    def __init__(self, connection: Callable[[], object], cache_rows: int = 4096):
        self._connection = connection
        self._cache_rows = int(cache_rows)
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self._lock = threading.Lock()

    def _cached(self, image_id: int) -> dict | None:
        with self._lock:
            row = self._cache.get(image_id)
            if row is not None:
                self._cache.move_to_end(image_id)
            return row

    def _keep(self, rows: Iterable[dict]) -> None:
        with self._lock:
            for r in rows:
                self._cache[int(r["id"])] = r
                self._cache.move_to_end(int(r["id"]))
            while len(self._cache) > self._cache_rows:
                self._cache.popitem(last=False)

    def get(self, image_id, default=None) -> dict | None:
        try:
            image_id = int(image_id)
        except (TypeError, ValueError):
            return default
        row = self._cached(image_id)
        if row is None:
            row = self._connection().row_by_id(image_id)
            if row is None:
                return default
            self._keep([row])
        return row

    def get_many(self, ids: Iterable[int]) -> dict[int, dict]:
        """``{id: row}`` of those of ``ids`` that have a row, the missing ones read in one query."""
        ids = [int(i) for i in ids]
        out = {i: r for i in ids if (r := self._cached(i)) is not None}
        missing = [i for i in dict.fromkeys(ids) if i not in out]
        if missing:
            rows = self._connection().rows_by_ids(missing)
            self._keep(rows)
            out.update((r["id"], r) for r in rows)
        return out

    def __getitem__(self, image_id) -> dict:
        row = self.get(image_id)
        if row is None:
            raise KeyError(image_id)
        return row

    def __contains__(self, image_id) -> bool:
        return self.get(image_id) is not None


class ThreadCatalogs:
    """One catalog connection per thread (an SQLite connection belongs to the thread that opened it):
    :meth:`get` gives the calling thread's, opened by ``open_catalog()`` on first use; :meth:`close_all` closes
    every one (call it when no search runs: SQLite lets a connection be closed from another thread only when it
    is idle). ``first``: the connection of the creating thread, already open."""

    def __init__(self, open_catalog: Callable[[], object], first=None):
        self._open = open_catalog
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all = []
        if first is not None:
            self._local.catalog = first
            self._all.append(first)

    def get(self):
        cat = getattr(self._local, "catalog", None)
        if cat is None:
            cat = self._open()
            self._local.catalog = cat
            with self._lock:
                self._all.append(cat)
        return cat

    def close_all(self) -> None:
        with self._lock:
            catalogs, self._all = self._all, []
        for cat in catalogs:
            try:
                cat.close()
            except Exception:  # noqa: BLE001 - a connection of another thread: closed when that thread ends
                pass
        self._local = threading.local()
