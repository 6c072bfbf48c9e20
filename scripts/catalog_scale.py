"""Catalog reads at scale: an index whose catalog holds N synthetic rows (no image behind them), and the time and
peak memory of what the application reads from it, each in a fresh process.

    PYTHONPATH=$PWD python scripts/catalog_scale.py --rows 1000000 --dir /tmp/catalog_scale

Measured: ``info`` (Index.info, what /api/info serves), ``page`` (the first keyset page of 48, one in the middle,
and the one after the last), ``page_q`` (a page filtered by a path substring, with its total), ``offset`` (a page at
offset N - 100), ``by_ids`` (rows_by_ids of 100 random ids), ``scan`` (the sync's comparison read),
``snapshot`` (the whole-catalog read the application used before), ``backup`` (the incremental backup after a
commit of 10 changes, then a full copy). Peak RSS is the process's ru_maxrss (imports included: ``baseline`` is a
process that only imports and opens).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(folder: Path, n: int) -> None:
    from retrieval.app.index import Index

    idx = Index.create(folder, preset="default")
    cat = idx.catalog
    run = cat.start_run("synthetic")
    rows = ({"id": i, "path": f"/photos/{i // 1000:04d}/IMG_{i:07d}.jpg", "hash": f"{i:032x}", "size": 2_000_000 + i,
             "mtime": 1.6e9 + i, "width": 4000, "height": 3000, "orientation": 1, "n_features": 2000,
             "status": "error" if i % 1000 == 999 else "indexed", "error": "unreadable" if i % 1000 == 999 else None}
            for i in range(n))
    t = time.perf_counter()
    cat.commit_sync(run_id=run, generation=1, next_id=n, upserts=rows, deletes=[], moves=[], stats={"added": n})
    print(json.dumps({"build_seconds": round(time.perf_counter() - t, 1), "rows": n}))
    idx.close()


def measure(folder: Path, what: str, n: int) -> dict:
    from retrieval.app.catalog import CatalogChanges
    from retrieval.app.index import Index

    idx = Index.open(folder)
    cat = idx.catalog
    out = {}

    def timed(name, fn, repeat=5):
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            value = fn()
            best = min(best, time.perf_counter() - t)
        out[name + "_ms"] = round(best * 1000, 2)
        return value

    if what == "info":
        info = timed("info", idx.info)
        out["images"] = info["images"]
    elif what == "page":
        timed("first", lambda: cat.page(limit=48))
        timed("middle", lambda: cat.page(limit=48, after=n // 2))
        timed("before_middle", lambda: cat.page(limit=48, before=n // 2))
        timed("past_end", lambda: cat.page(limit=48, after=n))
    elif what == "page_q":
        page = timed("page_q", lambda: cat.page(limit=48, contains="img_05"), repeat=3)
        out["total"] = page.total
    elif what == "offset":
        timed("offset", lambda: cat.page(limit=48, offset=n - 100), repeat=3)
    elif what == "by_ids":
        ids = random.Random(0).sample(range(n), 100)
        rows = timed("rows_by_ids", lambda: cat.rows_by_ids(ids))
        out["found"] = len(rows)
    elif what == "scan":
        gen, rows = timed("scan", cat.scan, repeat=1)
        out["rows"] = len(rows)
    elif what == "snapshot":
        gen, rows = timed("snapshot", cat.snapshot, repeat=1)
        out["rows"] = len(rows)
    elif what == "backup":
        backup = folder / "catalog.backup.db"
        if not backup.exists():
            timed("first_full", lambda: cat.backup_to(backup), repeat=1)
        gen = cat.generation()
        run = cat.start_run("bench")
        changes = CatalogChanges(run_id=run, next_id=n + 10, deletes=list(range(gen * 10, gen * 10 + 10)),
                                 upserts=[{"id": n + gen * 10 + j, "path": f"/new/{gen}/{j}.jpg", "hash": "0" * 32,
                                           "size": 1, "mtime": 1.0, "status": "indexed"} for j in range(10)])
        cat.commit_sync(run_id=run, generation=gen + 1, next_id=n + 10, upserts=changes.upserts,
                        deletes=changes.deletes, moves=[], stats={})
        t = time.perf_counter()
        how = cat.update_backup(backup, changes, previous=gen)
        out[f"update_backup_{how}_ms"] = round((time.perf_counter() - t) * 1000, 2)
        timed("full_copy", lambda: cat.backup_to(folder / "full.db"), repeat=1)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, required=True, help="where the index is made (must not exist) or reused")
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:
        if args.only == "build":
            build(args.dir, args.rows)
        else:
            print(json.dumps(measure(args.dir, args.only, args.rows) if args.only != "baseline" else
                             _baseline(args.dir)))
        return
    steps = ([] if args.dir.exists() else ["build"]) + ["baseline", "info", "page", "page_q", "offset", "by_ids",
                                                         "scan", "snapshot", "backup", "backup"]
    for step in steps:
        res = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--dir", str(args.dir),
                              "--only", step], capture_output=True, text=True, cwd=ROOT)
        if res.returncode:
            sys.exit(f"{step}: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}")
        print(f"{step:9} {res.stdout.strip()}", flush=True)


def _baseline(folder: Path) -> dict:
    from retrieval.app.index import Index

    Index.open(folder).catalog.generation()
    return {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


if __name__ == "__main__":
    main()
