"""Pages of the catalog's image rows for the photo grid: :func:`page_of` (keyset paging by id, optionally filtered by
status and by a part of the path) and its :class:`Page`. :meth:`retrieval.app.catalog.Catalog.page` calls it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    """One page of image rows (:func:`page_of`), ordered by id.

    ``rows`` (dicts), ``generation`` (read in the same transaction), ``total`` (rows matching the filter, all
    pages), ``more_after`` / ``more_before``: whether rows matching the filter follow the last row / precede the
    first one (the keyset cursors of the next and previous pages are then ``rows[-1]["id"]`` and
    ``rows[0]["id"]``)."""

    rows: list
    generation: int
    total: int
    more_after: bool
    more_before: bool



def page_of(catalog, *, limit: int, after: int | None = None, before: int | None = None, offset: int | None = None,
            status: str | None = "indexed", contains: str | None = None) -> Page:
    """A page of at most ``limit`` rows (of ``status``; None: every status), ordered by id.

    Keyset paging: ``after`` = the id of the last row of the previous page (the rows with a larger id), or
    ``before`` = the id of the first row of the next page (the rows just before it); the cost of a page does
    not grow with its position, and a row is never shown twice nor skipped because others were added or
    removed between pages (the rows added meanwhile appear when their id comes, those removed do not).
    ``offset`` (without ``after`` / ``before``) skips that many rows (SQLite still steps over them).
    ``contains``: only paths containing this, case-insensitive (Unicode-aware lowering when it is not plain
    ASCII; that filter scans the paths, and so does its ``total``)."""
    if after is not None and before is not None:
        raise ValueError("give at most one of after and before.")
    where, params = [], []
    if status is not None:
        where.append("status = ?")
        params.append(status)
    if contains:
        if contains.isascii():
            where.append("instr(lower(path), ?) > 0")
            params.append(contains.lower())
        else:
            catalog.db.conn.create_function("retrieval_lower", 1, str.lower, deterministic=True)
            where.append("instr(retrieval_lower(path), ?) > 0")
            params.append(contains.lower())

    def query(extra, extra_params, order, n, skip=None):
        cond = " AND ".join(where + extra) or "1"
        sql = f"SELECT * FROM images WHERE {cond} ORDER BY id {order} LIMIT ?"
        args = [*params, *extra_params, int(n)]
        if skip:
            sql += " OFFSET ?"
            args.append(int(skip))
        return catalog.select(sql, args)

    def exists(extra, extra_params) -> bool:
        cond = " AND ".join(where + extra)
        return catalog.db.conn.execute(f"SELECT 1 FROM images WHERE {cond} LIMIT 1",
                                    [*params, *extra_params]).fetchone() is not None

    limit = int(limit)
    with catalog.reading():
        gen = catalog.generation()
        if contains:
            cond = " AND ".join(where)
            total = int(catalog.db.conn.execute(f"SELECT count(*) FROM images WHERE {cond}", params).fetchone()[0])
        else:
            total = catalog.count(status)
        if before is not None:
            rows = query(["id < ?"], [int(before)], "DESC", limit + 1)
            more_before = len(rows) > limit
            rows = rows[:limit][::-1]
            more_after = exists(["id >= ?"], [int(before)])
        else:
            extra, extra_params = (["id > ?"], [int(after)]) if after is not None else ([], [])
            rows = query(extra, extra_params, "ASC", limit + 1, None if after is not None else offset)
            more_after = len(rows) > limit
            rows = rows[:limit]
            if rows:
                more_before = exists(["id < ?"], [rows[0]["id"]])
            else:   # past the end: rows before the cursor (or skipped by the offset)
                more_before = exists(["id <= ?"], [int(after)]) if after is not None else bool(offset and total)
    return Page(rows, gen, total, more_after, more_before)
