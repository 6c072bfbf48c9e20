"""What a write changes: the :class:`Plan` of a sync (a folder walked against the catalog) or of an add (files
given), found by reading only; :class:`retrieval.app.index_build.Writer` applies it.

A sync compares each walked file's size and modification time with its catalog row, hashes only the candidates
that differ, and recognises a file gone from one path and present at another with the same content as a move (no
re-extraction). An add looks each given path up by itself, so that its cost is what is added.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from retrieval.app.index_support import SyncReport, file_stat, progress_callback
from retrieval.core.checks import ParamError
from retrieval.features.store import file_hash

PATH, ID, SIZE, MTIME, STATUS, HASH = range(6)
"""Positions in the tuples of :meth:`Catalog.scan <retrieval.app.catalog.Catalog.scan>` (``SCAN_COLUMNS``)."""


@dataclass
class Plan:
    """The changes a writer found (a sync's walk, or the files given to an add)."""

    run_id: int
    gen: int
    next_id: int
    rows: list            # the catalog's rows as Catalog.scan tuples (training sample; empty when not read)
    to_add: list
    hashes: dict
    stats: dict
    deletes: list
    moves: list
    touched: list
    changed: set
    roots: list | None
    t0: float
    t_stage: float
    extra_meta: dict = field(default_factory=dict)   # more catalog meta committed with the changes


def unchanged_counts(files: list, walked: dict, rows: list) -> tuple[int, int] | None:
    """``(indexed, failed before)`` when the walked ``files`` are exactly the catalog's ``rows`` (every path
    there, none other) with the size and mtime the catalog holds and every row settled (indexed, or failed
    before): what the full comparison of :func:`plan_sync` concludes for an unchanged folder, in one pass over
    the rows. None as soon as anything may differ (the full comparison then runs)."""
    if len(rows) != len(files) or len(walked) != len(files):
        return None
    indexed = failed = 0
    get = walked.get
    for r in rows:
        st = get(r[PATH])
        if st is None or st[0] != r[SIZE] or st[1] != r[MTIME]:
            return None
        if r[STATUS] == "indexed":
            indexed += 1
        elif r[STATUS] == "error":
            failed += 1
        else:
            return None
    return indexed, failed


def plan_sync(catalog, files: list, walked: dict, roots, source: str, *, prune: bool, progress: bool,
              report: SyncReport, t0: float) -> Plan:
    """The plan of a sync of ``files`` (``walked``: their (size, mtime) when a folder walk read them) against
    every row of ``catalog``; ValueError (nothing changed) when it would remove more than half of the indexed
    images without ``prune``. Counts unchanged, failed-before and moved files into ``report``."""
    t_stage = time.perf_counter()
    run_id = catalog.start_run(source)
    # every row as a tuple (path, id, size, mtime, status, hash): Catalog.scan, the one O(rows) read of a sync
    gen, rows = catalog.scan()
    next_id = int(catalog.get_meta("next_id", 0))
    same = unchanged_counts(files, walked, rows) if walked else None
    if same is not None:   # the common case of a large library, one pass over the rows: nothing to compare
        report.unchanged, report.failed_before = same
        report.stage_seconds["scan"] = round(time.perf_counter() - t_stage, 3)
        return Plan(run_id=run_id, gen=gen, next_id=next_id, rows=rows, to_add=[], hashes={}, stats={}, deletes=[],
                    moves=[], touched=[], changed=set(), roots=roots, t0=t0, t_stage=time.perf_counter())
    by_path = {r[PATH]: r for r in rows}
    fileset = set(files)

    # 1. what changed: size + mtime first, the content hash only for candidates
    stats = {}
    candidates = []
    for p in files:
        try:
            stats[p] = walked[p] if p in walked else file_stat(p)
        except OSError as exc:
            report.errors.append((p, f"cannot stat: {exc}"))
            continue
        r = by_path.get(p)
        same = r is not None and r[SIZE] == stats[p][0] and r[MTIME] == stats[p][1]
        if same and r[STATUS] == "indexed":
            report.unchanged += 1
        elif same and r[STATUS] == "error":
            report.failed_before += 1   # reported when it failed; listed by 'retrieval info'; not retried
        else:
            candidates.append(p)

    hashes = {}
    cb, close = progress_callback(progress and len(candidates) > 0, "hashing", len(candidates))
    for j, p in enumerate(candidates):
        try:
            hashes[p] = file_hash(p)
        except OSError as exc:
            report.errors.append((p, f"cannot read: {exc}"))
        if cb:
            cb(j + 1, len(candidates))
    close()
    gone = [r for r in rows if r[PATH] not in fileset]
    gone_by_hash = {}
    for r in gone:
        if r[STATUS] == "indexed":
            gone_by_hash.setdefault(r[HASH], []).append(r)
    deletes, moves, to_add, touched, changed = [], [], [], [], set()
    for p in candidates:
        if p not in hashes:
            continue
        r = by_path.get(p)
        h = hashes[p]
        if r is not None and r[STATUS] == "indexed" and r[HASH] == h:
            touched.append((r[ID], p, stats[p][1]))  # same content, new mtime
            report.unchanged += 1
            continue
        if r is not None:
            deletes.append(r[ID])
            if r[STATUS] == "indexed":
                changed.add(p)
        elif gone_by_hash.get(h):
            old = gone_by_hash[h].pop()
            moves.append((old[ID], p, stats[p][1]))
            report.moved += 1
            continue
        to_add.append(p)
    moved_ids = {m[0] for m in moves}
    for r in gone:
        if r[ID] not in moved_ids:
            deletes.append(r[ID])
            if r[STATUS] == "indexed":
                report.removed += 1
    n_before = sum(r[STATUS] == "indexed" for r in rows)
    if report.removed > n_before / 2 and not prune:
        raise ParamError("prune", False, template="this sync would remove {removed} of the {before} indexed images "
                         "(their files are gone); nothing was changed: run again with {prune} to confirm.",
                         removed=report.removed, before=n_before)
    report.stage_seconds["scan"] = round(time.perf_counter() - t_stage, 3)
    return Plan(run_id=run_id, gen=gen, next_id=next_id, rows=rows, to_add=to_add, hashes=hashes, stats=stats,
                deletes=deletes, moves=moves, touched=touched, changed=changed, roots=roots, t0=t0,
                t_stage=time.perf_counter())


def plan_add(catalog, files: list, roots, *, report: SyncReport, t0: float) -> Plan:
    """The plan of adding ``files`` (new or changed) without reading every catalog row: each path looked up by
    itself. A file whose content is indexed at another path is added as a new image (only a sync recognises
    moves); ``roots``: the followed folders after the add (None: unchanged)."""
    gen = catalog.generation()
    run_id = catalog.start_run(f"add {len(files)}")
    next_id = int(catalog.get_meta("next_id", 0))
    stats, hashes, to_add, deletes, touched, changed = {}, {}, [], [], [], set()
    for p in files:
        try:
            stats[p] = file_stat(p)
            r = catalog.row_by_path(p)
            if r is not None and (r["size"], r["mtime"]) == stats[p] and r["status"] in ("indexed", "error"):
                report.unchanged += r["status"] == "indexed"
                report.failed_before += r["status"] == "error"
                continue
            hashes[p] = file_hash(p)
        except OSError as exc:
            report.errors.append((p, f"cannot read: {exc}"))
            continue
        if r is not None and r["status"] == "indexed" and r["hash"] == hashes[p]:
            touched.append((r["id"], p, stats[p][1]))
            report.unchanged += 1
            continue
        if r is not None:
            deletes.append(r["id"])
            if r["status"] == "indexed":
                changed.add(p)
        to_add.append(p)
    return Plan(run_id=run_id, gen=gen, next_id=next_id, rows=[], to_add=to_add, hashes=hashes, stats=stats,
                deletes=deletes, moves=[], touched=touched, changed=changed, roots=roots, t0=t0,
                t_stage=time.perf_counter())


def given_files(paths) -> list[str]:
    """The absolute paths of ``paths`` (sorted, once each); FileNotFoundError naming the first that is missing."""
    files = sorted({os.path.abspath(os.path.expanduser(str(p))) for p in paths})
    for p in files:
        if not os.path.isfile(p):
            raise FileNotFoundError(f"image {p!r} does not exist.")
    return files
